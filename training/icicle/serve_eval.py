"""The serve-like evaluation: the sidecar's situation in Python, for any step function (ONNX or torch).

NQ dev-half queries of D_new documents, the context = BM25 top-N over D_new in BM25 order, the model's prompt
format, budget and summary cap. Per N: hits@1 of the top beam, BM25's first candidate (bm25_hits@1),
gold_in_prompt, copy_pick (the gold is the copy route's best, over queries with the gold in the prompt),
copy_first (the copy route's best is candidate [1]), and the histograms of the gold's position and of the copy
route's pick position (1-based), with copy_pick split by gold at [1] or later. copy_pick_with_rank_prior:
copy_pick after adding -w*log(BM25 rank) to each candidate's copy score, per w.

train.eval_serve runs it after each stage; lab.diagnose and lab.experiment run it on model directories and
experiments.
"""
from __future__ import annotations

import collections
import math
from typing import Callable, Sequence

from . import metrics
from .compress import cached_extractive
from .contexts import BM25Contexts
from .data import Split
from .decode import CachedPromptScorer, Trie, block_attention, decode
from .prompt import Candidate


def serve_queries(split: Split, n: int):
    """The serve-like evaluation's queries: NQ dev-half queries of D_new documents, the first n (as eval_serve)."""
    new = set(split.d_new)
    return [q for q in split.dev if q.docid in new][:n]


# copy_pick_with_rank_prior: the copy route's pick after adding -w*log(BM25 rank) to each candidate's score, the
# question being whether any w beats both the model alone (w=0) and BM25's order (w large)
RANK_PRIOR_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0, 100.0)


def serve_table(step, empty, encode: Callable[[str], list[int]], end_id: int, copy_id: int, global_trie: Trie,
                split: Split, build: Callable, n: int, ns: Sequence[int], contexts: BM25Contexts | None = None,
                summary: Callable | None = None, queries=None, layout: str = "",
                query_summary: Callable[[str, str], str] | None = None, scoring: str = "trie") -> dict:
    """The serve view for any step function (ONNX or torch); build(query, cands) -> Prompt in the model's format.
    queries and contexts default to serve_queries and BM25 over D_new. layout: read the prompt by blocks
    (model.block_attention's "contiguous" or "shared"; the prompt's segments) instead of causally. query_summary(query,
    docid), when given, replaces summary (a query's snippets). scoring: decode's ("trie" or "vocab", the sidecar's
    experimental.scoring)."""
    summary = summary or (lambda d: cached_extractive(split.docs[d].text))
    contexts = contexts or BM25Contexts(split.d_new, split.docs)
    qs = queries if queries is not None else serve_queries(split, n)
    contexts.prefetch([q.query for q in qs])
    out = {}
    for big_n in ns:
        gold_pos, pick_pos = collections.Counter(), collections.Counter()
        hit = bm = gin = pick = route = first = 0
        pick_at1 = n_at1 = 0
        fused = collections.Counter()
        for q in qs:
            titles = contexts.ranked(q.query)[:big_n]
            p = build(q.query, [Candidate(split.docs[t].title, query_summary(q.query, t) if query_summary else summary(t))
                                for t in titles])
            titles = titles[: p.included]
            ctx = Trie.build(titles, encode, end_id)
            lay = block_attention(p.segments, len(p.ids), layout) if layout else None
            res = decode(CachedPromptScorer(step, p.ids, empty, lay), global_trie, ctx, copy_id, end_id, 1, scoring)
            hit += metrics.hit([b.docid for b in res.beams], q.docid)
            bm += metrics.hit(titles, q.docid)
            route += int(res.p_copy > 0.5)
            if res.copy:
                k = titles.index(res.copy[0].docid) + 1
                pick_pos[k] += 1
                first += int(k == 1)
            if q.docid in titles:
                gin += 1
                g = titles.index(q.docid) + 1
                gold_pos[g] += 1
                ok = int(bool(res.copy) and res.copy[0].docid == q.docid)
                score = {b.docid: b.score for b in res.copy}
                for w in RANK_PRIOR_WEIGHTS:
                    best = max(titles, key=lambda d: score[d] - w * math.log(titles.index(d) + 1))
                    fused[w] += int(best == q.docid)
                pick += ok
                if g == 1:
                    n_at1 += 1
                    pick_at1 += ok
        k = max(1, len(qs))
        out[f"n{big_n}"] = {
            "n": len(qs), "hits@1": hit / k, "bm25_hits@1": bm / k, "gold_in_prompt": gin / k,
            "copy_pick": pick / max(1, gin), "copy_pick_gold_at_1": pick_at1 / max(1, n_at1),
            "copy_pick_gold_later": (pick - pick_at1) / max(1, gin - n_at1), "copy_first": first / k,
            "route_copy_rate": route / k,
            "gold_pos": dict(sorted(gold_pos.items())), "pick_pos": dict(sorted(pick_pos.items())),
            "copy_pick_with_rank_prior": {str(w): fused[w] / max(1, gin) for w in RANK_PRIOR_WEIGHTS},
        }
    return out
