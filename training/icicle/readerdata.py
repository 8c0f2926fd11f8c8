"""The reader's training set (issue 24): questions over every Wikipedia document the project ships, each with the
candidate list the first stage would serve and the dense encoder's scores over it (the teacher).

    python -m icicle.readerdata build --out DIR [--limit-docs N] [--threads 2]
    python -m icicle.readerdata seen-heldout --set DIR/readerset.json.gz --out MODEL_DIR/seen_heldout_queries.jsonl
    python -m icicle.readerdata snippets --set DIR/readerset.json.gz --out OUT/readerset.json.gz --es URL [--chars 150]

Writes DIR/readerset.json.gz (and caches the encoder's vectors under DIR/cache); `icicle.reader` trains on it,
and the GPU queue carries it (training/gpu). Documents: nq_qed's D_train and `data/wiki_intro_pool` (27,638 titles
that are not nq_qed's); D_new never enters (those documents are the sidecar's new ones, measured through it).

What it holds, per question: the text, the gold, its kind and part, and the first stage's top LIST_DEPTH (`--depth`)
over the question's pool in its fused order, with the dense cosines (the teacher) and the fused scores:
- kind "nq": NQ train questions of D_train documents (the 6,510 of data.make_split, less the held-out ones);
- kind "syn": one synthetic question per document, a span of one of its first three sentences (5-16 words, about
  one word in five dropped), kept only when the dense encoder ranks its document first or second within the list
  (a question that the encoder cannot tie to its document is ambiguous or empty);
- kind "seen": NQ train questions of the demo's 1,000 seen documents (models/reader135/seen_docids.txt); their
  list is the pool's top without the gold, as the sidecar serves a seen-document query (new documents only), so
  the answer comes from memory (the parametric route);
- part "heldout": NQ train questions of 5% of the other D_train documents (sha1(docid) % 20 == 1), with lists over
  every D_train document that is not seen (the held-out ones and the rest), the way the sidecar lists every
  document that is not seen as new (the demo's 6,248); no held-out document appears in any training list.
  (Format 1 listed the 258 held-out documents alone: the list's own first was right on 0.99 of these questions,
  against 0.92 over the 5,563 unseen D_train documents and the sidecar's 0.91 on its held-out queries, so the
  reader's evaluation promised more than the sidecar gave.)
- part "seen_heldout": 100 of the seen questions whose document has another question, kept out of training: the
  parametric route's test on questions it never saw.
`snippets` adds, per question, each listed document's query snippet (q["snip"], parallel to q["list"]) as the
sidecar's `experimental.snippet_chars` reads it: the same Elasticsearch highlight request as adapter.Snippets, against a
scratch index of the set's documents on the node at URL, so that a reader trained with `--snippets` reads what it
will be served (a document with no fragment keeps its summary, as there).
The first stage is data/nq_qed/first_stage.json's fusion (`fuse`, the sidecar's retrieve.Fuse: linear, w x
minmax(cosine) + (1 - w) x BM25 / max BM25 over BM25's top 100 and the kNN top 10), with bm25s standing in for
Elasticsearch's BM25 (contexts.py) and the int8 bge-small encoder the sidecar embeds with (passages cut at 256 tokens here, 512 in the sidecar: the cost).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import time

from typing import Mapping, Sequence

import numpy as np

from .data import DEFAULT_DATA_DIR, Doc, load_beir, make_split

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
WIKI = os.path.join(REPO, "data", "wiki_intro_pool", "corpus.jsonl.gz")
SEEN = os.path.join(REPO, "models", "reader135", "seen_docids.txt")
ENCODER = os.path.join(REPO, "models", "bge-small-en-v15-q")
FIRST_STAGE = os.path.join(REPO, "data", "nq_qed", "first_stage.json")
LIST_DEPTH = 20
PASSAGE_TOKENS = 256
SUMMARY_WORDS = 40  # the summary stored per document: more than the 24 tokens a reader135 prompt shows
FORMAT = 2  # 2: held-out lists over every unseen D_train document (module doc)

_SENT = re.compile(r"(?<=[.!?])\s+")


def span_with_drops(w: list[str], lo: int, hi: int, rng: random.Random) -> str | None:
    """lo to hi consecutive words of w (fewer if w is shorter), with about one word in five dropped; None when
    fewer than 3 words are left."""
    k = rng.randint(lo, min(hi, len(w)))
    start = rng.randint(0, len(w) - k)
    span = [x for x in w[start: start + k] if rng.random() > 0.2]
    return " ".join(span) if len(span) >= 3 else None


def synthetic_query(text: str, rng: random.Random) -> str | None:
    """A question-like span of a document: one of its first three sentences, 5-16 words of it, about one word in
    five dropped; None when the text has no sentence of 5 words or more."""
    sents = [s for s in _SENT.split(text)[:3] if len(s.split()) >= 5]
    if not sents:
        return None
    return span_with_drops(rng.choice(sents).split(), 5, 16, rng)


def _h(s: str) -> int:
    return int(hashlib.sha1(s.encode("utf-8")).hexdigest()[:8], 16)


def load_docs(limit: int = 0) -> tuple[dict[str, Doc], list[str], list[str], list[str], object]:
    """(docs, training pool, held-out pool, seen docids, split): D_train less the held-out documents plus the
    wiki pool; the held-out documents (D_train, sha1 % 20 == 1, not seen, with NQ train questions)."""
    split = make_split()
    docs = {d: split.docs[d] for d in split.d_train}
    with open(SEEN, encoding="utf-8") as f:
        seen = [ln.rstrip("\n") for ln in f if ln.strip()]
    s_seen = set(seen)
    with_q = {q.docid for q in split.train}
    heldout = sorted(d for d in split.d_train if d in with_q and d not in s_seen and _h(d) % 20 == 1)
    h = set(heldout)
    wiki = []
    with gzip.open(WIKI, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["docid"] not in split.docs and not r.get("in_nq_qed"):
                docs[r["docid"]] = Doc(r["docid"], r["title"], r["text"])
                wiki.append(r["docid"])
    train_pool = [d for d in split.d_train if d not in h] + wiki
    if limit:
        # a small set for tests and the GPU queue's dry run: a quarter seen documents, the documents of the first
        # limit / 2 NQ train questions, the rest sampled
        rng = random.Random(0)
        seen = seen[: max(10, limit // 4)]
        keep = set(seen) | {q.docid for q in split.train[: limit // 2]}
        rest = [d for d in train_pool if d not in keep]
        train_pool = sorted(keep & set(train_pool)) + rng.sample(rest, max(0, min(len(rest), limit - len(keep))))
        heldout = heldout[: max(20, limit // 20)]
    return docs, train_pool, heldout, seen, split


class Embedder:
    """The sidecar's dense encoder (icicle.encoder), vectors cached per (encoder, text) list in a .npy file."""

    def __init__(self, cache: str, threads: int, log=print) -> None:
        from .encoder import load

        self.man, self.tok, self.sess = load(ENCODER, threads)
        self.cache, self.log = cache, log
        os.makedirs(cache, exist_ok=True)

    def vectors(self, texts: list[str], prefix: str, max_tokens: int, what: str) -> np.ndarray:
        from .encoder import embed

        key = hashlib.sha256((self.man["name"] + prefix + str(max_tokens) + "\x00".join(texts)).encode()).hexdigest()[:16]
        path = os.path.join(self.cache, f"{what}-{key}.npy")
        if os.path.exists(path):
            return np.load(path)
        self.tok.enable_truncation(max_tokens)
        # longest first, in chunks: padding stays small and progress shows
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.man["dims"]), np.float32)
        t0, step = time.time(), 512
        for s in range(0, len(order), step):
            idx = order[s: s + step]
            out[idx] = embed(self.man, self.tok, self.sess, [prefix + texts[i] for i in idx], batch=16)
            self.log(f"embed {what}: {min(s + step, len(order))}/{len(order)} ({time.time() - t0:.0f}s)")
        np.save(path, out)
        return out


