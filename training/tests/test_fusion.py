"""The reader set's first stage fuses as the sidecar does: icicle.readerdata.fuse against the rankings Go's
retrieve.Fuse wrote into retrieve/testdata/fusion_golden.json (`go test ./retrieve -run TestFuseGolden -update`)."""
import json
import os

import numpy as np
import pytest

from icicle.data import Doc
from icicle.readerdata import FirstStage, fuse

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "retrieve", "testdata", "fusion_golden.json")


def cases() -> list[dict]:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_fuse_is_gos(case):
    got = fuse([tuple(h) for h in case["bm25"]], case["knn"], case["dense"], case["params"])
    assert [d for d, _ in got] == [d for d, _ in case["want"]]
    assert np.allclose([s for _, s in got], [s for _, s in case["want"]], rtol=0, atol=1e-6)


def test_the_golden_file_covers_every_method_and_its_ties():
    cs = cases()
    assert {c["params"]["method"] for c in cs} == {"linear", "rrf", "bm25"}
    tied = [c["name"] for c in cs if any(a[1] == b[1] for a, b in zip(c["want"], c["want"][1:]))]
    assert "ties: BM25 rank, then docid" in tied and len(tied) >= 5, tied
    served = json.load(open(os.path.join(os.path.dirname(GOLDEN), "..", "..", "data", "nq_qed", "first_stage.json")))
    params = {k: served[k] for k in ("method", "dense_weight", "rrf_k", "depth", "knn")}
    assert sum(c["params"] == params and len(c["bm25"]) == 100 for c in cs) >= 3, "the served params, at full depth"


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match="'sum'"):
        fuse([("a", 1.0)], [], {"a": 0.5}, {"method": "sum", "dense_weight": 0.5, "rrf_k": 60})


def test_first_stage_lists_are_the_fusion_of_its_two_lists():
    """FirstStage over a pool of four: BM25 finds the three apple documents (equal scores: one word, equal lengths),
    the kNN the two nearest (Zebu, Wren); fused with w 0.5, Wren 0.5 + 0.4, Yarrow 0.5 + 0.3, and Xeno (BM25 alone)
    and Zebu (the kNN alone) 0.5 each: the BM25 hit first, though the pool lists Zebu first."""
    docs = {d: Doc(d, d, t) for d, t in (("Wren", "apple pie"), ("Xeno", "apple tart"), ("Yarrow", "apple cake"),
                                         ("Zebu", "pear plum"))}
    pool = ["Zebu", "Yarrow", "Xeno", "Wren"]
    vecs = np.array([[1, 0], [0.6, 0], [0, 0], [0.8, 0]], np.float32)  # the query's cosines: the first column
    params = {"method": "linear", "dense_weight": 0.5, "rrf_k": 60, "depth": 100, "knn": 2}
    fs = FirstStage(docs, pool, vecs, params)
    (idx, cos, fused), = fs.lists(["apple"], np.array([[1, 0]], np.float32), 4)
    assert [pool[i] for i in idx] == ["Wren", "Yarrow", "Xeno", "Zebu"]
    assert cos == [0.8, 0.6, 0.0, 1.0] and fused == [0.9, 0.8, 0.5, 0.5]
    with pytest.raises(ValueError, match="'sum'"):
        FirstStage(docs, pool, vecs, {**params, "method": "sum"})
