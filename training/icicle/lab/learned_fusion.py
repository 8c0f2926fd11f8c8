"""Does a fusion learned over a handful of per-candidate features beat the spread rule on a corpus it was not
learned on (docs/research/2026-12-fusion-rules.md, "A learned fusion, left out the same way")?

    cd training && python -m icicle.lab.learned_fusion      # the files of third_corpus.py's loo (its docstring)

Each query's candidates as retrieve.Fuse has them (BM25's top 100, then the kNN's top 10), eight features each:
BM25 / max BM25, the min-max cosine, both times the query's spread, in BM25's list or not, 60 / (60 + BM25 rank),
60 / (60 + cosine rank), cosine less the top cosine. A linear score, learned by a listwise softmax loss (the
relevant documents' share of the softmax over the candidates), each training corpus weighted alike (nq_qed's
7,167 training queries standing for nq_qed), 300 steps of gradient descent from the former default's weights;
each corpus left out in turn and scored by Hits@1.
"""
import numpy as np
from . import third_corpus as T

SETS = {"nq_qed-train": ("../data/nq_qed", "train", "/tmp/e5train"), "nq_qed": ("../data/nq_qed", "dev", "/tmp/e5"),
        "cranfield": ("../data/cranfield", "", "/tmp/e5"), "cacm": ("../data/cacm", "", "/tmp/e5"),
        "cisi": ("../data/cisi", "", "/tmp/e5")}

def lists(name):
    data, split, work = SETS[name]
    docids, index, bm25, qs, cos = T._load(data, split, work)
    out = []
    for j, (qid, _, rel) in enumerate(qs):
        order = np.argsort(-cos[j], kind="stable")
        cand = [index[d] for d, _ in bm25[qid]]
        bs = [s for _, s in bm25[qid]]
        seen = set(cand)
        extra = sorted((int(x) for x in order[:10] if int(x) not in seen), key=lambda x: docids[x])
        cand += extra; bs += [0.0] * len(extra)
        b = np.array(bs); b = b / b.max() if b.max() > 0 else b
        d = cos[j][cand].astype(np.float64)
        top = np.sort(d)[::-1]; sp = top[0] - top[min(9, len(top) - 1)]
        dn = (d - d.min()) / (d.max() - d.min()) if d.max() > d.min() else np.ones_like(d)
        brank = np.array([r + 1 for r in range(len(bm25[qid]))] + [0] * len(extra))
        inb = (brank > 0).astype(float)
        rr_b = np.where(brank > 0, 1.0 / (60 + np.maximum(brank, 1)), 0.0) * 60
        crank = np.argsort(np.argsort(-d, kind="stable"), kind="stable") + 1
        rr_d = 60.0 / (60 + crank)
        X = np.stack([b, dn, dn * sp, b * sp, inb, rr_b, rr_d, d - top[0]], axis=1)
        y = np.array([docids[c] in rel for c in cand])
        if y.any():
            out.append((X, y))
    return out

def fit(groups, iters=300, lr=0.5, l2=1e-3):
    w = np.zeros(groups[0][0][0][0].shape[0]); w[0], w[1] = 0.2, 0.8
    for _ in range(iters):
        g = np.zeros_like(w)
        for qs in groups:
            gg = np.zeros_like(w)
            for X, y in qs:
                s = X @ w; p = np.exp(s - s.max()); p /= p.sum()
                t = y / y.sum()
                gg += X.T @ (p - t)
            g += gg / len(qs)
        g /= len(groups); g += l2 * w
        w -= lr * g
    return w

def hits1(qs, w):
    return np.mean([y[np.argmax(X @ w)] for X, y in qs])

def main() -> None:
    L = {n: lists(n) for n in SETS}
    for out in ("nq_qed", "cranfield", "cacm", "cisi"):
        train = [L[n] for n in ("nq_qed-train", "cranfield", "cacm", "cisi") if n.replace("-train", "") != out]
        w = fit(train)
        print(f"left out {out}: learned {hits1(L[out], w):.3f}  w={np.round(w, 2)}", flush=True)


if __name__ == "__main__":
    main()
