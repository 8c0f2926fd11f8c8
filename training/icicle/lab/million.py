"""A million-document corpus for measuring the first stage at a team's scale: real documents with their real
vectors, and synthetic ones around them, with the vectors in `icicle ingest -vectors`'s file format.

Real: nq_qed's 7,248 passages (its shipped vectors) and wiki_intro_pool's 27,654 introductions (vectors made by
`icicle vectors` with the served encoder). Synthetic, up to --total documents, and said to be so (docid
`syn-<n>`):
- text: words drawn from the real documents' word frequencies, as many as a real document drawn at random has
  (so BM25 sees real length and term statistics, not real sentences); title: 2 to 5 such words;
- vector: a mixture of three real document vectors (Dirichlet weights) plus Gaussian noise, normalised. It stays
  inside the cone real vectors occupy (bge-small's vectors of unrelated texts have cosines near 0.4-0.6, not 0),
  so synthetic documents compete with real ones for a query's neighbours; pure Gaussian vectors would not.

    python -m icicle.lab.million make --nq ../data/nq_qed --wiki ../../shared/data/wiki_intro_pool/corpus.jsonl.gz \
        --wiki-vectors wiki.vec.gz --total 1000000 --out DIR     # DIR/corpus.jsonl.gz, DIR/vectors.gz
    python -m icicle.lab.million recall --es http://127.0.0.1:9200 --index NAME --vectors DIR/vectors.gz \
        --corpus DIR/corpus.jsonl.gz --queries q.npy --k 10 --num-candidates 100,200

`recall` compares the node's kNN top k with the exact top k computed here over the same vectors (float16 as
stored in the file, which is what the node indexed). The node's own options apply (bbq_hnsw rescores its
oversampled candidates with the float vectors by default).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import struct
import sys
import time
import urllib.request

import numpy as np

HEADER_KEY = 'sha256(title + "\\n" + text)[:8]'
WORD = re.compile(r"[A-Za-z][A-Za-z'-]+|\d+")


def key(title: str, text: str) -> bytes:
    return hashlib.sha256((title + "\n" + text).encode()).digest()[:8]


def read_vectors(path: str) -> tuple[dict, dict[bytes, np.ndarray]]:
    with gzip.open(path, "rb") as f:
        header = json.loads(f.readline())
        dims = header["dims"]
        rec = 8 + 2 * dims
        raw = f.read()
    n = header["count"]
    if len(raw) != n * rec:
        raise SystemExit(f"{path}: {len(raw)} bytes of records, want {n} x {rec}")
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(n, rec)
    vecs = arr[:, 8:].copy().view("<f2").astype(np.float32)
    return header, {bytes(arr[i, :8]): vecs[i] for i in range(n)}


def read_corpus(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def make(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    nq = read_corpus(f"{args.nq}/corpus.jsonl.gz")
    _, nq_vecs = read_vectors(f"{args.nq}/vectors.bge-small-en-v1.5-q.gz")
    wiki = [d for d in read_corpus(args.wiki) if not d.get("in_nq_qed")]
    wiki_header, wiki_vecs = read_vectors(args.wiki_vectors)
    real, vecs = [], []
    for d in nq + wiki:
        v = nq_vecs.get(key(d["title"], d["text"]))
        if v is None:
            v = wiki_vecs.get(key(d["title"], d["text"]))
        if v is None:
            raise SystemExit(f"no vector for {d['docid']!r}")
        real.append({"docid": d["docid"], "title": d["title"], "text": d["text"]})
        vecs.append(v)
    base = np.stack(vecs)
    print(f"real documents: {len(real)} (nq_qed {len(nq)}, wiki_intro_pool {len(wiki)})", file=sys.stderr)

    counts: dict[str, int] = {}
    lengths = []
    for d in real:
        words = WORD.findall(d["text"])
        lengths.append(len(words))
        for w in words:
            w = w.lower()
            counts[w] = counts.get(w, 0) + 1
    vocab = np.array(list(counts))
    p = np.array([counts[w] for w in vocab], dtype=np.float64)
    p /= p.sum()
    lengths = np.array(lengths)
    n_syn = args.total - len(real)
    if n_syn < 0:
        raise SystemExit(f"--total {args.total} is below the {len(real)} real documents")

    out_corpus = f"{args.out}/corpus.jsonl.gz"
    out_vecs = f"{args.out}/vectors.gz"
    header = {"format": "icicle-vectors/1", "encoder": wiki_header["encoder"], "dims": base.shape[1],
              "count": args.total, "dtype": "float16", "key": HEADER_KEY}
    began = time.time()
    with gzip.open(out_corpus, "wt", compresslevel=1) as fc, gzip.open(out_vecs, "wb", compresslevel=1) as fv:
        fv.write((json.dumps(header, separators=(",", ":")) + "\n").encode())

        def put(d: dict, v: np.ndarray) -> None:
            fc.write(json.dumps(d, ensure_ascii=False) + "\n")
            fv.write(key(d["title"], d["text"]) + v.astype("<f2").tobytes())

        for d, v in zip(real, base):
            put(d, v)
        chunk = 10_000
        for start in range(0, n_syn, chunk):
            m = min(chunk, n_syn - start)
            idx = rng.integers(0, len(base), size=(m, 3))
            w = rng.dirichlet([1.0, 1.0, 1.0], size=m)
            v = np.einsum("mk,mkd->md", w, base[idx])
            v += rng.normal(0.0, args.noise / np.sqrt(base.shape[1]), size=v.shape)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            lens = rng.choice(lengths, size=m)
            words = rng.choice(vocab, size=int(lens.sum()) + 5 * m, p=p)
            pos = 0
            for i in range(m):
                nt = int(rng.integers(2, 6))
                title = " ".join(words[pos:pos + nt]).capitalize()
                pos += nt
                text = " ".join(words[pos:pos + lens[i]])
                pos += lens[i]
                put({"docid": f"syn-{start + i:07d}", "title": title, "text": text}, v[i])
            if (start // chunk) % 10 == 0:
                print(f"  {start + m} synthetic, {time.time() - began:.0f} s", file=sys.stderr)
    print(f"wrote {out_corpus} and {out_vecs}: {args.total} documents ({n_syn} synthetic) in "
          f"{time.time() - began:.0f} s", file=sys.stderr)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def recall(args: argparse.Namespace) -> None:
    """The node's kNN top k against the exact top k over the file's vectors, for each query vector."""
    header, by_key = read_vectors(args.vectors)
    docids, mat = [], []
    for d in read_corpus(args.corpus):
        docids.append(d["docid"])
        mat.append(by_key[key(d["title"], d["text"])])
    mat = np.stack(mat)
    del by_key
    queries = np.load(args.queries)
    exact = [{docids[i] for i in np.argsort(-(mat @ q))[: args.k]} for q in queries]
    for nc in map(int, args.num_candidates.split(",")):
        rec, took = [], []
        for q, want in zip(queries, exact):
            knn = {"field": args.field, "query_vector": q.tolist(), "k": args.k, "num_candidates": nc}
            res = post(f"{args.es}/{args.index}/_search", {"size": args.k, "knn": knn, "_source": False,
                                                            "docvalue_fields": ["docid"]})
            got = {h["fields"]["docid"][0] for h in res["hits"]["hits"]}
            rec.append(len(got & want) / args.k)
            took.append(res["took"])
        rec_a, took_a = np.array(rec), np.array(took)
        print(json.dumps({"index": args.index, "queries": len(rec), "k": args.k, "num_candidates": nc,
                          "recall_mean": round(float(rec_a.mean()), 4), "recall_min": float(rec_a.min()),
                          "took_ms_p50": float(np.median(took_a)), "took_ms_p99": float(np.percentile(took_a, 99))}),
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--nq", required=True)
    m.add_argument("--wiki", required=True)
    m.add_argument("--wiki-vectors", required=True)
    m.add_argument("--total", type=int, default=1_000_000)
    m.add_argument("--noise", type=float, default=0.3, help="norm of the Gaussian noise added to a mixture")
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--out", required=True)
    r = sub.add_parser("recall")
    r.add_argument("--es", required=True)
    r.add_argument("--index", required=True)
    r.add_argument("--field", default="vector")
    r.add_argument("--vectors", required=True)
    r.add_argument("--corpus", required=True)
    r.add_argument("--queries", required=True, help=".npy of query vectors, one per row")
    r.add_argument("--k", type=int, default=10)
    r.add_argument("--num-candidates", default="100", help="comma-separated: one line of output each")
    args = ap.parse_args()
    {"make": make, "recall": recall}[args.cmd](args)


if __name__ == "__main__":
    main()