def fuse(bm25: Sequence[tuple[str, float]], knn: Sequence[str], dense: Mapping[str, float],
         params: Mapping) -> list[tuple[str, float]]:
    """The sidecar's fusion (retrieve.Fuse) of one query's lists: bm25 the BM25 hits (docid, score) best first, knn
    the kNN's docids nearest first, dense the cosine of each document that has a vector. The union (a document in
    both keeps its BM25 rank) ranked by params["method"] as (docid, fused score), best first: "linear" is w x
    minmax(cosine) + (1 - w) x BM25 / max BM25 (w = dense_weight; no cosine, no dense term; a kNN document, no BM25
    term), "rrf" w / (rrf_k + rank by cosine) + (1 - w) / (rrf_k + BM25 rank), "bm25" the BM25 list itself. With
    params["dense_weight_spread"] s, w is dense_weight + s x the spread (the union's highest cosine less its tenth,
    or its lowest where fewer have one), clamped to 0..1. Ties go to the better BM25 rank, then the docid. Same
    arithmetic in float64 as Go's, so the same rankings and scores (tests/test_fusion.py, against
    retrieve/testdata/fusion_golden.json)."""
    method, w = params["method"], params["dense_weight"]
    if method == "bm25":
        return [(d, float(x)) for d, x in bm25]
    if method not in ("linear", "rrf"):
        raise ValueError(f"first stage method {method!r}: want linear, rrf or bm25")
    rank: dict[str, tuple[float, int]] = {}  # docid -> (BM25 score, BM25 rank)
    union: list[str] = []
    for r, (d, x) in enumerate(bm25, 1):
        if d not in rank:
            rank[d] = (float(x), r)
            union.append(d)
    union += [d for d in dict.fromkeys(knn) if d not in rank]
    slope = params.get("dense_weight_spread", 0.0)
    if slope:
        top = sorted((dense[d] for d in union if d in dense), reverse=True)
        spread = top[0] - top[min(10, len(top)) - 1] if len(top) >= 2 else 0.0
        w = min(1.0, max(0.0, w + slope * spread))
    score = dict.fromkeys(union, 0.0)
    if method == "linear":
        cos = [dense[d] for d in union if d in dense]
        lo, hi = (min(cos), max(cos)) if cos else (0.0, 0.0)
        b_hi = max((x for x, _ in rank.values()), default=0.0)
        for d in union:
            if d in rank and b_hi > 0:
                score[d] = (1 - w) * rank[d][0] / b_hi
            if d in dense:
                score[d] += w * ((dense[d] - lo) / (hi - lo) if hi > lo else 1.0)
    else:
        k = params["rrf_k"]
        for d in union:
            if d in rank:
                score[d] = (1 - w) / (k + rank[d][1])
        by_dense = sorted(union, key=lambda d: -dense.get(d, 0.0))  # stable: a document without one ranks at 0
        for r, d in enumerate(by_dense, 1):
            if d in dense:
                score[d] += w / (k + r)
    last = len(union) + 1
    union.sort(key=lambda d: (-score[d], rank[d][1] if d in rank else last, d))
    return [(d, score[d]) for d in union]


