"""How much does the reader's view of a candidate hold? The first stage's dense encoder (bge-small) ranks the
sidecar's candidates from what the reader is shown (the title and the summary's first K reader tokens) against
from the whole passage, over the queries of a `scorefusion collect` file (issue 24).

    python -m icicle.lab.readerview ../.run/fusion/r24a.jsonl --seen ../models/r24a/seen_docids.txt \\
        [--tokens 24 64] [--candidates 10] [--limit N]

Per query with the gold among its candidates (the first stage's top --candidates documents outside --seen, the
sidecar's context): top-1 of the first stage's order, of the encoder on "title\\ntext" (what ingest embeds), on the
title and the stored summary (the first 120 words), on the title and the summary's first K tokens of the reader's
tokenizer (the reader's manifest cuts summaries to max_summary_tokens), on the title and the K-token window of the
passage holding the most of the query's rarer words (IDF-weighted over the corpus: what a query snippet,
experimental.snippet_chars, can show in K tokens), and the reader's own top (the collect file's copy log-probabilities).
The encoder on the reader's view is the bar the reader's reading can be held to. `against_reader` compares each
ranking's top with the reader's, query by query: how often they pick the same candidate, and how often only one of
them is right (a reader that imitates the encoder agrees with it more than the encoder's views agree among themselves).
`misreadings` takes the questions where the reader leaves the first stage's first and the first stage was right:
how often the encoder finds the gold from each view there (the view held the answer), the place in the first
stage's list of the reader's pick (0: not among the candidates), and how often the pick begins with the gold's
first title token (the trie's shared prefix).
"""
from __future__ import annotations

import argparse
import collections
import functools
import gzip
import json
import math
import os
import re

import numpy as np

from .. import metrics
from ..compress import extractive
from ..data import DEFAULT_DATA_DIR
from ..encoder import embed, load

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _cut(d: dict, k: int, rtok) -> str:
    """The title and the stored summary's first k tokens of the reader's tokenizer (what its prompt shows)."""
    return d["title"] + "\n" + rtok.decode(rtok.encode(extractive(d["text"]), add_special_tokens=False).ids[:k])


def _words(s: str) -> set[str]:
    return set(re.findall(r"\w+", s.lower()))


def idf(docs: dict) -> dict[str, float]:
    df = collections.Counter(w for d in docs.values() for w in _words(d["text"]))
    return {w: math.log((len(docs) + 1) / (c + 0.5)) for w, c in df.items()}


def _window(d: dict, q: str, k: int, rtok, weights: dict[str, float]) -> str:
    """The title and the k-token window of the passage (stride 4) whose words carry the most of the query's IDF
    (words of IDF 1.5 or less, the commonest, do not count); the passage's start on a tie."""
    ids = rtok.encode(d["text"], add_special_tokens=False).ids
    qw = {w for w in _words(q) if weights.get(w, 0.0) > 1.5}
    best = max(range(0, max(1, len(ids) - k + 1), 4),
               key=lambda s: (sum(weights[w] for w in qw & _words(rtok.decode(ids[s:s + k]))), -s))
    return d["title"] + "\n" + rtok.decode(ids[best:best + k])


def views(tokens: list[int], rtok, weights: dict[str, float]) -> dict:
    """The texts to embed a document from (called with the document and the query), by view name: full, the
    stored summary, its first K reader tokens, the query's K-token window."""
    out = {"full": lambda d, q: d["title"] + "\n" + d["text"],
           "summary": lambda d, q: d["title"] + "\n" + extractive(d["text"])}
    for k in tokens:
        out[f"summary_{k}_tokens"] = lambda d, q, k=k: _cut(d, k, rtok)
    for k in tokens:
        out[f"query_window_{k}_tokens"] = functools.partial(_window, k=k, rtok=rtok, weights=weights)
    return out


