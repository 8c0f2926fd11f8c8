"""Reference evaluation of an exported model directory on nq_qed (issue #4), after the paper's protocol.

    python -m icicle.evaluate --model-dir ../models/tiny --out out/eval-tiny [--n-queries 200]

Model: the directory's model.onnx (or model.int8.onnx with --quantized) through ONNX Runtime, its
tokenizer.json, manifest template and budget (max_context_tokens), decoded by ``icicle.decode`` (the reference
routed beam search the Go engine matches); the global trie is the directory's seen_docids.txt.

Queries (``icicle.data.make_split``, NQ dev half by default): D_train-doc queries are those whose relevant
document is in the model's seen corpus (seen_docids.txt); D_new-doc queries those whose document is in D_new.
Dev queries of D_train documents outside the seen corpus are left out (counted). Each set is shuffled with the
seed and cut to --n-queries.

Conditions, for every N in --n-shots (3/10/20/50/100), as paper section 4.1 and table 4 / figure 3:
- new_ctx: D_new-doc queries; the gold document + N-1 random D_new documents, the gold at a uniform position;
- train_ctx: D_train-doc queries; the same construction (gold + N-1 random D_new documents);
- train_noise ("all-noise"): D_train-doc queries; N random D_new documents, no gold: parametric recall.
Negatives are per query a seeded sample of D_new (minus the gold) of size max(N); N takes a prefix, so the
N-shot sets are nested; they are written to <out>/candidates.json and reused by later runs with the same key
(data version, seed, N list, query ids), so two models are evaluated on identical candidate lists.
Candidates are shown with the extractive summary (``icicle.compress.Extractive``) and their title; the prompt
builder keeps the candidates that fit the budget (a gold dropped there counts as absent: z = 0 below).

Metrics per (condition, N): Hits@1 / Hits@10 / MRR@10 of the final ranking (``icicle.metrics``; beam width 10: copy
route and parametric beams merged), gold-in-prompt rate, mean candidates in context, mean p([COPY]). Routing, with
z = gold in the prompt and the router decision zhat = p([COPY]) >= 0.5: routing recall = P(zhat = 1 | z = 1);
P(hit | COPY) = P(best copy-route docid is the gold | z = 1, zhat = 1); false COPY rate = P(zhat = 1 | z = 0).
ECE of the router (paper appendix H): confidence max(s, 1-s), accuracy 1[zhat = z], 10 equal-width bins
over [0, 1], over every instance of that N.

BM25 row: bm25s (Lucene idf, k1 1.2, b 0.75 as Elasticsearch's defaults; lower case, English stop words, no
stemming) over the full corpus (title + text), Hits@1 / Hits@10 / MRR@10 on the same query sets and on all dev
queries.

Writes <out>/results.json, <out>/results.md (tables shaped like the paper's table 1 and table 4, plus routing)
and <out>/nshot.png (N-shot scaling, matplotlib Agg).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from . import metrics
from .compress import Extractive
from .data import Doc, Query, Split, make_split
from .decode import CachedPromptScorer, Trie, decode, ort_step
from .prompt import DEFAULT_MAX_SUMMARY_TOKENS, TEMPLATE, Candidate, build_prompt
from .tokenizer import Tok, load_tok

N_SHOTS = (3, 10, 20, 50, 100)
CONDITIONS = ("train_ctx", "train_noise", "new_ctx")
BM25_PARAMS = {"k1": 1.2, "b": 0.75, "method": "lucene"}


@dataclass
class ModelDir:
    path: str
    manifest: dict
    tok: Tok
    session: object
    seen: list[str]
    global_trie: Trie
    onnx: str

    @property
    def template(self) -> dict:
        return self.manifest.get("template") or TEMPLATE

    @property
    def prompt_format(self) -> int:
        """The manifest's prompt_format (absent = 1, the models trained before it existed)."""
        return int(self.manifest.get("prompt_format") or 1)

    @property
    def max_summary_tokens(self) -> int:
        """The summary cap: the manifest's max_summary_tokens where it states one (as the Go engine applies)."""
        cap = int(self.manifest.get("max_summary_tokens") or 0)
        return min(cap, DEFAULT_MAX_SUMMARY_TOKENS) if cap > 0 else DEFAULT_MAX_SUMMARY_TOKENS

    def empty_past(self) -> list[np.ndarray]:
        m = self.manifest
        return [np.zeros((1, 0, m["num_kv_heads"], m["head_dim"]), np.float32)] * (2 * m["num_layers"])


