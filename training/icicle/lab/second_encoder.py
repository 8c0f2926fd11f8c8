"""Does a second dense encoder (e5-small-v2-q) beside bge-small-q raise the first stage's Hits@1 under a fixed
fusion rule, with no labels to fit it on (docs/research/2026-12-second-encoder.md)?

Every vector comes from the sidecar's own Go encoder path (`icicle vectors`); BM25's lists from a scratch node
with the sidecar's query; the rules are replayed here, exactly as retrieve/fuse.go fuses (exact cosines over
every document stand in for the node's kNN and cosine look-ups).

    # encoders, a scratch node, one index a set (bge vectors shipped in data/SET)
    scripts/encoder.sh training/icicle/lab/e5-small-v2-q && eval "$(scripts/env.sh)"
    ICICLE_ES_PORT=9263 ICICLE_RUN_DIR=/tmp/es9263 scripts/es.sh start
    ICICLE_ELASTICSEARCH_ADDRESSES=http://127.0.0.1:9263 ICICLE_ELASTICSEARCH_INDEX=probe-SET \\
        bin/icicle ingest -corpus data/SET/corpus.jsonl.gz -vectors data/SET/vectors.bge-small-en-v1.5-q.gz
    # e5 document vectors (/tmp/e5/e5.yaml: first_stage: {encoder_dir: training/icicle/lab/e5-small-v2-q})
    bin/icicle vectors -corpus data/SET/corpus.jsonl.gz -out /tmp/e5/SET.docs.gz -config /tmp/e5/e5.yaml
    # query vectors by the same Go path (`queries` below), for ENC/ENCDIR (from the repository root)
    # bge/models/bge-small-en-v15-q and e5/training/icicle/lab/e5-small-v2-q
    # (/tmp/e5/q-ENC.yaml: first_stage: {encoder_dir: /tmp/e5/query-ENC})
    cd training && python -m icicle.lab.second_encoder queries --data ../data/SET --split S \\
        --encoder ../ENCDIR --out /tmp/e5/SET.q-ENC.jsonl --manifest-dir /tmp/e5/query-ENC
    cd .. && bin/icicle vectors -corpus /tmp/e5/SET.q-ENC.jsonl -out /tmp/e5/SET.q-ENC.gz -config /tmp/e5/q-ENC.yaml
    # BM25's top 100, then the rules
    cd training && python -m icicle.lab.second_encoder bm25 --data ../data/SET --split S \\
        --es http://127.0.0.1:9263 --index probe-SET --out /tmp/e5/SET.bm25.json
    python -m icicle.lab.second_encoder replay --data ../data/SET --split S --work /tmp/e5

SET is nq_qed (S dev: the queries file's NQ dev split), cranfield or cacm (S '': every judged query).

`queries` writes the labelled queries as a corpus that `icicle vectors` embeds: `icicle vectors` embeds a
document as passage_prefix + title + "\\n" + text and refuses an empty title, so the query prefix (less its
trailing space) is the title and the query the text, under a copy of the manifest with passage_prefix "" (written
to --manifest-dir, beside links to the graph and tokenizer). Both tokenizers' BertNormalizer turns the newline
into a space, so the word pieces are those of query_prefix + query, what `dense.Encoder.Query` embeds.

`replay` scores, per set, Hits@1 and MRR@10 of: BM25 alone; each encoder's cosine over every document; the
sidecar's default linear fusion (dense weight 0.8: 0.8 x min-max(cosine) + 0.2 x BM25/max BM25 over BM25's top 100
and the kNN's top 10); linear 0.5 with the kNN's top 100; weighted RRF k 60 (kNN's top 100, the dense rank taken
among the candidates, as Fuse does); and their three-way forms: linear with the mean of the two cosines as the
dense score over BM25's top 100 and both encoders' kNN, and RRF over the three lists. Each rule's line also counts
the queries whose first result it makes relevant (+) and not relevant (-) against the default.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import urllib.parse
import urllib.request

import numpy as np

from .million import key, read_vectors
from .querylikelihood import judged

BGE_VECTORS = "vectors.bge-small-en-v1.5-q.gz"
ENCODERS = ("bge", "e5")


def labelled(data: str, split: str) -> list[tuple[str, str, set[str]]]:
    """The judged queries of split ('' every one) as (qid, text, relevant docids), in file order, as
    internal/dataset.ReadLabelled reads them (relevance 0 is not relevant)."""
    rel = judged(data)
    out = []
    with gzip.open(os.path.join(data, "queries.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            if split and q.get("split") != split or not rel.get(q["qid"]) or not q["query"].strip():
                continue
            out.append((q["qid"], q["query"], set(rel[q["qid"]])))
    return out


def unit_vectors(path: str) -> tuple[str, dict[bytes, np.ndarray]]:
    """A vector file's encoder and each key's vector, scaled to unit length as the sidecar does with file vectors."""
    head, vecs = read_vectors(path)
    return head["encoder"], {k: v / max(float(np.linalg.norm(v)), 1e-12) for k, v in vecs.items()}


def queries_cmd(a: argparse.Namespace) -> None:
    with open(os.path.join(a.encoder, "encoder.json"), encoding="utf-8") as f:
        man = json.load(f)
    prefix = man["query_prefix"]
    if not prefix.endswith(" ") or prefix.endswith("  ") or not prefix.strip():
        raise SystemExit(f"query_prefix {prefix!r}: want words and one trailing space (it becomes the title)")
    os.makedirs(a.manifest_dir, exist_ok=True)
    for name in (man["onnx"], man["tokenizer"]):
        link = os.path.join(a.manifest_dir, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(a.encoder, name)), link)
    with open(os.path.join(a.manifest_dir, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump({**man, "passage_prefix": ""}, f, indent=2)
    qs = labelled(a.data, a.split)
    with open(a.out, "w", encoding="utf-8") as f:
        for qid, text, _ in qs:
            f.write(json.dumps({"docid": qid, "title": prefix.rstrip(" "), "text": text}) + "\n")
    print(f"{a.out}: {len(qs)} queries, title {prefix.rstrip(' ')!r}; manifest {a.manifest_dir}")


def preference(query: str) -> str:
    """The search's preference string (adapter's preference: FNV-1a 64 of the query, base 36)."""
    h = 0xCBF29CE484222325
    for b in query.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    digits, s = "0123456789abcdefghijklmnopqrstuvwxyz", ""
    while True:
        h, r = divmod(h, 36)
        s = digits[r] + s
        if h == 0:
            return "icicle-" + s


def bm25_cmd(a: argparse.Namespace) -> None:
    out = {}
    for qid, text, _ in labelled(a.data, a.split):
        # adapter.searchBody and SearchLean: the sidecar's one BM25 query.
        match = {"query": text, "type": "best_fields", "fields": a.fields, "tie_breaker": 0.5}
        body = {"size": a.depth, "_source": False, "docvalue_fields": ["docid"], "track_total_hits": False,
                "query": {"multi_match": match}}
        url = f"{a.es}/{a.index}/_search?" + urllib.parse.urlencode({"preference": preference(text)})
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            hits = json.load(r)["hits"]["hits"]
        out[qid] = [[h["fields"]["docid"][0], h["_score"]] for h in hits]
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"{a.out}: BM25's top {a.depth} of {len(out)} queries over {', '.join(a.fields)} in {a.index}")


def fuse(bm25: list, lists: list[list[int]], dense: list[np.ndarray], method: str, weights: list[float],
         rrf_k: float, docids: list[str], index: dict[str, int]) -> list[int]:
    """retrieve.Fuse generalised to several dense sides: the candidates are BM25's hits, then each kNN list's new
    documents; linear is weights[0] x BM25/max BM25 + weights[1] x min-max over the candidates of the mean of
    the cosines; rrf is weights[0] / (k + BM25 rank) + sum of weights[1+i] / (k + rank among the candidates by
    cosine i). Ties go to the better BM25 rank, then the docid. Returns document indices, best first."""
    cand = [index[d] for d, _ in bm25]
    brank = {c: r + 1 for r, c in enumerate(cand)}
    bscore = {index[d]: s for d, s in bm25}
    seen = set(cand)
    for lst in lists:
        for x in lst:
            if x not in seen:
                seen.add(x)
                cand.append(x)
    c = np.array(cand)
    score = np.zeros(len(cand))
    if method == "linear":
        d = np.mean([v[c] for v in dense], axis=0).astype(np.float64)
        lo, hi = d.min(), d.max()
        score += weights[1] * ((d - lo) / (hi - lo) if hi > lo else 1.0)
        b_hi = max(bscore.values(), default=0.0)
        if b_hi > 0:
            score += np.array([weights[0] * bscore[x] / b_hi if x in brank else 0.0 for x in cand])
    else:
        score += np.array([weights[0] / (rrf_k + brank[x]) if x in brank else 0.0 for x in cand])
        for w, v in zip(weights[1:], dense):
            vals = v[c].astype(np.float64)
            order = sorted(range(len(cand)), key=lambda i: -vals[i])  # stable, as Fuse's SortStableFunc
            for r, i in enumerate(order):
                score[i] += w / (rrf_k + r + 1)
    big = len(cand) + 1
    ranked = sorted(range(len(cand)), key=lambda i: (-score[i], brank.get(cand[i], big), docids[cand[i]]))
    return [cand[i] for i in ranked]


def first_relevant(ranked: list[int], docids: list[str], rel: set[str]) -> int | None:
    """The place (0-based) of the first relevant document in ranked's top 10, or None."""
    return next((r for r, i in enumerate(ranked[:10]) if docids[i] in rel), None)