def measure(samples: list[dict], docs: dict, queries: dict, seen: set, enc, rtok, tokens: list[int],
            candidates: int = 10) -> dict:
    man, tok, sess = enc
    fs = views(tokens, rtok, idf(docs))
    hits = {"first_stage": 0, **{k: 0 for k in fs}, "reader": 0}
    # against the reader's own top, per ranking: the same pick; right where the reader is wrong; wrong where it is right
    vs = {k: {"same_top": 0, "only_it_right": 0, "only_reader_right": 0} for k in ["first_stage", *fs]}
    # the reader's misreadings: it leaves the first stage's first, which was right
    dep = {"queries": 0, "encoder_right": {k: 0 for k in fs}, "place": collections.Counter(),
           "shares_first_title_token": 0}
    n = 0
    for s in samples:
        cands = [d for d, _ in s["first"] if d not in seen][:candidates]
        rel = set(s["relevant"])
        if not rel & set(cands):
            continue
        n += 1
        q = embed(man, tok, sess, [man["query_prefix"] + queries[s["qid"]]], 1)[0]
        tops = {"first_stage": cands[0]}
        for name, f in fs.items():
            m = embed(man, tok, sess, [f(docs[c], queries[s["qid"]]) for c in cands], 1)
            tops[name] = cands[int(np.argmax(m @ q))]
        reader = max(s["lp"], key=s["lp"].get) if s.get("lp") else None
        for name, top in (*tops.items(), ("reader", reader)):
            hits[name] += metrics.hit([top], rel)
        if reader is None:
            continue
        for name, top in tops.items():
            vs[name]["same_top"] += top == reader
            vs[name]["only_it_right"] += top in rel and reader not in rel
            vs[name]["only_reader_right"] += reader in rel and top not in rel
        if cands[0] in rel and reader not in rel:
            gold = next(c for c in cands if c in rel)
            dep["queries"] += 1
            for name in fs:
                dep["encoder_right"][name] += tops[name] in rel
            dep["place"][cands.index(reader) + 1 if reader in cands else 0] += 1
            first = [rtok.encode(t, add_special_tokens=False).ids[:1] for t in (reader, gold)]
            dep["shares_first_title_token"] += first[0] == first[1]
    dep["place"] = dict(sorted(dep["place"].items()))
    return {"queries": n, "hits@1": {k: round(v / n, 3) if n else 0.0 for k, v in hits.items()}, "right": hits,
            "against_reader": vs, "misreadings": dep}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.readerview", description=__doc__.splitlines()[0])
    ap.add_argument("samples", help="a scorefusion collect file (JSONL: qid, relevant, first, lp)")
    ap.add_argument("--seen", required=True, help="the model's seen_docids.txt (not in the sidecar's context)")
    ap.add_argument("--data", default=DEFAULT_DATA_DIR)
    ap.add_argument("--encoder", default=os.path.join(REPO, "models", "bge-small-en-v15-q"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "reader135", "tokenizer.json"))
    ap.add_argument("--tokens", type=int, nargs="+", default=[24, 64])
    ap.add_argument("--candidates", type=int, default=10)
    ap.add_argument("--limit", type=int, default=0, help="the file's first N queries only (0: all)")
    a = ap.parse_args(argv)
    from tokenizers import Tokenizer

    docs = {d["docid"]: d for d in map(json.loads, gzip.open(os.path.join(a.data, "corpus.jsonl.gz"), "rt"))}
    queries = {}
    for q in map(json.loads, gzip.open(os.path.join(a.data, "queries.jsonl.gz"), "rt")):
        queries[q.get("_id") or q.get("qid")] = q.get("text") or q.get("query")
    samples = [json.loads(x) for x in open(a.samples)][: a.limit or None]
    seen = {x for x in open(a.seen).read().split("\n") if x}
    res = measure(samples, docs, queries, seen, load(a.encoder), Tokenizer.from_file(a.tokenizer), a.tokens,
                  a.candidates)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
