"""Can a score fusion get from a reader what the gate cannot (issue 24)? The first stage's score of each document
plus w x the reader's copy log-probability, fitted on held-out training queries through a running sidecar.

    python -m icicle.lab.scorefusion collect --sidecar http://127.0.0.1:8190 --split train \\
        --seen ../models/reader135/seen_docids.txt --out ../.run/fusion/r135.jsonl
    python -m icicle.lab.scorefusion fit ../.run/fusion/r135.jsonl

`collect` asks the sidecar (serving the reader, any policy.mode, with a request timeout long enough that the
reader answers every query: ICICLE_SERVER_REQUEST_TIMEOUT=30s) two things per query: `"policy": "model"`
(the reader's scores of its context, the first stage's top new documents) and `"policy": "bm25"` (the first
stage's ranking with its scores), and keeps docids and scores. Queries (icicle.data.load_beir of --data): the
split's queries of D_new documents (icicle.data.is_new_doc: never trained on), then --seen-n seen-document
queries (their document in --seen).

`fit` ranks each query's first-stage list by score + w x lp, where lp is the reader's copy log-probability of the
document, clipped below at `clip`, and `floor` for a document not in the reader's context (the first stage's
seen documents, which a copy-only reader cannot name; with `--memory`, those the memory route named take its
log-probability). It prints the grid's best settings on all queries (in-sample) and 5-fold cross-validation: the
best settings of four folds applied to the fifth, by subset, against the first stage alone (w = 0). `--slots`
scores only the documents the reader read (the sidecar's context) and moves them only among the places they hold,
so that a document it did not read (a seen one) keeps its place (docs/research/2026-11-readers.md, "Blending the
reader into the first stage's scores": a sidecar policy with this rule was measured and removed). `collect
--seen-queries FILE` asks the seen-document questions of FILE (their "qid"s: a model's seen_heldout_queries.jsonl,
kept out of its training) instead of the split's first --seen-n, which a reader with a memory route trained on.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import urllib.request

from .. import metrics
from ..data import DEFAULT_DATA_DIR, is_new_doc, load_beir

GRID_W = (0, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2)
GRID_FLOOR = (-1, -2, -4, -8, -16)
GRID_CLIP = (-2, -4, -8, -16, -30)


def fused_top(first: list[tuple[str, float]], lp: dict[str, float], w: float, floor: float, clip: float,
              read: set[str] | None = None) -> str | None:
    """The document first stage + w x reader ranks first; the first stage's order breaks ties. With read (the
    documents the reader read, `--slots`), only those are scored and they take only
    the places they hold: when the first stage's first is a document the reader did not read, it stays first."""
    if read is not None:
        if not first or first[0][0] not in read:
            return first[0][0] if first else None
        first = [(d, s) for d, s in first if d in read]
    best, top = float("-inf"), None
    for doc, score in first:
        r = lp.get(doc)
        v = score + w * (floor if r is None else max(r, clip))
        if v > best:
            best, top = v, doc
    return top


def hits1(queries: list[dict], setting: tuple[float, float, float]) -> float:
    """Hits@1 of the fused first over queries (0 for none)."""
    return metrics.table(([fused_top(q["first"], q["lp"], *setting, q.get("read"))], q["relevant"])
                         for q in queries)["hits@1"] or 0.0


def best_setting(queries: list[dict]) -> tuple[float, float, float]:
    """The grid's setting with the highest Hits@1 on queries; the earlier (smaller w) one on a tie (max keeps the
    first)."""
    return max(itertools.product(GRID_W, GRID_FLOOR, GRID_CLIP), key=lambda g: hits1(queries, g))


def fold_parts(n: int, folds: int, seed: int) -> list[list[int]]:
    """0..n-1 shuffled by seed and dealt into folds parts (the cross-validations' folds)."""
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    return [idx[k::folds] for k in range(folds)]


def cross_validate(queries: list[dict], folds: int = 5, seed: int = 0) -> dict[str, tuple[float, float, int]]:
    """Per subset: (fused Hits@1 on held-out folds, the first stage's, queries)."""
    parts = fold_parts(len(queries), folds, seed)
    fused, first = [], []
    for k in range(folds):
        setting = best_setting([queries[i] for j in range(folds) if j != k for i in parts[j]])
        for q in (queries[i] for i in parts[k]):
            fused.append((q["subset"], [fused_top(q["first"], q["lp"], *setting, q.get("read"))], q["relevant"]))
            first.append((q["subset"], [fused_top(q["first"], q["lp"], 0, 0, 0)], q["relevant"]))
    f, b = metrics.by_subset(fused), metrics.by_subset(first)
    return {s: (f[s]["hits@1"], b[s]["hits@1"], f[s]["n"]) for s in f}


def record(qid: str, subset: str, relevant: list[str], model: dict, first: dict) -> dict:
    """A query's line: the first stage's (docid, score) list and the reader's copy log-probabilities."""
    lp, memory = {}, {}
    if model.get("mode") == "reranked":
        lp = {r["docid"]: r["score"] for r in model["results"] if r.get("provenance") == "copy"}
        memory = {r["docid"]: r["score"] for r in model["results"] if r.get("provenance") == "parametric"}
    return {"qid": qid, "subset": subset, "relevant": relevant, "lp": lp, "lp_memory": memory,
            "model_mode": model.get("mode"),
            "fallback_reason": model.get("fallback_reason"),
            "first": [(r["docid"], r["score"]) for r in first["results"]], "context": model.get("context") or []}


