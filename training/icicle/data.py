"""nq_qed in BEIR layout -> the incremental-GR split (D_train seen / D_new unseen) and query sets.

Split rules (deterministic, no RNG):
- a document is in D_new iff int(sha1(docid utf-8)[:8], 16) % 10 == 0, else in D_train (about 90/10);
- each query follows its (single) relevant document from qrels;
- train queries: NQ split=train whose document is in D_train (train queries of D_new documents are dropped,
  so no D_new document is ever trained on);
- NQ split=dev queries are cut into dev / test by int(sha1(qid)[:8], 16) % 2 (0 -> dev, 1 -> test); each
  of these is tagged seen (doc in D_train) or new (doc in D_new), reported separately as in the paper.
``data_version`` = "nq_qed@" + the first 12 hex digits of the sha256 over the sorted D_train docids and the
sorted train / dev / test qids, so any change of the split changes it.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
from dataclasses import dataclass, field

DEFAULT_DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nq_qed")


@dataclass(frozen=True)
class Doc:
    docid: str
    title: str
    text: str


@dataclass(frozen=True)
class Query:
    qid: str
    query: str
    docid: str  # the relevant document
    nq_split: str  # "train" or "dev" as in NQ


@dataclass
class Split:
    docs: dict[str, Doc]
    d_train: list[str]  # sorted docids
    d_new: list[str]
    train: list[Query]
    dev: list[Query]
    test: list[Query]
    data_version: str
    seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.seen = set(self.d_train)


def _h(s: str) -> int:
    return int(hashlib.sha1(s.encode("utf-8")).hexdigest()[:8], 16)


def is_new_doc(docid: str) -> bool:
    """Reports whether docid falls in D_new (the unseen 10%)."""
    return _h(docid) % 10 == 0


def load_corpus(data_dir: str = DEFAULT_DATA_DIR) -> dict[str, Doc]:
    """Loads data_dir/corpus.jsonl.gz (docid, title, text a line), by docid."""
    docs: dict[str, Doc] = {}
    with gzip.open(os.path.join(data_dir, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            docs[r["docid"]] = Doc(r["docid"], r["title"], r["text"])
    return docs


def load_beir(data_dir: str = DEFAULT_DATA_DIR) -> tuple[dict[str, Doc], list[Query]]:
    """Loads corpus.jsonl.gz, queries.jsonl.gz and qrels.tsv (header qid, docid, relevance)."""
    docs = load_corpus(data_dir)
    rel: dict[str, str] = {}
    with open(os.path.join(data_dir, "qrels.tsv"), encoding="utf-8", newline="") as f:
        rd = csv.reader(f, delimiter="\t")
        header = next(rd)
        if header[:2] != ["qid", "docid"]:
            raise ValueError(f"qrels.tsv: unexpected header {header}")
        for row in rd:
            if int(row[2]) > 0:
                rel.setdefault(row[0], row[1])
    queries: list[Query] = []
    with gzip.open(os.path.join(data_dir, "queries.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            d = rel.get(r["qid"])
            if d is None or d not in docs:
                continue
            queries.append(Query(r["qid"], r["query"], d, r["split"]))
    return docs, queries


def make_split(data_dir: str = DEFAULT_DATA_DIR) -> Split:
    """Builds the deterministic D_train / D_new split and the train / dev / test query sets."""
    docs, queries = load_beir(data_dir)
    d_new = sorted(d for d in docs if is_new_doc(d))
    d_train = sorted(d for d in docs if not is_new_doc(d))
    train = [q for q in queries if q.nq_split == "train" and not is_new_doc(q.docid)]
    dev = [q for q in queries if q.nq_split == "dev" and _h(q.qid) % 2 == 0]
    test = [q for q in queries if q.nq_split == "dev" and _h(q.qid) % 2 == 1]
    hs = hashlib.sha256()
    for part in (d_train, sorted(q.qid for q in train), sorted(q.qid for q in dev), sorted(q.qid for q in test)):
        hs.update("\n".join(part).encode("utf-8"))
        hs.update(b"\x00")
    return Split(docs, d_train, d_new, train, dev, test, "nq_qed@" + hs.hexdigest()[:12])
