"""A fourth labelled corpus for the fusion rules that follow the scores (docs/research/2026-12-fusion-rules.md,
"A fourth labelled corpus decides the spread rule"): CISI (library and information science abstracts, 1,460
documents, 76 judged queries; data/cisi), neither Wikipedia questions nor the cranfield/cacm abstracts the rules'
constants were first chosen on.

    # the SMART files from GitHub Shakiba-Alipour/Information-Retrieval-on-CISI (commit 7a23c346), any folder
    python -m icicle.lab.third_corpus convert --smart DIR --out ../data/cisi
    # then as second_encoder.py says for a set (index probe-cisi, --data ../data/cisi, --split ''): ingest with
    # data/cisi's vectors file, query vectors by `icicle vectors`, BM25's top 100 into /tmp/e5; then
    python -m icicle.lab.third_corpus rules --data ../data/cisi --work /tmp/e5       # each set, one line a rule
    python -m icicle.lab.third_corpus rules --data ../data/nq_qed --split dev --work /tmp/e5 \
        --seen ../models/r24e/seen_docids.txt                                       # also by seen and new
    python -m icicle.lab.third_corpus loo nq_qed-train=../data/nq_qed:train:/tmp/e5train \
        nq_qed=../data/nq_qed:dev:/tmp/e5 cranfield=../data/cranfield::/tmp/e5 cacm=../data/cacm::/tmp/e5 \
        cisi=../data/cisi::/tmp/e5                 # /tmp/e5train: nq_qed's training queries, as /tmp/e5 has dev's

`convert` writes the project's layout (data/README.md): `docid` = `title` = the title, or `title [number]` where
the title is shared; `text` the abstract (`.W`); the judged queries (`.W`, with the `.T` title in front where a
query has one); qrels re-keyed to those docids.

`rules` replays, with bge's exact cosines and BM25's top 100 from the scratch node (second_encoder's files), the
default, RRF and the linear fusions whose dense weight follows the query's own dense scores: w = clamp(a + b x
spread, 0, 1), the spread being the kNN's top cosine less its tenth, and w = clamp(a + b x gap) with the gap the
top less the second. The constants are those chosen in the fusion-rules log on the three other sets, none on this
one.

`loo` leaves each set out in turn: the linear fusion's first result at 401 weights for every query, a + b x spread
chosen (a 0..1 by 0.05, b 0..8 by 0.5) by the mean Hits@1 of the other sets (a NAME-train set stands for NAME when
choosing), scored on the one left out; a fixed weight chosen the same way beside it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
from collections import Counter

import numpy as np

from .second_encoder import BGE_VECTORS, first_relevant, fuse, key, labelled, unit_vectors


def smart_records(text: str) -> list[dict[str, str]]:
    """SMART-format records: '.I n' starts one, '.X' style tags start a field, the field runs to the next tag."""
    out: list[dict[str, str]] = []
    field = None
    for line in text.splitlines():
        m = re.match(r"^\.([A-Z])(?:\s+(\S+))?\s*$", line)
        if m and m.group(1) == "I":
            out.append({"I": m.group(2)})
            field = None
        elif m:
            field = m.group(1)
            out[-1].setdefault(field, "")
        elif field and out:
            out[-1][field] += line.strip() + " "
    return [{k: " ".join(v.split()) for k, v in r.items()} for r in out]


def convert_cmd(a: argparse.Namespace) -> None:
    def read(name: str) -> str:
        with open(os.path.join(a.smart, name), encoding="latin-1") as f:
            return f.read()

    docs = smart_records(read("CISI.ALL"))
    shared = Counter(d["T"] for d in docs)
    docid = {d["I"]: d["T"] if shared[d["T"]] == 1 else f"{d['T']} [{d['I']}]" for d in docs}
    if len(set(docid.values())) != len(docs):
        raise SystemExit("docids are not unique")
    rel: dict[str, list[str]] = {}
    for line in read("CISI.REL").splitlines():
        parts = line.split()
        if parts:
            rel.setdefault(parts[0], []).append(docid[parts[1]])
    os.makedirs(a.out, exist_ok=True)
    with gzip.open(os.path.join(a.out, "corpus.jsonl.gz"), "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"docid": docid[d["I"]], "title": docid[d["I"]], "text": d.get("W") or d["T"]}) + "\n")
    n_q = 0
    with gzip.open(os.path.join(a.out, "queries.jsonl.gz"), "wt", encoding="utf-8") as f:
        for q in smart_records(read("CISI.QRY")):
            if q["I"] in rel:
                text = " ".join(x for x in (q.get("T", ""), q.get("W", "")) if x)
                f.write(json.dumps({"qid": q["I"], "query": text}) + "\n")
                n_q += 1
    n_r = 0
    with open(os.path.join(a.out, "qrels.tsv"), "w", encoding="utf-8") as f:
        f.write("qid\tdocid\trelevance\n")
        for qid, ds in rel.items():
            for d in dict.fromkeys(ds):
                f.write(f"{qid}\t{d}\t1\n")
                n_r += 1
    print(f"{a.out}: documents {len(docs)} ({sum(v > 1 for v in shared.values())} titles shared) | "
          f"queries {n_q} (judged) | qrels {n_r}")


# name -> (weight rule, kNN depth); a weight rule maps the query's kNN cosines (best first) to the dense weight.
def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


WEIGHTS = {
    "linear 0.8, kNN 10 (the former default)": (lambda c: 0.8, 10),
    "BM25's top 100 by cosine (linear 1, kNN 0)": (lambda c: 1.0, 0),
    "linear 0.6, kNN 10": (lambda c: 0.6, 10),
    "linear 0.5, kNN 100": (lambda c: 0.5, 100),
    "0.6 + 4 x gap, kNN 10 (chosen on all three)": (lambda c: _clamp(0.6 + 4 * (c[0] - c[1])), 10),
    "0.55 + 3 x spread, kNN 10 (chosen on all three; the default)": (lambda c: _clamp(0.55 + 3 * (c[0] - c[9])), 10),
    "0.4 + 4 x spread (chosen on cranfield, cacm)": (lambda c: _clamp(0.4 + 4 * (c[0] - c[9])), 10),
    "0.6 + 1 x spread (chosen on nq_qed, cacm)": (lambda c: _clamp(0.6 + 1 * (c[0] - c[9])), 10),
    "0.65 + 2 x spread (chosen on nq_qed, cranfield)": (lambda c: _clamp(0.65 + 2 * (c[0] - c[9])), 10),
}


def _load(data: str, split: str, work: str):
    """(docids, index, BM25 lists, judged queries, queries x documents cosines) of one set."""
    name = os.path.basename(os.path.normpath(data))
    docs = []
    with gzip.open(os.path.join(data, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            docs.append((r["docid"], r["title"], r["text"]))
    docids = [d for d, _, _ in docs]
    with open(os.path.join(work, f"{name}.bm25.json"), encoding="utf-8") as f:
        bm25 = json.load(f)
    qs = labelled(data, split)
    _, dv = unit_vectors(os.path.join(data, BGE_VECTORS))
    _, qv = unit_vectors(os.path.join(work, f"{name}.q-bge.gz"))
    with open(os.path.join(work, "query-bge", "encoder.json"), encoding="utf-8") as f:
        title = json.load(f)["query_prefix"].rstrip(" ")
    cos = np.stack([qv[key(title, t)] for _, t, _ in qs]) @ np.stack([dv[key(t, x)] for _, t, x in docs]).T
    return docids, {d: i for i, d in enumerate(docids)}, bm25, qs, cos


def rules_cmd(a: argparse.Namespace) -> None:
    name = os.path.basename(os.path.normpath(a.data))
    docids, index, bm25, qs, cos = _load(a.data, a.split, a.work)
    rules = {"BM25 alone": None, "bge cosine alone": None, "RRF k 60, w 0.5, kNN 100": None, **WEIGHTS}
    subsets = {"all": list(range(len(qs)))}
    if a.seen:
        with open(a.seen, encoding="utf-8") as f:
            seen = {line.rstrip("\n") for line in f if line.strip()}
        subsets["seen"] = [j for j, (_, _, rel) in enumerate(qs) if rel & seen]
        subsets["new"] = [j for j, (_, _, rel) in enumerate(qs) if not rel & seen]
    for rule, spec in rules.items():
        first = np.zeros(len(qs), dtype=bool)
        hits1 = mrr = 0.0
        for j, (qid, _, rel) in enumerate(qs):
            order = np.argsort(-cos[j], kind="stable")
            if rule == "BM25 alone":
                ranked = [index[d] for d, _ in bm25[qid]]
            elif rule == "bge cosine alone":
                ranked = list(order[:10])
            elif rule.startswith("RRF"):
                ranked = fuse(bm25[qid], [list(order[:100])], [cos[j]], "rrf", [0.5, 0.5], 60.0, docids, index)
            else:
                weight, knn = spec
                w = weight(cos[j][order[:10]])
                ranked = fuse(bm25[qid], [list(order[:knn])], [cos[j]], "linear", [1 - w, w], 60.0, docids, index)
            if (r := first_relevant(ranked, docids, rel)) is not None:
                hits1 += r == 0
                first[j] = r == 0
                mrr += 1 / (r + 1)
        parts = " | ".join(f"{k} ({len(v)}) {first[v].mean():.3f}" for k, v in subsets.items())
        print(f"{name} | {rule} | {parts} | MRR@10 {mrr / len(qs):.3f}")
    top = -np.sort(-cos, axis=1)[:, :10]
    print(f"{name}: median dense spread (top cosine less the tenth) {np.median(top[:, 0] - top[:, -1]):.3f}")


GRID_W = np.linspace(0.0, 1.0, 401)


def top1_table(data: str, split: str, work: str, knn: int = 10):
    """top1_of the set's loaded files."""
    return top1_of(_load(data, split, work), knn)