def load(path: str, memory: bool = False, slots: bool = False) -> list[dict]:
    """A collect file's queries. memory: a document the copy route did not score takes the memory route's score
    where it named it (a seen document of the first stage's list), so that it is not held to the floor. slots:
    fused_top scores only the documents the reader read (its context), in their places."""
    out = []
    for line in open(path):
        q = json.loads(line)
        q["relevant"] = set(q["relevant"])
        q["first"] = [tuple(x) for x in q["first"]]
        if memory:
            q["lp"] = {**q.get("lp_memory", {}), **q["lp"]}
        if slots:
            q["read"] = set(q["context"])
        out.append(q)
    return out


def select(data_dir: str, split: str, seen: str, seen_n: int, new_n: int = 0, seen_qids: str = "") -> list[tuple]:
    """(qid, text, subset, relevant) of the split: its queries of D_new documents (the first new_n; 0: all), then
    the first seen_n of its queries whose document is in the seen file, or with seen_qids (a JSONL file with "qid"s,
    such as a model's seen_heldout_queries.jsonl, the seen questions kept out of its training) those, in the file's
    order."""
    seen_docs = {line.rstrip("\n") for line in open(seen) if line.strip()}
    _, queries = load_beir(data_dir)
    new, old = [], []
    if seen_qids:
        by_qid = {q.qid: q for q in queries}
        for line in open(seen_qids):
            if line.strip():
                qid = json.loads(line)["qid"]
                if qid not in by_qid:
                    raise SystemExit(f"--seen-queries {seen_qids}: qid {qid} is not among {data_dir}'s queries")
                q = by_qid[qid]
                old.append((q.qid, q.query, "seen", [q.docid]))
        queries = [q for q in queries if q.docid not in seen_docs]
    for q in queries:
        if q.nq_split != split:
            continue
        if q.docid in seen_docs:
            old.append((q.qid, q.query, "seen", [q.docid]))
        elif is_new_doc(q.docid):
            new.append((q.qid, q.query, "new", [q.docid]))
    return new[: new_n or len(new)] + (old if seen_qids else old[:seen_n])


def search(sidecar: str, body: dict) -> dict:
    """One /v1/search of a running sidecar, its JSON answer."""
    req = urllib.request.Request(sidecar.rstrip("/") + "/v1/search", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as res:
        return json.load(res)


def collect(a: argparse.Namespace) -> None:
    qs = select(a.data, a.split, a.seen, a.seen_n, a.n, a.seen_queries)
    with open(a.out, "w") as f:
        for i, (qid, text, subset, relevant) in enumerate(qs):
            model = search(a.sidecar, {"query": text, "size": 10, "policy": "model"})
            first = search(a.sidecar, {"query": text, "size": 20, "policy": "bm25"})
            f.write(json.dumps(record(qid, subset, relevant, model, first)) + "\n")
            if (i + 1) % 100 == 0:
                print(f"scorefusion: {i + 1}/{len(qs)} queries", file=sys.stderr, flush=True)


def fit(a: argparse.Namespace) -> None:
    qs = load(a.samples, a.memory, a.slots)
    missing = [q.get("fallback_reason") or q.get("model_mode") for q in qs if q.get("model_mode") != "reranked"]
    if missing:
        print(f"warning: {len(missing)} of {len(qs)} queries have no reader answer ({sorted(set(map(str, missing)))}): "
              "give the sidecar a longer server.request_timeout (scripts/calibrate.sh uses 20s)")
    g = best_setting(qs)
    subsets = sorted({q["subset"] for q in qs})
    print(f"{len(qs)} queries; in-sample best w {g[0]} floor {g[1]} clip {g[2]}:")
    for s in subsets:
        part = [q for q in qs if q["subset"] == s]
        print(f"  {s} ({len(part)}): fused {hits1(part, g):.3f}, first stage {hits1(part, (0, 0, 0)):.3f}")
    print("5-fold cross-validation (the best of four folds on the fifth):")
    for s, (f, b, n) in sorted(cross_validate(qs).items()):
        print(f"  {s} ({n}): fused {f:.3f}, first stage {b:.3f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m icicle.lab.scorefusion")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--sidecar", required=True)
    c.add_argument("--data", default=DEFAULT_DATA_DIR, help="corpus, queries and qrels (icicle.data.load_beir)")
    c.add_argument("--split", default="train")
    c.add_argument("--seen", required=True, help="the model's seen_docids.txt")
    c.add_argument("--n", type=int, default=0, help="new-document queries at most (0: all)")
    c.add_argument("--seen-n", type=int, default=300)
    c.add_argument("--seen-queries", default="", help="a JSONL of the seen-document questions to ask (their \"qid\"s, "
                   "e.g. a model's seen_heldout_queries.jsonl) instead of the split's first --seen-n")
    c.add_argument("--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("samples")
    f.add_argument("--memory", action="store_true",
                   help="score the documents the memory route named by its log-probability (a reader with both routes)")
    f.add_argument("--slots", action="store_true",
                   help="only the documents the reader read (its context) move, among their own places")
    a = p.parse_args(argv)
    collect(a) if a.cmd == "collect" else fit(a)


if __name__ == "__main__":
    main()