class FirstStage:
    """The sidecar's first stage over one pool: BM25 top `depth` (bm25s) and the kNN top `knn` by cosine, fused."""

    def __init__(self, docs: dict[str, Doc], pool: list[str], vecs: np.ndarray, params: dict) -> None:
        from .evaluate import BM25Index

        self.pool, self.vecs, self.params = pool, vecs, params
        self.index = BM25Index(docs, pool=pool)
        self.row = {d: i for i, d in enumerate(self.index.docids)}
        self.pool_row = np.array([self.row[d] for d in pool])  # pool order -> BM25 index order
        self.depth, self.knn = params["depth"], params["knn"]
        fuse([], [], {}, params)  # an unknown method fails here, before any list is built

    def lists(self, queries: list[str], qvecs: np.ndarray, k: int) -> list[tuple[list[int], list[float], list[float]]]:
        """Per query: the top k as indices into the pool, their cosines and their fused scores, best first."""
        import bm25s

        vocab = self.index.r.vocab_dict
        toks = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
        toks = [[w for w in t if w and w in vocab] for t in toks]  # words the pool never has score nothing
        has = [i for i, t in enumerate(toks) if t]
        depth = min(self.depth, len(self.pool))
        ids = [np.zeros(0, np.int64)] * len(queries)
        scores = [np.zeros(0, np.float32)] * len(queries)
        if has:
            got_ids, got_scores = self.index.r.retrieve([toks[i] for i in has], k=depth, show_progress=False, n_threads=1)
            for r, i in enumerate(has):
                ids[i], scores[i] = got_ids[r], got_scores[r]
        inv = np.empty(len(self.pool), np.int64)
        inv[self.pool_row] = np.arange(len(self.pool))
        out = []
        for s in range(0, len(queries), 1024):
            cos = qvecs[s: s + 1024] @ self.vecs.T  # pool order
            for j in range(cos.shape[0]):
                c = cos[j]
                # BM25's hits best first (Elasticsearch returns only documents that match: score > 0)
                bm = [(int(inv[i]), float(x)) for i, x in zip(ids[s + j], scores[s + j]) if x > 0]
                knn = np.argpartition(-c, min(self.knn, len(c) - 1))[: self.knn]
                knn = [int(i) for i in knn[np.argsort(-c[knn], kind="stable")]]  # nearest first
                top = fuse([(self.pool[i], x) for i, x in bm], [self.pool[i] for i in knn],
                           {self.pool[i]: float(c[i]) for i in {i for i, _ in bm} | set(knn)}, self.params)[:k]
                at = {self.pool[i]: i for i, _ in bm} | {self.pool[i]: i for i in knn}
                out.append(([at[d] for d, _ in top], [round(float(c[at[d]]), 4) for d, _ in top],
                            [round(x, 4) for _, x in top]))
        return out