def top1_of(loaded, knn: int = 10):
    """For each query of a loaded set (_load): whether the linear fusion's first result is relevant at each w of
    GRID_W, and the query's spread (the candidates' top cosine less their tenth). The candidates are ordered by
    Fuse's tie order (BM25 rank, then the docid) so that argmax's first maximum is Fuse's first result."""
    docids, index, bm25, qs, cos = loaded
    hits = np.zeros((len(qs), len(GRID_W)), dtype=bool)
    spread = np.zeros(len(qs))
    for j, (qid, _, rel) in enumerate(qs):
        order = np.argsort(-cos[j], kind="stable")
        cand = [index[d] for d, _ in bm25[qid]]
        bsc = np.array([s for _, s in bm25[qid]] + [0.0] * knn)
        extra = [int(x) for x in order[:knn] if int(x) not in set(cand)]
        extra.sort(key=lambda x: docids[x])
        cand = cand + extra
        bsc = bsc[:len(cand)]
        bsc = bsc / bsc.max() if bsc.max() > 0 else bsc
        d = cos[j][cand].astype(np.float64)
        top = np.sort(d)[::-1]
        spread[j] = top[0] - top[min(9, len(top) - 1)]
        dn = (d - d.min()) / (d.max() - d.min()) if d.max() > d.min() else np.ones_like(d)
        score = np.outer(1 - GRID_W, bsc) + np.outer(GRID_W, dn)
        first = np.argmax(score, axis=1)
        relv = np.array([docids[c] in rel for c in cand])
        hits[j] = relv[first]
    return hits, spread


