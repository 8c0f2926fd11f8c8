"""lab.scorefusion's ranking, grid and cross-validation on crafted queries, and the query selection on files."""
import gzip
import json

import pytest

from icicle.data import is_new_doc
from icicle.lab.scorefusion import best_setting, cross_validate, fused_top, hits1, load, record, select


def query(subset, gold, first, lp):
    return {"subset": subset, "relevant": {gold}, "first": first, "lp": lp}


def test_fused_top():
    first = [("a", 0.90), ("b", 0.87), ("s", 0.86)]
    lp = {"a": -3.0, "b": -1.0}
    assert fused_top(first, lp, 0, -1, -30) == "a", "w 0: the first stage"
    assert fused_top(first, lp, 0.02, -1, -30) == "b", "the reader moves a close call: 0.84 against 0.85"
    assert fused_top(first, lp, 0.02, -1, -2) == "a", "clipped at -2, a loses only 0.04: 0.86"
    assert fused_top(first, {"a": -9.0, "b": -9.0}, 0.02, -1, -30) == "s", "outside the context: the floor"
    assert fused_top([], {}, 1, -1, -2) is None
    # --slots: only what the reader read moves, among its own places; the seen s keeps its place when first.
    read = {"a", "b"}
    assert fused_top(first, lp, 0.02, -1, -30, read) == "b"
    assert fused_top(first, {"a": -9.0, "b": -9.0}, 0.02, -1, -30, read) == "a", "s was not read: no floor for it"
    assert fused_top([("s", 0.95)] + first, lp, 1, -1, -30, read) == "s", "a first the reader did not read stays"
    assert fused_top([], {}, 1, -1, -2, read) is None


def test_fit_finds_a_reader_that_helps_and_cross_validates():
    # The reader is right on every close call: w > 0 wins, held out as well.
    qs = [query("new", "b", [("a", 0.9), ("b", 0.895)], {"a": -4.0, "b": -0.01}) for _ in range(10)]
    qs += [query("new", "a", [("a", 0.9), ("b", 0.5)], {"a": -2.0, "b": -0.1}) for _ in range(10)]
    g = best_setting(qs)
    assert g[0] > 0 and hits1(qs, g) == 1.0 and hits1(qs, (0, 0, 0)) == 0.5
    cv = cross_validate(qs)
    assert cv["new"] == (1.0, 0.5, 20)


def test_fit_keeps_the_first_stage_when_the_reader_does_not_help():
    qs = [query("new", "a", [("a", 0.9), ("b", 0.899)], {"a": -4.0, "b": -0.01}) for _ in range(10)]
    assert best_setting(qs)[0] == 0
    assert cross_validate(qs)["new"] == (1.0, 1.0, 10)


def test_record_and_select(tmp_path):
    model = {"mode": "reranked", "context": ["a", "b"], "results": [
        {"docid": "b", "score": -0.2, "provenance": "copy"}, {"docid": "z", "score": -5, "provenance": "parametric"}]}
    first = {"results": [{"docid": "a", "score": 0.9}, {"docid": "b", "score": 0.8}]}
    r = record("q1", "new", ["b"], model, first)
    assert r["lp"] == {"b": -0.2} and r["first"] == [("a", 0.9), ("b", 0.8)] and r["context"] == ["a", "b"]
    assert r["lp_memory"] == {"z": -5}
    (tmp_path / "c.jsonl").write_text(json.dumps(r) + "\n")
    assert load(str(tmp_path / "c.jsonl"))[0]["lp"] == {"b": -0.2}
    q = load(str(tmp_path / "c.jsonl"), memory=True, slots=True)[0]
    assert q["lp"] == {"b": -0.2, "z": -5} and q["read"] == {"a", "b"} and q["relevant"] == {"b"}
    fell = record("q1", "new", ["b"], {"mode": "bm25_fallback", "fallback_reason": "model_timeout", "results": []}, first)
    assert fell["lp"] == {} and fell["fallback_reason"] == "model_timeout"

    # Two D_new documents and one seen one (icicle.data's hash rule decides which titles are new).
    new_a, new_b = [d for d in (f"Doc {i}" for i in range(200)) if is_new_doc(d)][:2]
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wt") as f:
        for d in (new_a, new_b, "Seen S"):
            f.write(json.dumps({"docid": d, "title": d, "text": "t"}) + "\n")
    with gzip.open(tmp_path / "queries.jsonl.gz", "wt") as f:
        for qid, split in [("1", "train"), ("2", "train"), ("3", "train"), ("4", "dev"), ("5", "train")]:
            f.write(json.dumps({"qid": qid, "query": f"text {qid}", "split": split}) + "\n")
    (tmp_path / "qrels.tsv").write_text(f"qid\tdocid\trelevance\n1\t{new_a}\t1\n2\tSeen S\t1\n3\tNot in the corpus\t1\n"
                                        f"4\t{new_a}\t1\n5\t{new_b}\t1\n")
    (tmp_path / "seen.txt").write_text("Seen S\n")
    got = select(str(tmp_path), "train", str(tmp_path / "seen.txt"), 5)
    assert [(q[0], q[2]) for q in got] == [("1", "new"), ("5", "new"), ("2", "seen")]
    assert got[0][3] == [new_a]
    assert [q[0] for q in select(str(tmp_path), "train", str(tmp_path / "seen.txt"), 0, 1)] == ["1"]
    # The seen half from a file of qids (a model's seen_heldout_queries.jsonl), in the file's order, all of them.
    (tmp_path / "held.jsonl").write_text(json.dumps({"qid": "2", "query": "text 2", "split": "train"}) + "\n")
    got = select(str(tmp_path), "train", str(tmp_path / "seen.txt"), 0, 0, str(tmp_path / "held.jsonl"))
    assert [(q[0], q[2]) for q in got] == [("1", "new"), ("5", "new"), ("2", "seen")]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"qid": "99"}) + "\n")
    with pytest.raises(SystemExit, match="qid 99"):
        select(str(tmp_path), "train", str(tmp_path / "seen.txt"), 0, 0, str(tmp_path / "bad.jsonl"))