DEFAULT_RULE = "bge: linear 0.8, kNN 10 (the default)"
# name -> (method, dense sides, weights (BM25 first; 1 - w as Fuse computes it), kNN depth); "cosine" ranks every
# document by the mean of the sides' cosines.
RULES = {
    DEFAULT_RULE: ("linear", ("bge",), (1 - 0.8, 0.8), 10),
    "BM25 alone": ("bm25", (), (), 0),
    "bge cosine alone": ("cosine", ("bge",), (), 0),
    "e5 cosine alone": ("cosine", ("e5",), (), 0),
    "mean of both cosines alone": ("cosine", ("bge", "e5"), (), 0),
    "bge: linear 0.5, kNN 100": ("linear", ("bge",), (1 - 0.5, 0.5), 100),
    "bge: RRF k 60, w 0.5, kNN 100": ("rrf", ("bge",), (0.5, 0.5), 100),
    "e5: linear 0.8, kNN 10": ("linear", ("e5",), (1 - 0.8, 0.8), 10),
    "e5: linear 0.5, kNN 100": ("linear", ("e5",), (0.5, 0.5), 100),
    "e5: RRF k 60, w 0.5, kNN 100": ("rrf", ("e5",), (0.5, 0.5), 100),
    "both: linear 0.8 on the mean cosine, kNN 10 each": ("linear", ("bge", "e5"), (1 - 0.8, 0.8), 10),
    "both: linear 0.5 on the mean cosine, kNN 100 each": ("linear", ("bge", "e5"), (0.5, 0.5), 100),
    "both: RRF k 60, thirds, kNN 100 each": ("rrf", ("bge", "e5"), (1 / 3, 1 / 3, 1 / 3), 100),
    "both: RRF k 60, BM25 0.5, 0.25 each, kNN 100 each": ("rrf", ("bge", "e5"), (0.5, 0.25, 0.25), 100),
}