GRID_A = np.round(np.arange(0.0, 1.0001, 0.05), 2)
GRID_B = np.round(np.arange(0.0, 8.0001, 0.5), 2)


def hits_at(table, ca: float, cb: float) -> np.ndarray:
    """Per query of a top1 table: whether w = clamp(ca + cb x spread) puts a relevant document first."""
    h, sp = table
    idx = np.rint(np.clip(ca + cb * sp, 0.0, 1.0) * (len(GRID_W) - 1)).astype(int)
    return h[np.arange(len(sp)), idx]


def choose(tables: list, fixed: bool) -> tuple[float, float, float]:
    """(mean Hits@1, a, b) of the a + b x spread (b 0 when fixed) best on the tables' mean; the smallest a, then
    b, on a tie."""
    best = None
    for ca in GRID_A:
        for cb in ([0.0] if fixed else GRID_B):
            m = float(np.mean([hits_at(t, ca, cb).mean() for t in tables]))
            if best is None or m > best[0] + 1e-12:
                best = (m, ca, cb)
    return best


def loo_cmd(a: argparse.Namespace) -> None:
    sets = {}
    for spec in a.sets:  # name=data:split:work
        name, rest = spec.split("=", 1)
        data, split, work = rest.split(":")
        sets[name] = top1_table(data, split, work)
        print(f"{name}: {len(sets[name][1])} queries, median spread {np.median(sets[name][1]):.3f}", flush=True)
    def hits1(name: str, ca: float, cb: float) -> float:
        return float(hits_at(sets[name], ca, cb).mean())

    report = [n for n in sets if not n.endswith("-train")]
    choosers = {n: [m for m in sets if m not in report and m.replace("-train", "") != n] +
                   [m for m in report if m != n and m + "-train" not in sets] for n in report}
    for fixed in (True, False):
        kind = "a fixed weight a" if fixed else "a + b x spread"
        for n in report:
            m, ca, cb = choose([sets[m] for m in choosers[n]], fixed)
            print(f"{kind} | held out {n}, chosen on {', '.join(choosers[n])}: a {ca} b {cb} (mean {m:.3f}) | "
                  f"{n} {hits1(n, ca, cb):.3f} | default {hits1(n, 0.8, 0.0):.3f}")
        every = [m for m in sets if m not in report] + [m for m in report if m + "-train" not in sets]
        m, ca, cb = choose([sets[m] for m in every], fixed)
        print(f"{kind} | chosen on {', '.join(every)}: a {ca} b {cb} (mean {m:.3f}) | " +
              " | ".join(f"{n} {hits1(n, ca, cb):.3f}" for n in report))


