"""A block reader trained on lists of 20 read at 100 (issue 26): does scaling a row's attention with the positions it
sees (Decoder.set_length_ref; `python -m icicle.delta lengthscale` bakes it into a graph) give it back what 100
blocks take?

    python -m icicle.lab.lengthscale --set ~/.cache/icicle/readerset-d100/readerset.json.gz \\
        --init ~/.cache/icicle/runs/r26e.delta.safetensors --n 40 --refs 0 800 400 250 --out ../.run/lengthscale.jsonl

Per held-out question of a set built 100 deep (`readerdata build --depth 100`): the prompt in the block template
(64-token summaries, shared positions), the header and each block computed once (each block over the header, as
the sidecar stores it), then one step over the header and the first K blocks whose rows are the query, [COPY], and
every listed title's tokens (each title's rows see the query, [COPY] and its own earlier tokens: the sidecar's
`experimental.scoring: vocab`). A title's copy score is the sum of its tokens' log-probabilities over the vocabulary; per
K and ref it prints the copy pick without a prior and with `experimental.copy_rank_prior` 4 (W x ln(place) off each
score), the list's own first, and the median score of the top title. K = 10 is read unscaled (its rows see about
ref positions); each ref > 0 is tried at 100. fp32 torch on this machine's cores: about 100 s a question on 2 AVX2
cores (the blocks 20 s, each step over about 4,500 positions and 700 rows 15 s).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np
import torch

from .. import readerdata
from ..decode import causal_mask_np
from ..prompt import Candidate

PRIOR = 4.0


def blocks_of(model, p) -> tuple[int, list[torch.Tensor], list[tuple[int, list[torch.Tensor]]]]:
    """(header length, the header's keys and values, [(block length, its keys and values)]), each block over the
    header at the header's end (shared positions), computed in batches of right-padded blocks."""
    seg, h = p.segments, p.segments[0]
    with torch.no_grad():
        out = model.step(torch.tensor([p.ids[:h]]), torch.arange(h)[None], torch.from_numpy(causal_mask_np(0, h)),
                         torch.tensor([h - 1]), *model.empty_past())
    hpast, blocks = list(out[1:]), []
    spans = list(zip(seg[:-1], seg[1:]))
    for c0 in range(0, len(spans), 25):
        ch = spans[c0:c0 + 25]
        width, b = max(e - s for s, e in ch), len(ch)
        ids = torch.zeros(b, width, dtype=torch.long)
        for j, (s, e) in enumerate(ch):
            ids[j, :e - s] = torch.tensor(p.ids[s:e])
        mask = torch.from_numpy(np.repeat(causal_mask_np(h, width), b, axis=0))
        with torch.no_grad():
            out = model.step(ids, torch.arange(h, h + width)[None].expand(b, -1), mask, torch.tensor([0]),
                             *[x.expand(b, -1, -1, -1) for x in hpast])
        blocks += [(e - s, [x[j:j + 1, :e - s] for x in out[1:]]) for j, (s, e) in enumerate(ch)]
    return h, hpast, blocks


def copy_scores(model, h: int, hpast, blocks, query: list[int], titles: list[list[int]], copy_id: int) -> list[float]:
    """Each title's copy score (its tokens and end over the vocabulary, after [COPY]) over the header and blocks."""
    past = [torch.cat([hpast[j]] + [b[1][j] for b in blocks], dim=1) for j in range(len(hpast))]
    P, q0 = past[0].shape[1], h + max(n for n, _ in blocks)
    rows = list(query) + [copy_id]
    nq = len(rows)
    pos = list(range(q0, q0 + nq))
    starts = []
    for t in titles:
        starts.append(len(rows))
        rows += t[:-1]
        pos += range(q0 + nq, q0 + nq + len(t) - 1)
    r = len(rows)
    mask = np.full((1, r, P + r), -1e9, np.float32)
    mask[0, :, :P] = 0
    mask[0, :nq, P:P + nq] = causal_mask_np(0, nq)[0]
    for st, t in zip(starts, titles):
        k = len(t) - 1
        mask[0, st:st + k, P:P + nq] = 0
        mask[0, st:st + k, P + st:P + st + k] = causal_mask_np(0, k)[0]
    with torch.no_grad():
        lg = model.step(torch.tensor([rows]), torch.tensor([pos]), torch.from_numpy(mask), torch.arange(r), *past)[0][0]
    lp = torch.log_softmax(lg.float(), -1)
    return [lp[nq - 1, t[0]].item() + sum(lp[st + i - 1, t[i]].item() for i in range(1, len(t)))
            for st, t in zip(starts, titles)]


def picks(scores: list[float]) -> dict:
    best = max(range(len(scores)), key=lambda i: scores[i])
    prior = max(range(len(scores)), key=lambda i: scores[i] - PRIOR * math.log(i + 1))
    return {"pick": best + 1, "pick_prior": prior + 1, "top": round(scores[best], 3)}


def run(set_path: str, init: str, n: int, refs: list[int], out: str = "", threads: int = 2, k_big: int = 100,
        log=print) -> dict:
    from ..reader import Args, Reader, load_model
    from ..tokenizer import Tok, build_tokenizer

    torch.set_num_threads(threads)
    tok = Tok(build_tokenizer())
    rs = readerdata.load(set_path)
    rd = Reader(rs, tok, Args(set=set_path, work="", blocks="shared", summary_tokens=64, budget=8192))
    model = load_model(init, tok.copy_id, torch.device("cpu")).eval()
    recs = []
    for i, q in enumerate([q for q in rs["questions"] if q["part"] == "heldout"][:n]):
        t0 = time.time()
        p = rd.build(q["q"], [Candidate(rd.docs[d].title, rd.docs[d].text) for d in q["list"][:k_big]])
        names = q["list"][:p.included]
        h, hpast, blocks = blocks_of(model, p)
        query = p.ids[p.segments[-1]:]
        rec = {"i": i, "gold_at": names.index(q["gold"]) + 1 if q["gold"] in names else 0, "n": len(names)}
        for k, ref in [(10, 0)] + [(k_big, r) for r in refs]:
            model.set_length_ref(ref)
            k = min(k, len(names))
            titles = [tok.encode(rd.docs[d].title) + [tok.end_id] for d in names[:k]]
            rec[f"{k}/{ref}"] = picks(copy_scores(model, h, hpast, blocks[:k], query, titles, tok.copy_id))
        model.set_length_ref(0)
        rec["s"] = round(time.time() - t0, 1)
        recs.append(rec)
        log(json.dumps(rec))
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return table(recs)


def table(recs: list[dict]) -> dict:
    """Per K/ref: the copy pick right without and with the prior, the prior's pick the list's first, the median top."""
    keys = [k for k in recs[0] if "/" in k]
    res = {"questions": len(recs), "list_first": sum(r["gold_at"] == 1 for r in recs) / len(recs)}
    for k in keys:
        res[k] = {"pick": sum(r[k]["pick"] == r["gold_at"] for r in recs) / len(recs),
                  "pick_prior": sum(r[k]["pick_prior"] == r["gold_at"] for r in recs) / len(recs),
                  "prior_pick_first": sum(r[k]["pick_prior"] == 1 for r in recs) / len(recs),
                  "median_top": statistics.median(r[k]["top"] for r in recs)}
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.lengthscale", description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True, help="a set built 100 deep")
    ap.add_argument("--init", required=True, help="a block reader's delta.safetensors")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--refs", type=int, nargs="+", default=[0, 800, 400, 250])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="", help="append each question's record here (JSON lines)")
    ap.add_argument("--table", default="", help="print the table of an --out file and stop")
    a = ap.parse_args(argv)
    if a.table:
        print(json.dumps(table([json.loads(x) for x in open(a.table)]), indent=1))
        return
    print(json.dumps(run(a.set, a.init, a.n, a.refs, a.out, a.threads), indent=1))


if __name__ == "__main__":
    main()
