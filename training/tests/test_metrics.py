"""icicle.metrics: Hits@k and MRR@10 as the sidecar's `icicle eval` defines them (internal/eval), per subset."""
import pytest

from icicle import metrics


def test_rank_hit_and_reciprocal_rank():
    assert metrics.rank(["a", "b", "c"], "b") == 2 and metrics.rank(["a"], "z") == 0
    assert metrics.rank(["a", "b", "c"], {"c", "b"}) == 2, "the first relevant one"
    assert metrics.rank([None, "b"], "b") == 2, "None is no answer, never relevant"
    assert metrics.hit(["a", "b"], "b", 1) is False and metrics.hit(["a", "b"], "b", 2) is True
    assert metrics.reciprocal_rank(["a", "b"], "b") == 0.5
    eleven = [str(i) for i in range(10)] + ["gold"]
    assert metrics.reciprocal_rank(eleven, "gold") == 0.0 and not metrics.hit(eleven, "gold", 10), "rank 11: outside"


def test_table_and_by_subset():
    rows = [("new", ["g"], "g"), ("new", ["x", "y", "g"], "g"), ("new", ["x"], "g"), ("seen", ["x", "s"], {"s"})]
    t = metrics.by_subset(rows)
    assert list(t) == ["new", "seen"]
    assert t["new"]["n"] == 3 and t["new"]["hits@1"] == pytest.approx(1 / 3)
    assert t["new"]["hits@10"] == pytest.approx(2 / 3)
    assert t["new"]["mrr@10"] == pytest.approx((1 + 1 / 3) / 3)
    assert t["seen"] == {"n": 1, "hits@1": 0.0, "hits@10": 1.0, "mrr@10": 0.5}
    assert metrics.table([]) == {"n": 0, "hits@1": None, "hits@10": None, "mrr@10": None}
    assert metrics.mean([]) is None and metrics.mean([True, False]) == 0.5