def pseudo_cmd(a: argparse.Namespace) -> None:
    """A label-free fit: a + b x spread chosen on queries made from a set's own documents (each its own gold;
    pseudoqueries.py), scored on the set's real judged queries, beside the default and the best cheap rules."""

    def cheap(loaded) -> tuple[float, float]:
        """BM25 alone and the cosine alone (over every document): Hits@1."""
        docids, _, bm25, qs, cos = loaded
        b = np.mean([bool(bm25[q]) and bm25[q][0][0] in rel for q, _, rel in qs])
        c = np.mean([docids[int(np.argmax(cos[j]))] in rel for j, (_, _, rel) in enumerate(qs)])
        return float(b), float(c)

    for spec in a.sets:  # NAME=PSEUDO_DATA:PSEUDO_WORK:REAL_DATA:REAL_SPLIT:REAL_WORK
        name, rest = spec.split("=", 1)
        pdata, pwork, rdata, rsplit, rwork = rest.split(":")
        pl, rl = _load(pdata, "", pwork), _load(rdata, rsplit, rwork)
        pt, rt = top1_of(pl), top1_of(rl)
        (pb, pc), (rb, rc) = cheap(pl), cheap(rl)
        m, ca, cb = choose([pt], fixed=False)
        fm, fa, _ = choose([pt], fixed=True)
        print(f"{name} | pseudo ({len(pt[1])}): BM25 {pb:.3f}, cosine {pc:.3f}, default {hits_at(pt, 0.55, 3).mean():.3f}, "
              f"median spread {np.median(pt[1]):.3f} | real ({len(rt[1])}): BM25 {rb:.3f}, cosine {rc:.3f}, "
              f"default {hits_at(rt, 0.55, 3).mean():.3f}, median spread {np.median(rt[1]):.3f} | "
              f"chosen on pseudo: {ca} + {cb} x spread ({m:.3f}) reads {hits_at(rt, ca, cb).mean():.3f} on real; "
              f"fixed {fa} ({fm:.3f}) reads {hits_at(rt, fa, 0.0).mean():.3f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--smart", required=True, help="folder with CISI.ALL, CISI.QRY, CISI.REL")
    c.add_argument("--out", required=True)
    r = sub.add_parser("rules")
    r.add_argument("--data", required=True, help="a set in the project's layout, with its bge vectors file")
    r.add_argument("--split", default="")
    r.add_argument("--work", required=True, help="second_encoder's folder: SET.q-bge.gz, SET.bm25.json, query-bge/")
    r.add_argument("--seen", default="", help="a reader's seen_docids.txt: Hits@1 also on its seen and new queries")
    lo = sub.add_parser("loo", help="constants chosen on the other sets, measured on the one left out")
    lo.add_argument("sets", nargs="+", help="NAME=DATA:SPLIT:WORK; a NAME-train set is NAME's choosing stand-in")
    ps = sub.add_parser("pseudo", help="a + b x spread chosen on queries made from the corpus, read on real ones")
    ps.add_argument("sets", nargs="+", help="NAME=PSEUDO_DATA:PSEUDO_WORK:REAL_DATA:REAL_SPLIT:REAL_WORK")
    a = p.parse_args()
    {"convert": convert_cmd, "rules": rules_cmd, "loo": loo_cmd, "pseudo": pseudo_cmd}[a.cmd](a)


if __name__ == "__main__":
    main()