def load_model_dir(path: str, quantized: bool = False, threads: int = 1) -> ModelDir:
    """Opens a MODEL_FORMAT.md directory: manifest, tokenizer, ONNX session (CPU, `threads` intra-op)."""
    import onnxruntime as ort

    with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    onnx = man.get("onnx_quantized") if quantized else man["onnx"]
    if not onnx:
        raise FileNotFoundError(f"{path}: the manifest names no quantized model")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(path, onnx), so, providers=["CPUExecutionProvider"])
    tok = load_tok(os.path.join(path, man.get("tokenizer", "tokenizer.json")))
    with open(os.path.join(path, man.get("seen_docids", "seen_docids.txt")), encoding="utf-8") as f:
        seen = [line.rstrip("\n") for line in f if line.strip()]
    return ModelDir(path, man, tok, sess, seen, Trie.build(seen, tok.encode, tok.end_id), onnx)


def ece(probs: Sequence[float], labels: Sequence[int], n_bins: int = 10) -> float:
    """Expected calibration error of the router (paper appendix H): zhat = 1[s >= 0.5], confidence
    max(s, 1-s), accuracy 1[zhat = z], equal-width bins over [0, 1] (a confidence of 1 falls in the last)."""
    s = np.asarray(probs, dtype=np.float64)
    z = np.asarray(labels, dtype=np.int64)
    if s.size == 0:
        return float("nan")
    conf = np.maximum(s, 1 - s)
    correct = ((s >= 0.5).astype(np.int64) == z).astype(np.float64)
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        m = bins == b
        if m.any():
            total += m.sum() / s.size * abs(correct[m].mean() - conf[m].mean())
    return float(total)


def query_sets(split: Split, seen: Sequence[str], which: str, n: int, seed: int) -> tuple[list[Query], list[Query], int]:
    """(D_train-doc queries, D_new-doc queries, left out) of the NQ dev or test half, shuffled, first n each."""
    qs = {"dev": split.dev, "test": split.test}[which]
    seen_set, new_set = set(seen), set(split.d_new)
    tr = [q for q in qs if q.docid in seen_set]
    nw = [q for q in qs if q.docid in new_set]
    other = len(qs) - len(tr) - len(nw)
    rng = random.Random(seed)
    rng.shuffle(tr)
    rng.shuffle(nw)
    return tr[:n], nw[:n], other


def make_candidates(split: Split, seen: Sequence[str], queries: Sequence[Query], n_shots: Sequence[int],
                    seed: int) -> dict:
    """Per query: "negatives" (max(N) D_new docids, never the gold or a seen doc) and "gold_pos" per N."""
    pool = [d for d in split.d_new if d not in set(seen)]
    top = max(n_shots)
    out = {}
    for q in queries:
        rng = random.Random(f"{seed}:{q.qid}")
        cands = [d for d in pool if d != q.docid]
        if len(cands) < top:
            raise ValueError(f"D_new has {len(cands)} documents besides the gold, fewer than N={top}")
        negs = rng.sample(cands, top)
        out[q.qid] = {"negatives": negs, "gold_pos": {str(n): rng.randrange(n) for n in n_shots}}
    return out