def build(out_dir: str, limit_docs: int = 0, threads: int = 2, seed: int = 0, log=print, depth: int = LIST_DEPTH,
          cache: str = "") -> dict:
    """cache: the encoder's vectors' folder (default OUT/cache); another set's folder reuses its vectors, which are
    the same for the same documents and questions at any depth."""
    t0 = time.time()
    docs, pool, heldout, seen, split = load_docs(limit_docs)
    with open(FIRST_STAGE) as f:
        params = json.load(f)
    emb = Embedder(cache or os.path.join(out_dir, "cache"), threads, log)
    man = emb.man
    passage = lambda d: f"{docs[d].title}\n{docs[d].text}"
    pvec = emb.vectors([passage(d) for d in pool], man["passage_prefix"], PASSAGE_TOKENS, "pool")
    hvec = emb.vectors([passage(d) for d in heldout], man["passage_prefix"], PASSAGE_TOKENS, "heldout")
    s_seen, s_held, s_pool = set(seen), set(heldout), set(pool)
    fs_train = FirstStage(docs, pool, pvec, params)
    # the held-out questions are listed over every unseen D_train document, as the sidecar lists every unseen one
    row = {d: pvec[i] for i, d in enumerate(pool)} | {d: hvec[i] for i, d in enumerate(heldout)}
    d_train = set(split.d_train)
    listed = sorted(d for d in row if d in d_train and d not in s_seen)
    fs_held = FirstStage(docs, listed, np.stack([row[d] for d in listed]), params)

    rng = random.Random(seed)
    qs: list[dict] = []
    by_doc: dict[str, int] = {}
    for q in split.train:
        by_doc[q.docid] = by_doc.get(q.docid, 0) + 1
    seen_q = [q for q in split.train if q.docid in s_seen]
    seen_out = set(q.qid for q in rng.sample([q for q in seen_q if by_doc[q.docid] > 1],
                                            min(100, sum(by_doc[q.docid] > 1 for q in seen_q))))
    for q in split.train:
        if q.docid in s_held:
            qs.append({"q": q.query, "gold": q.docid, "kind": "nq", "part": "heldout"})
        elif q.docid in s_seen:
            qs.append({"q": q.query, "gold": q.docid, "kind": "seen",
                       "part": "seen_heldout" if q.qid in seen_out else "train"})
        elif q.docid in s_pool:
            qs.append({"q": q.query, "gold": q.docid, "kind": "nq", "part": "train"})
    n_syn = 0
    for d in pool:
        if d in s_seen:
            continue
        s = synthetic_query(docs[d].text, rng)
        if s:
            qs.append({"q": s, "gold": d, "kind": "syn", "part": "train"})
            n_syn += 1
    qvec = emb.vectors([q["q"] for q in qs], man["query_prefix"], 64, "questions")
    for part, fs, members in (("train", fs_train, pool), ("heldout", fs_held, listed)):
        idx = [i for i, q in enumerate(qs) if (q["part"] == "heldout") == (part == "heldout")]
        t1 = time.time()
        lists = fs.lists([qs[i]["q"] for i in idx], qvec[idx], depth + 1)
        log(f"first stage over {part} ({len(members)} documents): {len(idx)} lists in {time.time() - t1:.0f}s")
        for i, (li, cos, fused) in zip(idx, lists):
            q = qs[i]
            names = [members[j] for j in li]
            if q["kind"] == "seen":
                keep = [r for r, d in enumerate(names) if d != q["gold"]][:depth]
            else:
                keep = list(range(min(depth, len(names))))
            q["list"], q["cos"], q["fused"] = [names[r] for r in keep], [cos[r] for r in keep], [fused[r] for r in keep]
    kept = []
    dropped = 0
    for q in qs:
        if q["kind"] == "syn":
            # the dense filter: the encoder ties the question to its document (first or second in the list)
            if q["gold"] not in q["list"]:
                dropped += 1
                continue
            order = sorted(range(len(q["list"])), key=lambda r: -q["cos"][r])
            if q["list"].index(q["gold"]) not in order[:2]:
                dropped += 1
                continue
        kept.append(q)
    used = sorted({d for q in kept for d in q["list"]} | {q["gold"] for q in kept})
    from .compress import extractive

    out = {"format": FORMAT, "encoder": man["name"], "first_stage": {k: params[k] for k in ("method", "dense_weight", "depth", "knn")},
           "list_depth": depth, "seen": seen, "heldout_docs": heldout,
           "docs": {d: [docs[d].title, " ".join(extractive(docs[d].text).split()[:SUMMARY_WORDS])] for d in used},
           "questions": kept}
    stats = {"documents": {"pool": len(pool), "heldout": len(heldout), "heldout_lists_over": len(listed),
                           "seen": len(seen), "in_file": len(used)},
             "questions": {}, "synthetic_dropped_by_dense_filter": dropped, "seconds": round(time.time() - t0)}
    for q in kept:
        k = f"{q['kind']}/{q['part']}"
        stats["questions"][k] = stats["questions"].get(k, 0) + 1
    out["stats"] = stats
    path = os.path.join(out_dir, "readerset.json.gz")
    save(out, path)
    log(f"wrote {path}: {json.dumps(stats)}")
    return stats


