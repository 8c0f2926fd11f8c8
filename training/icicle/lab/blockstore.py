"""A bounded block store under a skewed query stream, simulated on real first-stage candidate lists.

A block-reading reader (profile b7) reads each of its 100 candidates from a stored block (446 KB a document at
24-token summaries). A store that holds only some documents and computes a block on a miss (about 31 ms of the
two cores per block, the rate at which the sidecar fills its store) is worth building only if a request's
candidates are mostly stored. This replays a Zipf-skewed stream over real queries, each reading the sidecar's
own top 100, through a least-recently-used store of each size, and reports the hit rate and the misses per
request; with several replicas, each with its own store, it compares random routing with routing by query.

    python -m icicle.lab.blockstore candidates --sidecar http://127.0.0.1:8080 --queries ../data/nq_qed/queries.jsonl.gz --n 3000 --out cands.jsonl
    python -m icicle.lab.blockstore simulate --candidates cands.jsonl --docs 7248
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gzip
import json
import random
import urllib.request
from dataclasses import dataclass

BLOCK_MS = 31.0  # one block computed on a miss, two cores (the store's fill: 32.2 documents a second)


@dataclass
class Outcome:
    hit_rate: float
    misses: list[int]  # per request after the warm-up, sorted

    def pct(self, q: float) -> int:
        return self.misses[min(len(self.misses) - 1, int(len(self.misses) * q))]


def zipf_stream(n_queries: int, s: float, n: int, seed: int) -> list[int]:
    """n query indices drawn with probability proportional to 1 / rank^s, ranks a random permutation."""
    rnd = random.Random(seed)
    order = list(range(n_queries))
    rnd.shuffle(order)
    weights = [1 / (i + 1) ** s for i in range(n_queries)]
    return [order[i] for i in rnd.choices(range(n_queries), weights=weights, k=n)]


def replay(cands: list[list[str]], stream: list[int], capacity: int, replicas: int = 1, route: str = "random",
           warm: int = 0) -> Outcome:
    """Replay stream through `replicas` LRU stores of `capacity` documents each; a request goes to a random
    replica or, with route "query", to the one its query hashes to. Requests before `warm` fill the stores
    without being counted."""
    if capacity < 1:
        raise ValueError(f"capacity: {capacity}, want at least 1 document")
    if route not in ("random", "query"):
        raise ValueError(f"route: {route!r}, want 'random' or 'query'")
    stores = [collections.OrderedDict() for _ in range(replicas)]
    rnd = random.Random(1)
    misses, read = [], 0
    for t, q in enumerate(stream):
        store = stores[rnd.randrange(replicas) if route == "random" else q % replicas]
        m = 0
        for d in cands[q]:
            if d in store:
                store.move_to_end(d)
            else:
                m += 1
                store[d] = True
                if len(store) > capacity:
                    store.popitem(last=False)
        if t >= warm:
            misses.append(m)
            read += len(cands[q])
    return Outcome(1 - sum(misses) / max(read, 1), sorted(misses))


def fetch_candidates(sidecar: str, queries: str, n: int, out: str, size: int = 100, seed: int = 7) -> None:
    qs = [json.loads(line) for line in gzip.open(queries, "rt")]
    random.Random(seed).shuffle(qs)

    def one(q: dict) -> dict:
        req = urllib.request.Request(f"{sidecar}/v1/search", json.dumps({"query": q["query"], "size": size}).encode(),
                                     {"Content-Type": "application/json"})
        body = json.load(urllib.request.urlopen(req, timeout=60))
        return {"qid": q["qid"], "mode": body.get("mode"), "docids": [r["docid"] for r in body["results"]]}

    with concurrent.futures.ThreadPoolExecutor(4) as ex, open(out, "w") as f:
        for r in ex.map(one, qs[:n]):
            f.write(json.dumps(r) + "\n")


def simulate(cands: list[list[str]], docs: int, n: int) -> str:
    warm = n // 6
    reach = len({d for c in cands for d in c})
    lines = [f"{len(cands)} queries; their top {max(map(len, cands))} lists reach {reach} of {docs} documents; "
             f"{n} requests, the first {warm} only filling the store",
             "",
             "| Zipf s | store (% of the documents) | hit rate | misses a request p50 / p95 / p99 | "
             f"added ms p50 / p95 ({BLOCK_MS:.0f} ms a block) |",
             "|---|---|---|---|---|"]
    for s in (0.0, 0.8, 1.0, 1.2):
        stream = zipf_stream(len(cands), s, n, 3)
        for pct in (1, 2, 5, 10, 20, 50):
            o = replay(cands, stream, max(1, docs * pct // 100), warm=warm)
            lines.append(f"| {s} | {pct} | {o.hit_rate:.3f} | {o.pct(0.5)} / {o.pct(0.95)} / {o.pct(0.99)} | "
                         f"{o.pct(0.5) * BLOCK_MS:.0f} / {o.pct(0.95) * BLOCK_MS:.0f} |")
    lines += ["", "| Zipf s | stores | routing | hit rate | misses p50 / p95 |", "|---|---|---|---|---|"]
    for s in (0.8, 1.0):
        stream = zipf_stream(len(cands), s, n, 3)
        for pct in (5, 10):
            cap = max(1, docs * pct // 100)
            for route in ("random", "query"):
                o = replay(cands, stream, cap, 3, route, warm)
                lines.append(f"| {s} | 3 x {pct}% | {route} | {o.hit_rate:.3f} | {o.pct(0.5)} / {o.pct(0.95)} |")
            o = replay(cands, stream, 3 * cap, warm=warm)
            lines.append(f"| {s} | 1 x {3 * pct}% | one store | {o.hit_rate:.3f} | {o.pct(0.5)} / {o.pct(0.95)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("candidates", help="each query's top 100 from a running sidecar")
    c.add_argument("--sidecar", required=True)
    c.add_argument("--queries", required=True)
    c.add_argument("--n", type=int, default=3000)
    c.add_argument("--out", required=True)
    s = sub.add_parser("simulate", help="the tables, from a candidates file")
    s.add_argument("--candidates", required=True)
    s.add_argument("--docs", type=int, required=True, help="documents in the index")
    s.add_argument("--requests", type=int, default=60000)
    a = ap.parse_args()
    if a.cmd == "candidates":
        fetch_candidates(a.sidecar, a.queries, a.n, a.out)
        return
    cands = [r["docids"] for r in map(json.loads, open(a.candidates)) if r["docids"]]
    print(simulate(cands, a.docs, a.requests))


if __name__ == "__main__":
    main()
