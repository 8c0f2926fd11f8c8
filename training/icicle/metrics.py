"""Retrieval metrics, the one place training/ computes them: Hits@k and MRR@10 of rankings against their relevant
documents, overall and per subset (the seen and new documents' queries), by the definitions of the sidecar's
`icicle eval` (internal/eval): a query's rank is the 1-based place of its first relevant document, Hits@k the share
of queries ranked k or better, MRR@10 the mean of 1/rank over queries ranked 10 or better (0 for the others).

A ranking is a sequence of docids (None stands for no answer); relevant is one docid or a collection of them.
"""
from __future__ import annotations

from typing import Collection, Iterable, Sequence

import numpy as np

KS = (1, 10)  # the Hits@k every table reports
MRR_K = 10


def rank(ranked: Sequence[str | None], relevant: str | Collection[str]) -> int:
    """The 1-based place of the first relevant document in ranked; 0 when none is there."""
    rel = {relevant} if isinstance(relevant, str) else relevant
    return next((i for i, d in enumerate(ranked, 1) if d in rel), 0)


def hit(ranked: Sequence[str | None], relevant: str | Collection[str], k: int = 1) -> bool:
    """Whether a relevant document is among the first k of ranked."""
    return 0 < rank(ranked[:k], relevant)


def reciprocal_rank(ranked: Sequence[str | None], relevant: str | Collection[str], k: int = MRR_K) -> float:
    """1 / rank when a relevant document is among the first k of ranked, else 0."""
    r = rank(ranked[:k], relevant)
    return 1 / r if r else 0.0


def mean(xs: Iterable) -> float | None:
    """The mean, or None (JSON null, a dash in a table) when there is nothing to average."""
    xs = list(xs)
    return float(np.mean(xs)) if xs else None


def table(rows: Iterable[tuple[Sequence[str | None], str | Collection[str]]]) -> dict:
    """{"n", "hits@1", "hits@10", "mrr@10"} over rows of (ranking, relevant); None for an empty set."""
    ranks = [rank(ranked[:max(*KS, MRR_K)], rel) for ranked, rel in rows]
    return {"n": len(ranks), **{f"hits@{k}": mean(0 < r <= k for r in ranks) for k in KS},
            f"mrr@{MRR_K}": mean(1 / r if r else 0.0 for r in ranks)}


def by_subset(rows: Iterable[tuple[str, Sequence[str | None], str | Collection[str]]]) -> dict[str, dict]:
    """table() per subset, over rows of (subset, ranking, relevant); subsets in sorted order."""
    parts: dict[str, list] = {}
    for subset, ranked, rel in rows:
        parts.setdefault(subset, []).append((ranked, rel))
    return {s: table(parts[s]) for s in sorted(parts)}
