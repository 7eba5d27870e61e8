"""saggar's outputs against ONNX Runtime CPU (from PyPI) on the repository's four models: every
batch from 1 to 100 (buckets, padding, splitting above the largest bucket), BERT at sequence lengths
other than the export's 16 (per-shape programs, and a padded sequence axis), and the models' own
data sets."""

import numpy as np
import onnxruntime
import pytest

from conftest import MODEL_NAMES, data_sets, feeds_for, model_path, session_of

RTOL = 1e-3
ATOL = 1e-5

_reference = {}


def reference(name):
    if name not in _reference:
        _reference[name] = onnxruntime.InferenceSession(str(model_path(name)), providers=["CPUExecutionProvider"])
    return _reference[name]


def assert_matches(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


#: BERT's sequence is a second symbolic axis: served as a padded axis here (batch by sequence
#: buckets, as a server would), so the sweep runs on buckets instead of compiling per shape.
SWEEP_OPTIONS = {"bert": {"pad_axes": {"seq": [16]}}}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_batches_1_to_100_match_onnxruntime(name):
    session = session_of(name, **SWEEP_OPTIONS.get(name, {}))
    for batch in range(1, 101):
        feeds = feeds_for(session, name, batch, seed=batch)
        assert_matches(session.run(None, feeds), reference(name).run(None, feeds))


@pytest.mark.parametrize("seq", [1, 7, 16, 33, 64])
def test_bert_sequence_lengths_other_than_the_exports_match(seq):
    session = session_of("bert")
    for batch in (1, 3, 17):
        feeds = feeds_for(session, "bert", batch, seed=seq * 100 + batch, seq=seq)
        assert_matches(session.run(None, feeds), reference("bert").run(None, feeds))


@pytest.mark.parametrize("seq", [3, 16, 20, 40])
def test_bert_on_sequence_buckets_matches(seq):
    session = session_of("bert", pad_axes={"seq": [8, 16, 32, 64]})
    for batch in (1, 5):
        feeds = feeds_for(session, "bert", batch, seed=seq + batch, seq=seq)
        assert_matches(session.run(None, feeds), reference("bert").run(None, feeds))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_data_sets_match_their_expected_outputs(name):
    session = session_of(name)
    names = [i.name for i in session.get_inputs()]
    for inputs, expected in data_sets(name):
        outputs = session.run(None, dict(zip(names, inputs)))
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-4)