def replay_cmd(a: argparse.Namespace) -> None:
    name = os.path.basename(os.path.normpath(a.data))
    docs = []
    with gzip.open(os.path.join(a.data, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            docs.append((r.get("docid") or r["_id"], r["title"], r["text"]))
    docids = [d for d, _, _ in docs]
    index = {d: i for i, d in enumerate(docids)}
    files = {"bge": (os.path.join(a.data, BGE_VECTORS), os.path.join(a.work, f"{name}.q-bge.gz")),
             "e5": (os.path.join(a.work, f"{name}.docs.gz"), os.path.join(a.work, f"{name}.q-e5.gz"))}
    with open(os.path.join(a.work, f"{name}.bm25.json"), encoding="utf-8") as f:
        bm25 = json.load(f)
    qs = labelled(a.data, a.split)
    cos: dict[str, np.ndarray] = {}
    for enc in ENCODERS:
        doc_file, q_file = files[enc]
        d_name, dv = unit_vectors(doc_file)
        q_name, qv = unit_vectors(q_file)
        if d_name != q_name:
            raise SystemExit(f"{doc_file} is by {d_name}, {q_file} by {q_name}")
        with open(os.path.join(a.work, f"query-{enc}", "encoder.json"), encoding="utf-8") as f:
            title = json.load(f)["query_prefix"].rstrip(" ")
        dm = np.stack([dv[key(t, x)] for _, t, x in docs])
        qm = np.stack([qv[key(title, text)] for _, text, _ in qs])
        cos[enc] = qm @ dm.T  # queries x documents, exact cosines
    results, firsts = {}, {}
    for rule, (method, sides, weights, knn) in RULES.items():
        hits1 = mrr = 0.0
        first = np.zeros(len(qs), dtype=bool)
        for j, (qid, _, rel) in enumerate(qs):
            dense = [cos[s][j] for s in sides]
            if method == "bm25":
                ranked = [index[d] for d, _ in bm25[qid]]
            elif method == "cosine":
                ranked = list(np.argsort(-np.mean(dense, axis=0), kind="stable")[:10])
            else:
                lists = [list(np.argsort(-v, kind="stable")[:knn]) for v in dense]
                ranked = fuse(bm25[qid], lists, dense, method, list(weights), 60.0, docids, index)
            if (r := first_relevant(ranked, docids, rel)) is not None:
                hits1 += r == 0
                first[j] = r == 0
                mrr += 1 / (r + 1)
        firsts[rule] = first
        base = firsts[DEFAULT_RULE]  # RULES starts with the default
        won, lost = int((first & ~base).sum()), int((~first & base).sum())
        results[rule] = {"hits_at_1": hits1 / len(qs), "mrr_at_10": mrr / len(qs), "won": won, "lost": lost}
        print(f"{name} ({len(qs)}) | {rule.replace('e5', a.second)} | {hits1 / len(qs):.3f} ({mrr / len(qs):.3f})"
              f" | top 1 against the default: +{won} -{lost}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"set": name, "queries": len(qs), "rules": results}, f, indent=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for cmd in ("queries", "bm25", "replay"):
        s = sub.add_parser(cmd)
        s.add_argument("--data", required=True,
                       help="a BEIR set directory: corpus.jsonl.gz, queries.jsonl.gz, qrels.tsv")
        s.add_argument("--split", default="", help="the queries' split ('' every judged query)")
        if cmd == "queries":
            s.add_argument("--encoder", required=True, help="the encoder directory whose query_prefix to use")
            s.add_argument("--manifest-dir", required=True, help="where the manifest copy with passage_prefix '' goes")
            s.add_argument("--out", required=True, help="the query corpus (JSONL) for `icicle vectors`")
        elif cmd == "bm25":
            s.add_argument("--es", required=True, help="the node's URL")
            s.add_argument("--index", required=True)
            s.add_argument("--fields", nargs="+", default=["title", "text"], help="fields.search [title text]")
            s.add_argument("--depth", type=int, default=100)
            s.add_argument("--out", required=True, help="JSON: qid -> [[docid, score], ...]")
        else:
            s.add_argument("--work", required=True,
                           help="holds SET.docs.gz, SET.q-{bge,e5}.gz, SET.bm25.json, query-{bge,e5}/")
            s.add_argument("--json", help="also write the scores here")
            s.add_argument("--second", default="e5",
                           help="the second encoder's name in the printed rules; its files keep e5's names "
                                "(SET.docs.gz, SET.q-e5.gz, query-e5/), so another encoder (bge's fp32 graph) can "
                                "stand in its place")
    a = p.parse_args()
    {"queries": queries_cmd, "bm25": bm25_cmd, "replay": replay_cmd}[a.cmd](a)


if __name__ == "__main__":
    main()
