"""Exports `halve.onnx`: a TorchScript while loop over data, as `torch.onnx.export` writes one (a
`Loop` with the trip count INT64_MAX and a condition computed from the carried tensor).

    python3 export_halve.py   # needs torch and onnx
"""

import torch


class Halve(torch.nn.Module):
    """Halves `x` until its absolute sum is at most 1; returns it and the number of halvings."""

    def forward(self, x):
        y = x
        steps = torch.zeros(1)
        while bool(y.abs().sum() > 1.0):
            y = y * 0.5
            steps = steps + 1
        return y, steps


if __name__ == "__main__":
    torch.onnx.export(
        torch.jit.script(Halve()),
        (torch.randn(4, 64),),
        "halve.onnx",
        dynamo=False,
        input_names=["x"],
        output_names=["y", "steps"],
        opset_version=17,
        dynamic_axes={"x": {0: "batch"}},
    )