def cached_candidates(path: str, key: dict, make) -> tuple[dict, bool]:
    """The candidates stored at path when its key equals key, else make() written there."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
        if c.get("key") == key:
            return c["queries"], True
    q = make()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"key": key, "queries": q}, f, ensure_ascii=False)
    os.replace(path + ".tmp", path)
    return q, False


def context_docids(cand: dict, gold: str, n: int, with_gold: bool) -> list[str]:
    if not with_gold:
        return cand["negatives"][:n]
    ids = cand["negatives"][: n - 1]
    ids.insert(cand["gold_pos"][str(n)], gold)
    return ids


def run_instance(md: ModelDir, split: Split, q: Query, docids: Sequence[str], summaries: dict, max_prompt_tokens: int,
                 beam_width: int, title_only: bool) -> dict:
    """Builds the prompt, decodes, and scores one instance against its gold document."""
    docs = split.docs
    cands = [Candidate(docs[d].title, summaries[d]) for d in docids]
    p = build_prompt(md.tok.encode, q.query, cands, max_prompt_tokens, max_summary_tokens=md.max_summary_tokens,
                     title_only=title_only, template=md.template, prompt_format=md.prompt_format)
    included = [c.title for c in cands[: p.included]]
    ctx = Trie.build(included, md.tok.encode, md.tok.end_id)
    scorer = CachedPromptScorer(ort_step(md.session, md.manifest["num_layers"]), p.ids, md.empty_past())
    res = decode(scorer, md.global_trie, ctx, md.tok.copy_id, md.tok.end_id, beam_width)
    gold = docs[q.docid].title
    ranked = [b.docid for b in res.beams]
    return {
        "qid": q.qid, "in_context": p.included, "prompt_tokens": len(p.ids),
        "gold_in_prompt": gold in included, "p_copy": res.p_copy,
        "hit1": metrics.hit(ranked, gold, 1), "hit10": metrics.hit(ranked, gold, 10),
        "rr10": metrics.reciprocal_rank(ranked, gold),
        "top": ranked[:1], "top_route": res.beams[0].route if res.beams else "",
        "copy_hit": bool(res.copy) and res.copy[0].docid == gold,
    }


def summarize(rows: list[dict]) -> dict:
    z1 = [r for r in rows if r["gold_in_prompt"]]
    z0 = [r for r in rows if not r["gold_in_prompt"]]
    routed = [r for r in z1 if r["p_copy"] >= 0.5]
    return {
        "n": len(rows),
        "hits@1": metrics.mean(r["hit1"] for r in rows),
        "hits@10": metrics.mean(r["hit10"] for r in rows),
        "mrr@10": metrics.mean(r["rr10"] for r in rows),
        "gold_in_prompt": metrics.mean(r["gold_in_prompt"] for r in rows),
        "in_context": metrics.mean(r["in_context"] for r in rows),
        "prompt_tokens": metrics.mean(r["prompt_tokens"] for r in rows),
        "mean_p_copy": metrics.mean(r["p_copy"] for r in rows),
        "routing_recall": metrics.mean(r["p_copy"] >= 0.5 for r in z1),
        "p_hit_given_copy": metrics.mean(r["copy_hit"] for r in routed),
        "false_copy_rate": metrics.mean(r["p_copy"] >= 0.5 for r in z0),
    }


class BM25Index:
    """bm25s over "title\ntext" of the pool (default: the whole corpus); retrieve returns the top-k docids per
    query. contexts.BM25Contexts searches D_train or D_new through it."""

    def __init__(self, docs: Mapping[str, Doc], k1: float = BM25_PARAMS["k1"], b: float = BM25_PARAMS["b"],
                 pool: Sequence[str] | None = None) -> None:
        import bm25s

        self._bm25s = bm25s
        self.docids = sorted(docs if pool is None else pool)
        if not self.docids:
            raise ValueError("BM25 needs a non-empty pool of documents")
        texts = [f"{docs[d].title}\n{docs[d].text}" for d in self.docids]
        self.r = bm25s.BM25(k1=k1, b=b, method=BM25_PARAMS["method"])
        self.r.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def retrieve(self, queries: Sequence[str], k: int = 10) -> list[list[str]]:
        toks = self._bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        toks = [t if t else [""] for t in toks]
        ids, _ = self.r.retrieve(toks, k=k, show_progress=False, n_threads=1)
        return [[self.docids[i] for i in row] for row in ids]


def bm25_hits(index: BM25Index, queries: Sequence[Query]) -> dict:
    """metrics.table of BM25's top 10 for queries."""
    got = index.retrieve([q.query for q in queries], k=10) if queries else []
    return metrics.table(zip(got, [q.docid for q in queries]))


