"""lab.runprofile on a small exported decoder: the Run's inputs follow the step contract, and the profile names
the attention's operators and times them. No timing is compared (the host is shared: a 4,000-token past once
profiled faster than none on this tiny graph, session 26's CI)."""
import numpy as np
import torch

from icicle.export import export_onnx, ort_session
from icicle.lab.runprofile import feeds, profile
from icicle.model import Decoder, ModelConfig

SMALL = ModelConfig(vocab_size=1200, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=64)


def test_runprofile(tmp_path):
    torch.manual_seed(0)
    path = str(tmp_path / "model.onnx")
    export_onnx(Decoder(SMALL).eval(), path)
    f = feeds(ort_session(path), past=50, rows=6, logits=3)
    assert f["past_key_values.1.value"].shape == (1, 50, 2, 8)
    assert f["attention_mask"].shape == (1, 6, 56)
    assert (f["attention_mask"][0, 2, :53] == 0).all() and (f["attention_mask"][0, 2, 53:] < -1e30).all()
    assert f["logits_index"].tolist() == [0, 2, 5]
    assert f["position_ids"].tolist() == [list(range(50, 56))]
    short, long = profile(path, past=0, rows=6, runs=2), profile(path, past=4000, rows=6, runs=2)
    assert {"MatMul", "Softmax"} <= set(long["ops_ms"])
    assert short["ops_total_ms"] > 0 and long["ops_total_ms"] > 0
    assert np.isfinite(long["run_ms_median"])
