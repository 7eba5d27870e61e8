#!/usr/bin/env python3
"""Exports saggar-onnx's test models from PyTorch, with expected outputs, checked by ONNX Runtime.

Usage (on a machine with the pinned versions of requirements.txt; CI never runs this, it uses the files):

    python3 export.py --out crates/saggar-onnx/models                 # the four repository models
    python3 export.py --out DIR --only bert-base                      # BERT-base-sized encoder (benches)

Each model lands in OUT/<name>/: `model.onnx` (weights inline, random with a fixed seed), and
`test_data_set_{0,1,2}/` for batches 3, 1 and 17 with `input_K.pb` / `output_K.pb` (ONNX TensorProto,
the layout of the ONNX backend test suite). Expected outputs are PyTorch's; every data set is also run
through ONNX Runtime (CPU) and the export is refused if the two differ by more than 1e-4 (abs) + 1e-3
(rel). Inputs use a shape other than the export's (batch 2, sequence 8), and BERT's attention masks zero
some positions, so an export that baked a shape in is caught (see shared notes: the TorchScript exporter
does exactly that; the dynamo exporter does not). OUT/<name>/export.json records versions, the op census
and the measured differences; `torch_module.py`-free reconstruction is possible from `--seed` alone.

Models:
  bert      transformers BertModel, random weights, 2 layers, hidden 64, 4 heads, intermediate 256,
            vocab 1000; inputs input_ids, attention_mask (int64 [batch, seq]); outputs
            last_hidden_state [batch, seq, 64], pooler_output [batch, 64]; dynamic batch and seq.
  dlrm      DLRM-style recommender: 13 dense features through a bottom MLP, 26 embedding tables (bags of 4
            indices as Embedding + sum, since nn.EmbeddingBag exports as a Loop), concatenated, top MLP,
            sigmoid; inputs dense f32 [batch, 13], sparse_0..25 int64 [batch, 4]; output score [batch, 1].
  mlp       128 -> 256 -> 256 -> 10 with GELU, ReLU and Softmax; input x f32 [batch, 128].
  cnn       small ResNet-style CNN on 3x32x32: conv-BN-ReLU stem, two basic blocks (the second strided, with
            a 1x1 projection), max pool, global average pool, linear 10; input image f32 [batch, 3, 32, 32].
  bert-base BertModel hidden 768, 12 layers, 12 heads, vocab 30522 (about 420 MB; not stored in the repository).
"""

import argparse
import json
import os
import sys

PINNED = {"torch": "2.11", "transformers": "5.17", "onnx": "1.23", "onnxruntime": "1.30"}
BATCHES = [3, 1, 17]  # test_data_set_0, _1, _2
SEQ = 16  # sequence length of the BERT data sets (the export uses 8)


def check_versions(allow_other):
    import importlib

    found = {}
    for name, want in PINNED.items():
        version = importlib.import_module(name).__version__
        found[name] = version
        if not version.startswith(want) and not allow_other:
            sys.exit(f"export.py: {name} {version} found, {want}.x pinned (requirements.txt); "
                     "pass --allow-other-versions to export anyway")
    return found


def build(name, seed):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if name in ("bert", "bert-base"):
        from transformers import BertConfig, BertModel

        if name == "bert":
            cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=256, max_position_embeddings=128)
        else:
            cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=512)
        bert = BertModel(cfg).eval()

        class Bert(nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask):
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
                return out.last_hidden_state, out.pooler_output

        vocab = cfg.vocab_size

        def inputs(batch, seq, rng):
            ids = torch.from_numpy(rng.integers(0, vocab, size=(batch, seq))).long()
            mask = torch.ones(batch, seq, dtype=torch.long)
            for b in range(batch):  # each row keeps a different number of real tokens (at least 1)
                mask[b, max(1, seq - (b * 5 + 3) % seq):] = 0
            return {"input_ids": ids, "attention_mask": mask}

        dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
        return Bert().eval(), inputs, dims, ["last_hidden_state", "pooler_output"]

    if name == "dlrm":
        tables = [50 + 7 * t for t in range(26)]

        class Dlrm(nn.Module):
            def __init__(self):
                super().__init__()
                self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 16), nn.ReLU())
                self.tables = nn.ModuleList(nn.Embedding(rows, 16) for rows in tables)
                self.top = nn.Sequential(nn.Linear(16 * 27, 64), nn.ReLU(), nn.Linear(64, 1), nn.Sigmoid())

            def forward(self, dense, *sparse):
                feats = [self.bottom(dense)] + [t(idx).sum(1) for t, idx in zip(self.tables, sparse)]
                return self.top(torch.cat(feats, 1))

        def inputs(batch, _seq, rng):
            x = {"dense": torch.from_numpy(rng.standard_normal((batch, 13)).astype("float32"))}
            for t, rows in enumerate(tables):
                x[f"sparse_{t}"] = torch.from_numpy(rng.integers(0, rows, size=(batch, 4))).long()
            return x

        dims = {"dense": {0: "batch"}, **{f"sparse_{t}": {0: "batch"} for t in range(26)}}
        return Dlrm().eval(), inputs, dims, ["score"]

    if name == "mlp":
        model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10),
                              nn.Softmax(dim=-1)).eval()

        def inputs(batch, _seq, rng):
            return {"x": torch.from_numpy(rng.standard_normal((batch, 128)).astype("float32"))}

        return model, inputs, {"x": {0: "batch"}}, ["probs"]

    if name == "cnn":
        def conv_bn(cin, cout, k, stride):
            return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))

        class Block(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.a = conv_bn(cin, cout, 3, stride)
                self.b = conv_bn(cout, cout, 3, 1)
                self.proj = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

            def forward(self, x):
                return torch.relu(self.b(torch.relu(self.a(x))) + self.proj(x))

        class Cnn(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Sequential(conv_bn(3, 16, 3, 1), nn.ReLU(), nn.MaxPool2d(2))
                self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2))
                self.head = nn.Linear(32, 10)

            def forward(self, image):
                x = self.blocks(self.stem(image))
                return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

        model = Cnn()
        with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is tested
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

        def inputs(batch, _seq, rng):
            return {"image": torch.from_numpy(rng.standard_normal((batch, 3, 32, 32)).astype("float32"))}

        return model.eval(), inputs, {"image": {0: "batch"}}, ["logits"]

    sys.exit(f"export.py: unknown model {name}")


