"""Inference code written for ONNX Runtime, as a user would have it. ``test_ort_script.py`` runs it
as written and with ``import onnxruntime as ort`` replaced by ``import saggar as ort``, and compares
what it saves. Usage: ``python ort_script.py MODELS_DIR OUT.npz``."""

import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

models, out = Path(sys.argv[1]), sys.argv[2]
results = {}
rng = np.random.default_rng(0)


def inputs_for(session, batch, seq=16):
    feeds = {}
    for arg in session.get_inputs():
        shape = [batch if d == "batch" else seq if d == "seq" else d for d in arg.shape]
        if arg.type == "tensor(float)":
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
        elif arg.name == "attention_mask":
            feeds[arg.name] = np.ones(shape, np.int64)
        else:
            feeds[arg.name] = rng.integers(0, 50, size=shape).astype(np.int64)
    return feeds


for name in ["bert", "dlrm", "mlp", "cnn"]:
    path = str(models / name / "model.onnx")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    input_names = [i.name for i in sess.get_inputs()]
    output_names = [o.name for o in sess.get_outputs()]
    results[f"{name}/signature"] = np.array(
        [f"{a.name}:{a.type}:{len(a.shape)}" for a in sess.get_inputs() + sess.get_outputs()]
    )
    for batch in (1, 7, 100):
        feeds = inputs_for(sess, batch)
        outputs = sess.run(None, feeds)
        for o, value in zip(output_names, outputs):
            results[f"{name}/{batch}/{o}"] = value
        (first,) = sess.run([output_names[0]], feeds)
        assert np.array_equal(first, outputs[0])
        for k, v in feeds.items():
            results[f"{name}/{batch}/in/{k}"] = v

    with open(path, "rb") as f:
        from_bytes = ort.InferenceSession(f.read(), providers=["CPUExecutionProvider"])
    feeds = inputs_for(from_bytes, 5)
    results[f"{name}/bytes"] = from_bytes.run(None, feeds)[0]
    results[f"{name}/bytes/in"] = np.array(list(feeds))
    for k, v in feeds.items():
        results[f"{name}/bytes/in/{k}"] = v

    requests = [inputs_for(sess, b) for b in range(1, 9)]
    answers = [None] * 8

    def work(k):
        for _ in range(3):
            answers[k] = sess.run(None, requests[k])[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        results[f"{name}/threads/{k}"] = answers[k]

np.savez(out, **results)
print("saved", len(results), "arrays")
