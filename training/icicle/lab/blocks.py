"""Block reading without training (issue 26, first measurement): how much a reader loses when each candidate block
is encoded on its own, and what a request then costs.

    python -m icicle.lab.blocks --set READERSET [--init reader135|PT] [--n 100] [--modes full contiguous shared]

The prompt is split into the header, one block per candidate (exactly the ids of prompt.build_prompt) and the query
block. "full" is today's causal prefill. In the block modes the header is encoded once, each block attends to the
header and itself only, and the query and the answer attend to everything; that is a mask and position ids over the
model's own step contract (no new parameters, the ONNX graph already takes both), decode.block_attention's layouts:
- contiguous: block i attends to itself only and sits at its place in the prompt (Block-Attention: a block computed
  at offset 0 and its keys re-rotated to that place gives the same keys, since RoPE inside the block is relative);
  before 2026-11-25 this tool's contiguous blocks also saw the header (results/reader/blocks_reader135_zero_shot.json),
  which no stored block can (its state would depend on its distance from the header);
- shared: every block attends to the header and itself and starts right after the header (BlockRank: order-free, a
  block's cache is the same wherever it is listed), the query after the longest block.
Per mode: the held-out shuffled view of the reader set (reading alone, chance 0.10) and the ordered one, the copy
pick, and the time of the per-request part (full: the whole prefill; blocks: the query block over the cached
blocks), torch on this machine's cores.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np

from ..decode import CachedPromptScorer, Trie, causal_mask_np, decode, torch_step
from ..prompt import TEMPLATES, Candidate, _fill, _split_candidate, _title_pieces, build_prompt

def split_prompt(encode, query: str, cands: list[Candidate], budget: int, summary_tokens: int, fmt: int = 2):
    """(header ids, [block ids per included candidate], query ids) whose concatenation is build_prompt's ids."""
    t = TEMPLATES[fmt]
    p = build_prompt(encode, query, cands, budget, max_summary_tokens=summary_tokens, prompt_format=fmt)
    header, qblock = encode(t["header"]), encode(_fill(t["query"], query=query))
    pre_t, post_t = _split_candidate(t)
    blocks = []
    for n, (c, k) in enumerate(zip(cands[: p.included], p.summary_tokens), start=1):
        blocks.append(encode(_fill(pre_t, i=n)) + encode(c.summary)[:k] + _title_pieces(encode, post_t, n, c.title))
    if header + [x for b in blocks for x in b] + qblock != p.ids:
        raise AssertionError("split_prompt: the pieces do not rebuild build_prompt's ids")
    return header, blocks, qblock, p.included


class BlockScorer:
    """decode.CachedPromptScorer's interface over a prompt read block by block (module doc), for a step that returns
    numpy (torch_step(resident=False), ort_step); `request_s` is the
    time of the per-request part (the query block over the cached header and blocks)."""

    def __init__(self, step, header, blocks, query, empty, mode: str) -> None:
        self._step = step
        h = len(header)
        _, past_h = step(np.asarray([header]), np.arange(h)[None], causal_mask_np(0, h), np.asarray([h - 1]), empty)
        kv = [[p] for p in past_h]  # the step returns the new tokens' keys and values only
        off = h
        for b in blocks:
            n = len(b)
            if mode == "shared":  # over the header, at its end
                _, pres = step(np.asarray([b]), np.arange(h, h + n)[None], causal_mask_np(h, n), np.asarray([n - 1]),
                               past_h)
            else:  # alone, at its place
                _, pres = step(np.asarray([b]), np.arange(off, off + n)[None], causal_mask_np(0, n),
                               np.asarray([n - 1]), empty)
            for layer, p in zip(kv, pres):
                layer.append(p)
            off += n
        past = [np.concatenate(x, axis=1) for x in kv]
        self._L = past[0].shape[1]
        self._pos0 = h + (max((len(b) for b in blocks), default=0) if mode == "shared" else self._L - h)
        q = len(query)
        t0 = time.perf_counter()
        logits, qkv = step(np.asarray([query]), np.arange(self._pos0, self._pos0 + q)[None],
                           causal_mask_np(self._L, q), np.asarray([q - 1]), past)
        self.request_s = time.perf_counter() - t0
        self._past = [np.concatenate([a, b], axis=1) for a, b in zip(past, qkv)]
        self._q = q
        self._cache = {(): logits[0, -1]}

    def logits(self, prefix: tuple[int, ...]):
        z = self._cache.get(prefix)
        if z is None:
            k = len(prefix)
            start = self._pos0 + self._q
            out, _ = self._step(np.asarray([prefix]), np.arange(start, start + k)[None],
                                causal_mask_np(self._L + self._q, k), np.asarray([k - 1]), self._past)
            z = out[0, -1]
            self._cache[prefix] = z
        return z


def run(set_path: str, init: str, n: int, modes: list[str], threads: int = 2) -> dict:
    import torch

    from .. import reader, readerdata
    from ..tokenizer import Tok, build_tokenizer

    torch.set_num_threads(threads)
    tok = Tok(build_tokenizer())
    rs = readerdata.load(set_path)
    docs = rs["docs"]
    model = reader.load_model(init, tok.copy_id, torch.device("cpu")).eval()
    step = torch_step(model, resident=False)
    empty = [p.cpu().numpy() for p in model.empty_past()]
    gtrie = Trie.build([d for d in rs["seen"] if d in docs], tok.encode, tok.end_id)
    qs = [q for q in rs["questions"] if q["part"] == "heldout"][:n]
    out = {}
    for view in ("heldout_shuffled", "heldout"):
        for mode in modes:
            pick = gin = 0
            times = []
            for q in qs:
                names = q["list"][:10]
                if view == "heldout_shuffled":
                    names = random.Random(q["q"]).sample(names, len(names))
                cands = [Candidate(docs[d][0], docs[d][1]) for d in names]
                header, blocks, qblock, inc = split_prompt(tok.encode, q["q"], cands, reader.BUDGET,
                                                           reader.SUMMARY_TOKENS)
                names = names[:inc]
                if mode == "full":
                    t0 = time.perf_counter()
                    sc = CachedPromptScorer(step, header + [x for b in blocks for x in b] + qblock, empty)
                    times.append(time.perf_counter() - t0)
                else:
                    sc = BlockScorer(step, header, blocks, qblock, empty, mode)
                    times.append(sc.request_s)
                res = decode(sc, gtrie, Trie.build(names, tok.encode, tok.end_id), tok.copy_id, tok.end_id, 1)
                if q["gold"] in names:
                    gin += 1
                    pick += int(bool(res.copy) and res.copy[0].docid == q["gold"])
            out[f"{view}/{mode}"] = {"n": len(qs), "copy_pick": round(pick / max(1, gin), 3),
                                     "request_ms_p50": round(1000 * statistics.median(times), 1)}
            print(json.dumps({f"{view}/{mode}": out[f"{view}/{mode}"]}), flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.blocks", description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True)
    ap.add_argument("--init", default="reader135")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--modes", nargs="+", default=["full", "contiguous", "shared"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    res = run(a.set, a.init, a.n, a.modes, a.threads)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
