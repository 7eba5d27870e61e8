"""A script written for ONNX Runtime runs on saggar with only its import changed, and gives the same
answers (rtol 1e-3): signatures, ``run(None, ...)``, ``run([name], ...)``, bytes instead of a path,
and eight threads on one session."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import MODELS, ON_GPU

SCRIPT = Path(__file__).with_name("ort_script.py")


def run_script(path, out):
    done = subprocess.run([sys.executable, str(path), str(MODELS), str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return dict(np.load(out))


def test_an_onnxruntime_script_runs_with_only_the_import_changed(tmp_path):
    text = SCRIPT.read_text()
    line = "\nimport onnxruntime as ort\n"
    assert text.count(line) == 1
    changed = text.replace(line, "\nimport saggar as ort\n")
    if ON_GPU:
        changed = changed.replace('"CPUExecutionProvider"', '"CUDAExecutionProvider"')
    saggar_script = tmp_path / "saggar_script.py"
    saggar_script.write_text(changed)
    theirs = run_script(SCRIPT, tmp_path / "onnxruntime.npz")
    ours = run_script(saggar_script, tmp_path / "saggar.npz")
    assert sorted(ours) == sorted(theirs)
    for key, want in theirs.items():
        got = ours[key]
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(got, want, err_msg=key)