def _repo_relative(path: str) -> str:
    """path relative to the repository root when it lies inside it (reports stay machine-independent), else as given."""
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    p = os.path.abspath(path)
    return os.path.relpath(p, repo) if p.startswith(repo + os.sep) else path


def run(model_dir: str, out: str, *, n_queries: int = 200, n_shots: Sequence[int] = N_SHOTS, seed: int = 0,
        beam_width: int = 10, query_split: str = "dev", quantized: bool = False, threads: int = 1,
        max_prompt_tokens: int | None = None, title_only: bool = False, split: Split | None = None,
        log=print) -> dict:
    """Evaluates model_dir (module doc) and writes results.json, results.md and nshot.png under out."""
    t_start = time.perf_counter()
    n_shots = sorted(set(int(n) for n in n_shots))
    split = split or make_split()
    md = load_model_dir(model_dir, quantized, threads)
    budget = max_prompt_tokens or md.manifest["max_context_tokens"]
    tr, nw, other = query_sets(split, md.seen, query_split, n_queries, seed)
    key = {"data_version": split.data_version, "seed": seed, "n_shots": n_shots, "split": query_split,
           "seen_sha": _sha(md.seen), "qids": [q.qid for q in tr + nw]}
    os.makedirs(out, exist_ok=True)
    cands, reused = cached_candidates(os.path.join(out, "candidates.json"), key,
                                      lambda: make_candidates(split, md.seen, tr + nw, n_shots, seed))
    comp = Extractive()
    summaries = {}
    for c in cands.values():
        for d in c["negatives"]:
            if d not in summaries:
                summaries[d] = comp.compress(split.docs[d].title, split.docs[d].text)
    for q in tr + nw:
        summaries[q.docid] = comp.compress(split.docs[q.docid].title, split.docs[q.docid].text)
    log(f"evaluate: {md.manifest.get('name')} | {len(tr)} D_train-doc + {len(nw)} D_new-doc {query_split} queries "
        f"({other} left out) | N {n_shots} | budget {budget} tokens | candidates {'reused' if reused else 'new'}")

    per_n: dict[str, dict] = {}
    instances: list[dict] = []
    for n in n_shots:
        t0 = time.perf_counter()
        rows: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
        for cond, qs, with_gold in (("train_ctx", tr, True), ("train_noise", tr, False), ("new_ctx", nw, True)):
            for q in qs:
                ids = context_docids(cands[q.qid], q.docid, n, with_gold)
                r = run_instance(md, split, q, ids, summaries, budget, beam_width, title_only)
                rows[cond].append(r)
                instances.append({"n": n, "condition": cond, **r})
        all_rows = [r for c in CONDITIONS for r in rows[c]]
        per_n[str(n)] = {c: summarize(rows[c]) for c in CONDITIONS}
        e = ece([r["p_copy"] for r in all_rows], [int(r["gold_in_prompt"]) for r in all_rows])
        per_n[str(n)]["ece"] = None if math.isnan(e) else e
        per_n[str(n)]["seconds"] = round(time.perf_counter() - t0, 2)
        s = per_n[str(n)]
        log(f"evaluate: N={n}: D_new ctx H@1 {_f(s['new_ctx']['hits@1'])} H@10 {_f(s['new_ctx']['hits@10'])} | "
            f"D_train noise H@1 {_f(s['train_noise']['hits@1'])} | ECE {_f(s['ece'])} | {s['seconds']}s")

    t0 = time.perf_counter()
    bm = BM25Index(split.docs)
    all_q = {"dev": split.dev, "test": split.test}[query_split]
    bm25 = {"train": bm25_hits(bm, tr), "new": bm25_hits(bm, nw), "all": bm25_hits(bm, all_q),
            "params": {**BM25_PARAMS, "tokenizer": "bm25s.tokenize(lower, stopwords=en, no stemmer)",
                       "corpus": f"full nq_qed ({len(split.docs)} docs, title + text)"},
            "seconds": round(time.perf_counter() - t0, 2)}
    n_main = max(n_shots)
    results = {
        "model": {"name": md.manifest.get("name"), "model_version": md.manifest.get("model_version"),
                  "data_version": md.manifest.get("data_version"), "dir": _repo_relative(model_dir), "onnx": md.onnx,
                  "seen_docs": len(md.seen), "max_prompt_tokens": budget},
        "protocol": {"split": query_split, "data_version": split.data_version, "seed": seed, "n_queries": n_queries,
                     "n_shots": n_shots, "beam_width": beam_width, "summaries": comp.id, "title_only": title_only,
                     "negatives": "uniform D_new, nested over N", "router_threshold": 0.5, "ece_bins": 10},
        "queries": {"train": len(tr), "new": len(nw), "left_out": other},
        "nshot": per_n,
        "main": {"n_shots": n_main, "train": {k: per_n[str(n_main)]["train_noise"][k] for k in ("hits@1", "hits@10")},
                 "new": {k: per_n[str(n_main)]["new_ctx"][k] for k in ("hits@1", "hits@10")}},
        "bm25": bm25,
        "candidates_reused": reused,
        "runtime_s": 0.0,
    }
    results["runtime_s"] = round(time.perf_counter() - t_start, 2)
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
    with open(os.path.join(out, "instances.jsonl"), "w", encoding="utf-8") as f:
        for r in instances:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    plot(results, os.path.join(out, "nshot.png"))
    log(f"evaluate: wrote {out}/results.json, results.md, nshot.png in {results['runtime_s']}s")
    return results


