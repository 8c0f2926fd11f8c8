"""Diagnostics for issue 16: does the model read its context? Two views, both printed as JSON.

    python -m icicle.lab.diagnose serve --model-dir ../models/small [--n 68] [--ns 10 100] [--sidecar [--es URL]] [--shuffled]
    python -m icicle.lab.diagnose instances --config small [--queries 300]

serve: the sidecar's situation (train.eval_serve's definition) on a MODEL_FORMAT.md directory through ONNX Runtime:
NQ dev-half queries of D_new documents, the context = BM25 top-N over D_new in BM25 order, the model's prompt
format, budget (max_context_tokens) and summary cap. Per N: hits@1 of the top beam, BM25's first candidate
(bm25_hits@1), gold_in_prompt, copy_pick (the gold is the copy route's best, over queries with the gold in the
prompt), copy_first (the copy route's best is candidate [1]), and the histograms of the gold's position and of the
copy route's pick position (1-based; the issue's table), with copy_pick split by gold at [1] or later.
copy_pick_with_rank_prior: copy_pick after adding -w*log(BM25 rank) to each candidate's copy score, per w.
--sidecar takes the demo's situation instead (every document outside seen_docids.txt is the pool, NQ dev queries in
file order; bm25s stands in for Elasticsearch, so contexts differ from the sidecar's in their tails, unless --es
names the demo's Elasticsearch, whose index then gives the very lists the sidecar puts in its prompts);
--shuffled shuffles each top 10, so that copy_pick measures reading alone (chance 0.10).

instances: what stage-1 instances of a config teach (no model): where the gold sits in context-dependent
instances, how much a query's query-irrelevant instance shares with its context-dependent one (the only signal
that separates "[COPY] gold" from "gold from memory" is then whether the gold's title is in the prompt), whether
an in-prompt title's tokens equal its docid tokens (per prompt format), and how many D_new titles use tokens the
restricted training output vocabulary never trained (train.docid_vocab).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
from typing import Sequence

from ..contexts import BM25Contexts, ElasticsearchContexts, ShuffledContexts
from ..data import load_beir, make_split
from ..prompt import Candidate, build_prompt, contains_run
from ..serve_eval import serve_queries, serve_table


def sidecar_queries(queries, seen: set[str], n: int):
    """The sidecar demo's new-document queries (`icicle eval`): NQ dev queries in file order whose relevant
    document is not in the model's seen corpus, the first n."""
    return [q for q in queries if q.nq_split == "dev" and q.docid not in seen][:n]


def serve_model_dir(model_dir: str, n: int, ns: Sequence[int], threads: int = 2, sidecar: bool = False,
                    shuffled: bool = False, es: str = "") -> dict:
    """serve_table on a model directory; sidecar=True takes the demo's situation instead of eval_serve's: the pool
    is every document outside the model's seen_docids.txt (what `icicle ingest` marks new) and the queries are
    sidecar_queries; es (a URL, with sidecar) takes the candidate lists from that Elasticsearch's index as the sidecar
    does (ElasticsearchContexts) instead of bm25s. shuffled=True puts each query's top 10 in a random order fixed by the query (ShuffledContexts):
    BM25's order then tells nothing, so copy_pick measures reading alone (chance 1/N)."""
    from ..decode import ort_step
    from ..evaluate import load_model_dir

    md = load_model_dir(model_dir, quantized=False, threads=threads)
    man = md.manifest

    def build(query, cands):
        return build_prompt(md.tok.encode, query, cands, man["max_context_tokens"],
                            max_summary_tokens=md.max_summary_tokens, template=md.template,
                            prompt_format=md.prompt_format)

    split = make_split()
    contexts = queries = None
    if sidecar:
        with open(os.path.join(model_dir, "seen_docids.txt"), encoding="utf-8") as f:
            seen = {line.strip() for line in f if line.strip()}
        contexts = (ElasticsearchContexts(es, depth=max(ns)) if es else
                    BM25Contexts(sorted(d for d in split.docs if d not in seen), split.docs))
        queries = sidecar_queries(load_beir()[1], seen, n)
    if shuffled:
        contexts = ShuffledContexts(contexts or BM25Contexts(split.d_new, split.docs))
    res = serve_table(ort_step(md.session, man["num_layers"]), md.empty_past(), md.tok.encode, md.tok.end_id,
                      md.tok.copy_id, md.global_trie, split, build, n, ns, contexts=contexts, queries=queries)
    return {"model_dir": model_dir, "prompt_format": md.prompt_format, "onnx": md.onnx,
            "situation": ("sidecar demo" if sidecar else "eval_serve") + (", Elasticsearch " + es if es and sidecar else "")
            + (", top 10 shuffled" if shuffled else ""), **res}


