"""Queries made from a corpus, each with its own document as the gold: the material of a label-free fit of the
first stage's fusion (`icicle calibrate -first-stage -queries Q -qrels R`), and the check that it tracks real
queries (docs/research/2026-12-label-free.md).

Forms: ``sentence`` (one sentence of the text, 6 to 30 words, the title taken off its front), ``terms`` (five
of the text's content words, drawn by tf-idf, in random order) and ``title`` (the title, three words or more).
A document needs 30 words of text to be drawn.

    python -m icicle.lab.pseudoqueries ../data/cranfield/corpus.jsonl.gz terms 300 7 q.jsonl.gz qrels.tsv
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
from collections import Counter

FORMS = ("sentence", "terms", "title")

STOP = frozenset("""a an the of in on at to for from by with and or but if then than as is are was were be been being
it its this that these those which who whom what when where why how there here do does did not no so such can
could may might must shall should will would into onto over under about after before between through during
without within also any all each every some more most other same very we our you your he she they them his her
their i me my us one two three""".split())


def words(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", s.lower())


def make(docs: list[dict], form: str, n: int, seed: int) -> list[tuple[str, str]]:
    """Up to n (query, docid) pairs of the form, from documents drawn at random (seeded)."""
    if form not in FORMS:
        raise ValueError(f"form: {form!r}, want one of {', '.join(FORMS)}")
    rng = random.Random(seed)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(words(d["title"] + " " + d["text"])))
    pool = [d for d in docs if len(words(d["text"])) >= 30]
    rng.shuffle(pool)
    out: list[tuple[str, str]] = []
    for d in pool:
        if len(out) >= n:
            break
        title, text = d["title"], d["text"]
        if text.lower().startswith(title.lower().rstrip(" .")):
            text = text[len(title):]
        if form == "sentence":
            sents = [s for s in re.split(r"(?<=[.?!])\s+", text) if 6 <= len(words(s)) <= 30]
            if not sents:
                continue
            q = rng.choice(sents)
        elif form == "terms":
            tf = Counter(w for w in words(text) if w not in STOP and not w.isdigit() and len(w) > 2)
            if len(tf) < 8:
                continue
            terms = list(tf)
            weights = [tf[w] * math.log(len(docs) / df[w]) for w in terms]
            pick: set[str] = set()
            while len(pick) < 5:
                pick.add(rng.choices(terms, weights)[0])
            q = " ".join(rng.sample(sorted(pick), len(pick)))
        else:
            if len(words(title)) < 3:
                continue
            q = title
        out.append((q, d["docid"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("form", choices=FORMS)
    ap.add_argument("n", type=int)
    ap.add_argument("seed", type=int)
    ap.add_argument("queries_out")
    ap.add_argument("qrels_out")
    a = ap.parse_args()
    with gzip.open(a.corpus, "rt") as f:
        docs = [json.loads(line) for line in f]
    pairs = make(docs, a.form, a.n, a.seed)
    with gzip.open(a.queries_out, "wt") as f:
        for i, (q, _) in enumerate(pairs):
            f.write(json.dumps({"qid": f"p{i}", "query": q}) + "\n")
    with open(a.qrels_out, "w") as f:
        f.write("qid\tdocid\trelevance\n")
        for i, (_, docid) in enumerate(pairs):
            f.write(f"p{i}\t{docid}\t1\n")


if __name__ == "__main__":
    main()