def _sha(items: Sequence[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(items).encode("utf-8")).hexdigest()[:12]


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(r: dict) -> str:
    m, p, q = r["model"], r["protocol"], r["queries"]
    ns = p["n_shots"]
    main = r["main"]
    bm = r["bm25"]
    lines = [
        f"# Evaluation of {m['name']} ({m['model_version']}) on nq_qed {p['split']}",
        "",
        f"{q['train']} D_train-doc queries (gold in the model's {m['seen_docs']}-document seen corpus), {q['new']} D_new-doc "
        f"queries, {q['left_out']} left out (gold in D_train but not in the seen corpus). Summaries `{p['summaries']}`, "
        f"prompt budget {m['max_prompt_tokens']} tokens, beam width {p['beam_width']}, seed {p['seed']}, "
        f"`{m['onnx']}`. Runtime {r['runtime_s']} s.",
        "",
        f"## Main result (paper table 1 layout; N = {main['n_shots']})",
        "",
        "| Method | D_train H@1 | D_train H@10 | D_new H@1 | D_new H@10 |",
        "|---|---|---|---|---|",
        f"| BM25 (bm25s, full corpus) | {_f(bm['train']['hits@1'])} | {_f(bm['train']['hits@10'])} | "
        f"{_f(bm['new']['hits@1'])} | {_f(bm['new']['hits@10'])} |",
        f"| {m['name']} | {_f(main['train']['hits@1'])} | {_f(main['train']['hits@10'])} | {_f(main['new']['hits@1'])} | "
        f"{_f(main['new']['hits@10'])} |",
        "",
        f"D_train: all-noise context (N random D_new documents); D_new: the gold + N-1 random D_new documents. "
        f"BM25 on all {bm['all']['n']} {p['split']} queries: H@1 {_f(bm['all']['hits@1'])}, H@10 {_f(bm['all']['hits@10'])} "
        f"(k1 {bm['params']['k1']}, b {bm['params']['b']}).",
        "",
        "## N-shot scaling (paper table 4 / figure 3)",
        "",
        "| condition | metric | " + " | ".join(f"N={n}" for n in ns) + " |",
        "|---|---|" + "---|" * len(ns),
    ]
    names = {"train_ctx": "D_train ctx", "train_noise": "D_train noise", "new_ctx": "D_new ctx"}
    for c in CONDITIONS:
        for k in ("hits@1", "hits@10"):
            lines.append(f"| {names[c]} | {k.replace('hits', 'H')} | " + " | ".join(_f(r["nshot"][str(n)][c][k]) for n in ns) + " |")
    lines += [
        "",
        "## Routing and calibration (paper figure 5, appendix H)",
        "",
        "| N | in context | gold in prompt (D_new) | routing recall D_new | routing recall D_train | P(hit \\| COPY) D_new | "
        "P(hit \\| COPY) D_train | false COPY (noise) | mean p_copy ctx / noise | ECE | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in ns:
        s = r["nshot"][str(n)]
        lines.append(
            f"| {n} | {_f(s['new_ctx']['in_context'], 1)} | {_f(s['new_ctx']['gold_in_prompt'])} | {_f(s['new_ctx']['routing_recall'])} | "
            f"{_f(s['train_ctx']['routing_recall'])} | {_f(s['new_ctx']['p_hit_given_copy'])} | "
            f"{_f(s['train_ctx']['p_hit_given_copy'])} | {_f(s['train_noise']['false_copy_rate'])} | "
            f"{_f(s['new_ctx']['mean_p_copy'])} / {_f(s['train_noise']['mean_p_copy'])} | {_f(s['ece'])} | {s['seconds']} |")
    lines += [
        "",
        "Routing: z = gold in the prompt (after the budget cut), router decision p([COPY]) >= 0.5. Routing recall = "
        "P(COPY | z=1); P(hit | COPY) = the best copy-route title is the gold, given z=1 and COPY; false COPY = "
        "P(COPY | z=0); ECE: confidence max(s, 1-s), accuracy 1[decision = z], 10 equal-width bins, all instances of "
        "that N. A dash: no instance to average over.",
        "",
    ]
    return "\n".join(lines)


def plot(r: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ns = r["protocol"]["n_shots"]
    nan = float("nan")

    def series(cond: str, k: str) -> list[float]:
        return [nan if r["nshot"][str(n)][cond][k] is None else r["nshot"][str(n)][cond][k] for n in ns]

    fig, (top, bot) = plt.subplots(2, 1, figsize=(6, 6.5), sharex=True)
    style = {"hits@1": "-o", "hits@10": "--s"}
    for c, label in (("train_ctx", "ctx"), ("train_noise", "noise")):
        for k in ("hits@1", "hits@10"):
            top.plot(ns, series(c, k), style[k], label=f"{label}@{k[5:]}")
    for k in ("hits@1", "hits@10"):
        bot.plot(ns, series("new_ctx", k), style[k], label=f"ctx@{k[5:]}")
        if r["bm25"]["new"][k] is not None:
            bot.axhline(r["bm25"]["new"][k], color="grey", lw=0.8, ls=style[k][:-1], label=f"BM25@{k[5:]}")
    top.set_title(f"{r['model']['name']}: seen documents (D_train)")
    bot.set_title("unseen documents (D_new)")
    for ax in (top, bot):
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("Hits")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    bot.set_xscale("log")
    bot.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    bot.set_xticks(ns)
    bot.set_xticklabels([str(n) for n in ns])
    bot.set_xlabel("in-context candidates N")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-queries", type=int, default=200, help="queries per set (D_train-doc, D_new-doc)")
    ap.add_argument("--n-shots", default=",".join(map(str, N_SHOTS)), help="comma-separated N values")
    ap.add_argument("--split", choices=["dev", "test"], default="dev")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--beam-width", type=int, default=10)
    ap.add_argument("--max-prompt-tokens", type=int, default=None, help="default: the manifest's max_context_tokens")
    ap.add_argument("--title-only", action="store_true", help="title-only candidate blocks")
    ap.add_argument("--quantized", action="store_true", help="model.int8.onnx")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    a = ap.parse_args(argv)
    run(a.model_dir, a.out, n_queries=a.n_queries, n_shots=[int(x) for x in a.n_shots.split(",") if x],
        seed=a.seed, beam_width=a.beam_width, query_split=a.split, quantized=a.quantized, threads=a.threads,
        max_prompt_tokens=a.max_prompt_tokens, title_only=a.title_only)


if __name__ == "__main__":
    main()
