"""BM25 contexts: in-context candidates as the sidecar serves them, for training and for a serve-like evaluation.

The paper builds a context-dependent instance from the gold document plus hard negatives at random positions
(negatives.py; configs with ``context="negatives"``). The sidecar instead puts Elasticsearch's BM25 top hits
in BM25 order into the prompt. A model trained only on the first never sees that order, so it cannot use it:
on the shipped 3-shot models the gold's BM25 rank told the model nothing. ``context="bm25"`` trains on what
it will serve:

- a context-dependent instance takes the top-n BM25 hits of the query over the pool (D_train in training),
  gold included at its BM25 rank; when BM25 misses the gold in the top n, the gold replaces the n-th hit
  (the answer must be copyable);
- a query-irrelevant instance takes the top-n hits with the gold removed (the sidecar's context holds only
  new documents, never the seen document a query may be about);
- n is drawn per instance from the config's ``context_n``; the prompt builder then keeps what fits.

BM25 is bm25s with Elasticsearch's defaults (evaluate.BM25_PARAMS) over "title\\ntext", the fields the sidecar
searches by default (title, text; the shipped readers were trained when it also searched the summary).
Retrievals are cached per query text.
"""
from __future__ import annotations

import random
from typing import Mapping, Sequence

from .data import Doc, Query


class BM25Contexts:
    """Ranked candidate lists from BM25 (evaluate.BM25Index) over a fixed pool of documents."""

    def __init__(self, pool: Sequence[str], docs: Mapping[str, Doc], depth: int = 101) -> None:
        from .evaluate import BM25Index

        self.index = BM25Index(docs, pool=pool)
        self.depth = min(depth, len(self.index.docids))
        self._cache: dict[str, list[str]] = {}

    def prefetch(self, queries: Sequence[str]) -> None:
        """Retrieves every query not cached yet in one batch (bm25s is much faster batched)."""
        todo = sorted({q for q in queries if q not in self._cache})
        if todo:
            self._cache.update(zip(todo, self.index.retrieve(todo, k=self.depth)))

    def ranked(self, query: str) -> list[str]:
        """The top `depth` docids for query, best first."""
        if query not in self._cache:
            self.prefetch([query])
        return self._cache[query]

    def context(self, q: Query, n: int, with_gold: bool) -> list[str]:
        """The n candidates of an instance for q, in BM25 order (see the module doc for the gold's place)."""
        if n < 1:
            raise ValueError(f"context size n must be >= 1, got {n}")
        hits = self.ranked(q.query)
        if not with_gold:
            return [d for d in hits if d != q.docid][:n]
        top = hits[:n]
        if q.docid not in top:
            top = top[: n - 1] + [q.docid]
        return top


class ShuffledContexts:
    """BM25Contexts with each query's top n in a random order fixed by the query text (a reading-only evaluation)."""

    def __init__(self, base: BM25Contexts, n: int = 10) -> None:
        self.base, self.n = base, n

    def prefetch(self, queries) -> None:
        self.base.prefetch(queries)

    def ranked(self, query: str) -> list[str]:
        hits = self.base.ranked(query)
        top = hits[: self.n]
        return random.Random(query).sample(top, len(top)) + hits[self.n:]


class ElasticsearchContexts:
    """The sidecar's own candidate lists: Elasticsearch's top hits among unseen documents of an index that
    `icicle ingest` wrote, with the query adapter.searchBody sends (best_fields multi_match, tie_breaker 0.5, over
    the default fields.search, title and text; filter seen=false). A diagnostic (diagnose serve --es), never used in training."""

    def __init__(self, url: str, index: str = "icicle-docs", depth: int = 10) -> None:
        self.url, self.index, self.depth = url.rstrip("/"), index, depth
        self._cache: dict[str, list[str]] = {}

    def body(self, query: str) -> dict:
        match = {"multi_match": {"query": query, "type": "best_fields", "fields": ["title", "text"],
                                 "tie_breaker": 0.5}}
        return {"size": self.depth, "query": {"bool": {"must": match, "filter": [{"term": {"seen": False}}]}},
                "_source": ["docid"], "track_total_hits": False}

    def prefetch(self, queries: Sequence[str]) -> None:
        for q in queries:
            self.ranked(q)

    def ranked(self, query: str) -> list[str]:
        if query not in self._cache:
            import json
            import urllib.request

            req = urllib.request.Request(f"{self.url}/{self.index}/_search", data=json.dumps(self.body(query)).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                hits = json.load(r)["hits"]["hits"]
            self._cache[query] = [h["_source"]["docid"] for h in hits]
        return self._cache[query]


def draw_n(context_n: Sequence[int], rng: random.Random) -> int:
    """One context size from the config's choices."""
    return rng.choice(list(context_n))