def export(name, out_dir, seed, opset):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper
    from torch.export import Dim

    model, make_inputs, dyn, output_names = build(name, seed)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    example = make_inputs(2, 8, np.random.default_rng(seed))
    names = list(example)
    axis = {"batch": Dim("batch", min=1, max=4096), "seq": Dim("seq", min=1, max=128)}
    dynamic_shapes = {k: {a: axis[d] for a, d in dyn[k].items()} for k in names}
    if name == "dlrm":  # forward(dense, *sparse): the variadic part is one tuple entry
        dynamic_shapes = ({0: axis["batch"]}, tuple({0: axis["batch"]} for _ in range(26)))
    else:
        dynamic_shapes = tuple(dynamic_shapes[k] for k in names)
    with torch.no_grad():
        torch.onnx.export(model, tuple(example.values()), path, dynamo=True, opset_version=opset,
                          input_names=names, output_names=output_names, dynamic_shapes=dynamic_shapes,
                          external_data=False)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    census = sorted({n.op_type for n in proto.graph.node})

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    report = {"model": name, "seed": seed, "opset": opset, "ops": census, "data_sets": [],
              "bytes": os.path.getsize(path)}
    rng = np.random.default_rng(seed + 1)
    for index, batch in enumerate(BATCHES):
        feed = make_inputs(batch, SEQ, rng)
        with torch.no_grad():
            expected = model(*feed.values())
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        expected = [e.numpy() for e in expected]
        got = sess.run(None, {k: v.numpy() for k, v in feed.items()})
        diffs = []
        for e, g in zip(expected, got):
            if e.shape != g.shape:
                sys.exit(f"{name}: ONNX Runtime gives shape {g.shape}, PyTorch {e.shape}")
            diff = float(np.max(np.abs(e - g))) if e.size else 0.0
            if not np.allclose(g, e, atol=1e-4, rtol=1e-3):
                sys.exit(f"{name}: ONNX Runtime differs from PyTorch by {diff} at batch {batch}")
            diffs.append(diff)
        ds = os.path.join(out_dir, f"test_data_set_{index}")
        os.makedirs(ds, exist_ok=True)
        for k, (input_name, value) in enumerate(feed.items()):
            with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value.numpy(), input_name).SerializeToString())
        for k, value in enumerate(expected):
            with open(os.path.join(ds, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, output_names[k]).SerializeToString())
        report["data_sets"].append({"batch": batch, "max_abs_diff_vs_onnxruntime": diffs})
    with open(os.path.join(out_dir, "export.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"{name}: {report['bytes']} bytes, ops {', '.join(census)}; "
          f"ORT vs PyTorch max abs {max(max(d['max_abs_diff_vs_onnxruntime']) for d in report['data_sets']):.2e}")
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", action="append", choices=["bert", "dlrm", "mlp", "cnn", "bert-base"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--allow-other-versions", action="store_true")
    a = p.parse_args()
    versions = check_versions(a.allow_other_versions)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    for name in a.only or ["bert", "dlrm", "mlp", "cnn"]:
        report = export(name, os.path.join(a.out, name), a.seed, a.opset)
        report["versions"] = versions
        with open(os.path.join(a.out, name, "export.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
