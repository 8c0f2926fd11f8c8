"""The first stage's encoder reference (icicle.encoder): its golden vectors are what it computes, and truncation
and the query prefix are applied as the manifest says."""
import json
import os

import numpy as np
import pytest

from icicle import encoder as E

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "models")
DIRS = sorted(d for d in os.listdir(ROOT) if os.path.exists(os.path.join(ROOT, d, "encoder.json")))


@pytest.mark.parametrize("name", DIRS)
def test_golden_is_reproduced(name):
    d = os.path.join(ROOT, name)
    if not os.path.exists(os.path.join(d, "model.onnx")):
        pytest.fail(f"{d}/model.onnx missing: run scripts/encoder.sh {d}")
    with open(os.path.join(d, "golden.json")) as f:
        want = json.load(f)
    got = E.golden(d)
    for kind in ("queries", "passages"):
        for w, g in zip(want[kind], got[kind]):
            assert w["ids"] == g["ids"]
            assert np.abs(np.array(w["vector"]) - np.array(g["vector"])).max() < 1e-5
    long = [p for p in got["passages"] if len(p["ids"]) >= 512]
    assert long and all(len(p["ids"]) == 512 for p in long), "the long passage is cut at max_tokens"
    for q in got["queries"]:
        v = np.array(q["vector"])
        assert abs(np.linalg.norm(v) - 1) < 1e-5


def test_encoders_exist():
    assert DIRS, "no encoder directory under models/"
