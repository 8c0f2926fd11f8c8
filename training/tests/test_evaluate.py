"""icicle.evaluate on the committed tiny model with a handful of queries: numbers in range, ECE, BM25."""
import json
import math
import os

import pytest

from icicle.evaluate import context_docids, ece, make_candidates, query_sets, run


def test_ece_of_calibrated_input_is_zero():
    # confidence max(s, 1-s) equals the share of correct router decisions in every bin
    probs = [1.0, 0.0] + [0.75] * 4 + [0.25] * 4 + [0.55] * 20
    labels = [1, 0] + [1, 1, 1, 0] + [0, 0, 0, 1] + [1] * 11 + [0] * 9
    assert ece(probs, labels) == pytest.approx(0.0, abs=1e-12)


def test_ece_of_overconfident_input():
    assert ece([0.95] * 10, [0] * 10) == pytest.approx(0.95)  # always says COPY, never right
    assert ece([0.9, 0.1], [1, 1]) == pytest.approx(abs(0.5 - 0.9))  # one bin (confidence 0.9), half right
    assert math.isnan(ece([], []))


def test_candidates_protocol(split, fixture_dir):
    seen = open(os.path.join(fixture_dir, "seen_docids.txt"), encoding="utf-8").read().split("\n")
    seen = [s for s in seen if s]
    tr, nw, other = query_sets(split, seen, "dev", 5, 0)
    assert tr and nw and all(q.docid in set(seen) for q in tr) and all(q.docid in set(split.d_new) for q in nw)
    c = make_candidates(split, seen, tr + nw, [3, 10, 100], 0)
    assert c == make_candidates(split, seen, tr + nw, [3, 10, 100], 0), "deterministic given the seed"
    new = set(split.d_new)
    for q in tr + nw:
        negs = c[q.qid]["negatives"]
        assert len(negs) == len(set(negs)) == 100 and q.docid not in negs and set(negs) <= new
        for n in (3, 10, 100):
            ctx = context_docids(c[q.qid], q.docid, n, True)
            assert len(ctx) == n and ctx[c[q.qid]["gold_pos"][str(n)]] == q.docid
            noise = context_docids(c[q.qid], q.docid, n, False)
            assert len(noise) == n and q.docid not in noise
        assert context_docids(c[q.qid], q.docid, 10, False)[:3] == context_docids(c[q.qid], q.docid, 3, False), "nested"


@pytest.fixture(scope="module")
def results(fixture_dir, split, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("eval"))
    return out, run(fixture_dir, out, n_queries=3, n_shots=(3, 10), split=split, log=lambda *_: None)


def in_unit(x):
    return x is None or (isinstance(x, float) and 0.0 <= x <= 1.0)


def test_numbers_in_range(results):
    out, r = results
    assert r["queries"]["train"] == 3 and r["queries"]["new"] == 3
    for n in ("3", "10"):
        s = r["nshot"][n]
        for cond in ("train_ctx", "train_noise", "new_ctx"):
            m = s[cond]
            assert m["n"] == 3
            for k in ("hits@1", "hits@10", "gold_in_prompt", "mean_p_copy", "routing_recall", "p_hit_given_copy",
                      "false_copy_rate"):
                assert in_unit(m[k]), (n, cond, k, m[k])
            assert m["hits@1"] <= m["mrr@10"] <= m["hits@10"], m
            assert 1 <= m["in_context"] <= int(n)
        assert s["train_noise"]["gold_in_prompt"] == 0.0
        assert in_unit(s["ece"]) and s["ece"] is not None
    assert r["main"]["n_shots"] == 10
    for f in ("results.json", "results.md", "nshot.png", "candidates.json", "instances.jsonl"):
        assert os.path.getsize(os.path.join(out, f)) > 0
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["nshot"]["3"]["new_ctx"]["n"] == 3
    assert saved["model"]["dir"] == os.path.join("models", "tiny"), "repo-relative, no machine path"
    md = open(os.path.join(out, "results.md"), encoding="utf-8").read()
    assert "| BM25 (bm25s, full corpus) |" in md and "| icicle-tiny |" in md and "N=10" in md
    with open(os.path.join(out, "nshot.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bm25_row_is_sane(results):
    _, r = results
    b = r["bm25"]
    assert b["all"]["n"] > 500
    assert b["all"]["hits@10"] > 0.5, b["all"]
    assert b["all"]["hits@1"] <= b["all"]["mrr@10"] <= b["all"]["hits@10"]
    assert in_unit(b["train"]["hits@10"]) and in_unit(b["new"]["hits@10"])


def test_rerun_reuses_candidates_and_repeats(results, fixture_dir, split):
    out, r = results
    again = run(fixture_dir, out, n_queries=3, n_shots=(3, 10), split=split, log=lambda *_: None)
    assert again["candidates_reused"] and not r["candidates_reused"]
    assert again["nshot"]["10"]["new_ctx"] == r["nshot"]["10"]["new_ctx"]
    assert again["nshot"]["3"]["ece"] == r["nshot"]["3"]["ece"]


def test_summary_cap_follows_the_manifest():
    """The reference evaluation caps summaries as the Go engine does: the manifest's max_summary_tokens when it
    states a smaller one than the default 256, else 256."""
    from icicle.evaluate import ModelDir

    def md(man):
        return ModelDir("x", man, None, None, [], None, "model.onnx")

    assert md({"max_summary_tokens": 32}).max_summary_tokens == 32
    assert md({}).max_summary_tokens == 256
    assert md({"max_summary_tokens": 4096}).max_summary_tokens == 256