def save(rs: dict, path: str) -> None:
    """Writes a set where load reads it (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(rs, f, separators=(",", ":"))


def load(path: str) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        r = json.load(f)
    if r.get("format") != FORMAT:
        raise ValueError(f"{path}: format {r.get('format')!r}, this code reads {FORMAT}; rebuild it with "
                         "`python -m icicle.readerdata build`")
    return r


def seen_heldout_queries(rs: dict, data_dir: str = DEFAULT_DATA_DIR) -> list[dict]:
    """The set's "seen_heldout" questions as nq_qed's own query lines (qid, query, split), in the set's order: what a
    model trained on the set never saw of its seen corpus. `scripts/calibrate.sh` fits a model's gate on them beside
    the new-document queries when the model directory has them (a gate fitted on new documents alone promotes the
    memory route's wrong answers on seen ones: docs/research/2026-11-readers.md, "`models/r24a`"). The set keeps no
    qids, so a question is found by its text and gold among the train split's queries; one not found is an error."""
    _, queries = load_beir(data_dir)
    by = {(q.query, q.docid): q for q in queries if q.nq_split == "train"}
    out, missing = [], []
    for q in rs["questions"]:
        if q["part"] != "seen_heldout":
            continue
        m = by.get((q["q"], q["gold"]))
        if m is None:
            missing.append(q["q"])
        else:
            out.append({"qid": m.qid, "query": m.query, "split": m.nq_split})
    if missing:
        raise ValueError(f"{len(missing)} seen_heldout questions are not train queries of {data_dir} "
                         f"(first: {missing[0]!r}): the set was built from other data")
    return out


SNIPPET_INDEX = "icicle-readerset-snippets"
SNIPPET_FIELDS = ("text",)  # the demo index's body field (adapter.Fields.Body)


def snippet_request(query: str, ids: list[str], chars: int, fields=SNIPPET_FIELDS) -> dict:
    """adapter.Snippets' search body (adapter/snippets.go): the listed documents by _id, each with its best
    fragment of about chars characters by the unified highlighter (BM25 over sentences, the start when nothing
    matches). The two must stay one request: adapter/testdata/snippet_request.json holds both to one body
    (Go's TestSnippetBodyGolden, tests/test_reader.py's test_snippet_request_is_the_sidecars)."""
    return {"size": len(ids), "_source": False, "track_total_hits": False,
            "query": {"ids": {"values": ids}},
            "highlight": {"type": "unified", "order": "score", "pre_tags": [""], "post_tags": [""],
                          "highlight_query": {"multi_match": {"query": query, "fields": list(fields)}},
                          "fields": {f: {"fragment_size": chars, "number_of_fragments": 1, "no_match_size": chars}
                                     for f in fields}}}


def _es(url: str, method: str, path: str, body=None, ndjson: bool = False) -> dict:
    import urllib.error
    import urllib.request

    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method, headers={
        "Content-Type": "application/x-ndjson" if ndjson else "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"Elasticsearch {method} {path}: {e.code} {e.read()[:300]!r}") from None


def add_snippets(rs: dict, es_url: str, chars: int = 150, batch: int = 64, log=print) -> dict:
    """rs with q["snip"] on every question (module doc); the scratch index is made, filled and deleted here."""
    if chars < 1:
        raise ValueError(f"chars: {chars}, want at least 1")
    t0 = time.time()
    docs = load_docs()[0]
    missing = [d for d in rs["docs"] if d not in docs]
    if missing:
        raise ValueError(f"{len(missing)} documents of the set are not in the data (first: {missing[0]!r}): the set "
                         "was built from other data")
    idx = "/" + SNIPPET_INDEX
    try:
        _es(es_url, "DELETE", idx)
    except RuntimeError:
        pass
    _es(es_url, "PUT", idx, {"settings": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"},
                            "mappings": {"dynamic": "strict", "properties": {"title": {"type": "text"},
                                                                            "text": {"type": "text"}}}})
    try:
        ids = sorted(rs["docs"])
        for i in range(0, len(ids), 2000):
            lines = []
            for d in ids[i:i + 2000]:
                lines.append(json.dumps({"index": {"_id": d}}))
                lines.append(json.dumps({"title": docs[d].title, "text": docs[d].text}))
            r = _es(es_url, "POST", idx + "/_bulk", ("\n".join(lines) + "\n").encode(), ndjson=True)
            if r.get("errors"):
                bad = next(it for it in r["items"] if it["index"].get("error"))
                raise RuntimeError(f"bulk: {bad}")
        _es(es_url, "POST", idx + "/_refresh")
        log(f"snippets: {len(ids)} documents indexed in {time.time() - t0:.0f}s")
        qs = rs["questions"]
        empty = 0
        for i in range(0, len(qs), batch):
            part = qs[i:i + batch]
            body = "".join("{}\n" + json.dumps(snippet_request(q["q"], q["list"], chars)) + "\n" for q in part)
            res = _es(es_url, "POST", idx + "/_msearch", body.encode(), ndjson=True)
            for q, r in zip(part, res["responses"]):
                if "error" in r:
                    raise RuntimeError(f"snippet search for {q['q']!r}: {r['error']}")
                best = {}
                for h in r["hits"]["hits"]:
                    for f in SNIPPET_FIELDS:
                        frags = h.get("highlight", {}).get(f) or []
                        if frags and frags[0].strip():
                            best[h["_id"]] = frags[0].strip()
                            break
                q["snip"] = [best.get(d) or rs["docs"][d][1] for d in q["list"]]
                empty += sum(d not in best for d in q["list"])
        rs["snippet_chars"] = chars
        log(f"snippets: {len(qs)} questions in {time.time() - t0:.0f}s ({empty} listed documents with no fragment "
            "kept their summaries)")
        return rs
    finally:
        try:
            _es(es_url, "DELETE", idx)
        except RuntimeError:
            pass


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.readerdata", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write OUT/readerset.json.gz")
    b.add_argument("--out", required=True)
    b.add_argument("--limit-docs", type=int, default=0, help="a small set (tests, the GPU queue's dry run)")
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--depth", type=int, default=LIST_DEPTH,
                   help=f"candidates a list holds (default {LIST_DEPTH}; the sidecar reads up to 100: a reader trained "
                        "on 20 loses its reading at 100, docs/research/2026-11-readers.md)")
    b.add_argument("--cache", default="",
                   help="the encoder's vectors' folder (default OUT/cache): another set's, e.g. "
                        "~/.cache/icicle/readerset/cache, reuses its vectors (a set 100 deep then builds in minutes)")
    h = sub.add_parser("seen-heldout", help="write the set's held-out seen questions as nq_qed query lines "
                                            "(a model directory's seen_heldout_queries.jsonl)")
    h.add_argument("--set", required=True, help="readerset.json.gz")
    h.add_argument("--out", required=True)
    h.add_argument("--data", default=DEFAULT_DATA_DIR)
    sn = sub.add_parser("snippets", help="write a copy of the set with each listed document's query snippet")
    sn.add_argument("--set", required=True, help="readerset.json.gz")
    sn.add_argument("--out", required=True, help="the new readerset.json.gz")
    sn.add_argument("--es", default="http://127.0.0.1:9200", help="an Elasticsearch node for the scratch index")
    sn.add_argument("--chars", type=int, default=150, help="the sidecar's experimental.snippet_chars")
    a = ap.parse_args(argv)
    if a.cmd == "snippets":
        save(add_snippets(load(a.set), a.es, a.chars), a.out)
        print(f"readerdata: {a.out}")
        return
    if a.cmd == "seen-heldout":
        lines = seen_heldout_queries(load(a.set), a.data)
        with open(a.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(q) + "\n" for q in lines)
        print(f"readerdata: {len(lines)} held-out seen questions -> {a.out}")
        return
    if not 1 <= a.depth <= 100:
        ap.error(f"--depth: must be between 1 and 100 (the first stage's BM25 depth), got {a.depth}")
    build(a.out, a.limit_docs, a.threads, a.seed, depth=a.depth, cache=a.cache)


if __name__ == "__main__":
    main()