def instance_stats(config: str, n_queries: int = 300, seed: int = 0) -> dict:
    """What the config's stage-1 instances teach (see the module doc); no model is run."""
    from ..configs import get_config
    from ..train import context_sampler, docid_vocab, icl_instance, new_tok, select_corpus

    cfg = get_config(config)
    tok = new_tok(cfg)
    split = make_split()
    corpus = select_corpus(split, cfg)
    negs = context_sampler(cfg, split, corpus)
    rng = random.Random(seed)
    qs = rng.sample(corpus.train_queries, min(n_queries, len(corpus.train_queries)))
    if isinstance(negs, BM25Contexts):
        negs.prefetch([q.query for q in qs])
    gold_pos = collections.Counter()
    overlap = []
    ident = {1: 0, 2: 0}
    in_prompt = 0
    for q in qs:
        inst, titles = icl_instance(tok, cfg, q, corpus.docs, negs, rng, True)
        _, titles_irr = icl_instance(tok, cfg, q, corpus.docs, negs, random.Random(rng.random()), False)
        if q.docid in titles:
            in_prompt += 1
            gold_pos[min(titles.index(q.docid) + 1, 11)] += 1
        a, b = set(titles) - {q.docid}, set(titles_irr)
        overlap.append(len(a & b) / max(1, len(a | b)))
        for fmt in (1, 2):
            p = build_prompt(tok.encode, q.query, [Candidate(corpus.docs[q.docid].title, "s")], 1 << 20,
                             prompt_format=fmt)
            ident[fmt] += int(contains_run(p.ids, tok.encode(corpus.docs[q.docid].title)))
    ov = set(docid_vocab(tok, split.d_train).tolist())
    new_first = sum(tok.encode(d)[0] not in ov for d in split.d_new)
    new_any = sum(any(t not in ov for t in tok.encode(d)) for d in split.d_new)
    serve_new = [q.docid for q in serve_queries(split, 68)]
    k = max(1, len(qs))
    return {
        "config": config, "context": cfg.context, "context_n": list(cfg.context_n), "queries": len(qs),
        "gold_in_prompt": in_prompt / k,
        "gold_pos (11 = 11+)": {p: c / max(1, in_prompt) for p, c in sorted(gold_pos.items())},
        "jaccard(ctx-dependent minus gold, query-irrelevant) mean": sum(overlap) / k,
        "identical_contexts_but_gold": sum(o == 1.0 for o in overlap) / k,
        "title_tokens_verbatim_in_prompt": {f"format{f}": ident[f] / k for f in (1, 2)},
        "out_vocab": len(ov),
        "d_new_titles": len(split.d_new),
        "d_new_first_token_untrained": new_first / len(split.d_new),
        "d_new_any_token_untrained": new_any / len(split.d_new),
        "serve_golds_any_token_untrained": sum(any(t not in ov for t in tok.encode(d)) for d in serve_new)
        / max(1, len(serve_new)),
        "stage1_mix_per_epoch": {
            "context_dependent_seen": len(corpus.train_queries),
            "query_irrelevant_seen": len(corpus.train_queries),
            "context_dependent_copy_pool": min(cfg.copy_pool_queries, len(corpus.copy_queries)),
            "anchors": int(round(cfg.anchor_ratio * (2 * len(corpus.train_queries)
                                                     + min(cfg.copy_pool_queries, len(corpus.copy_queries))))),
        },
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.diagnose", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--model-dir", required=True)
    s.add_argument("--n", type=int, default=68)
    s.add_argument("--ns", type=int, nargs="+", default=[10, 100])
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--sidecar", action="store_true",
                   help="the demo's pool (all documents not seen) and queries (NQ dev, file order) instead")
    s.add_argument("--es", default="", help="with --sidecar: take the candidates from this Elasticsearch (the demo's "
                   "index, e.g. http://127.0.0.1:9200) as the sidecar does, instead of bm25s")
    s.add_argument("--shuffled", action="store_true",
                   help="each query's top 10 in a random order: copy_pick then measures reading alone (chance 0.1)")
    i = sub.add_parser("instances")
    i.add_argument("--config", default="small")
    i.add_argument("--queries", type=int, default=300)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        out = serve_model_dir(a.model_dir, a.n, a.ns, a.threads, a.sidecar, a.shuffled, a.es)
    else:
        out = instance_stats(a.config, a.queries)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
