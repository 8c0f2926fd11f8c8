"""What one training instance costs when only the query side is trained over frozen, cached candidate blocks,
against the full-prompt step the readers are trained with (issue: a reader trained at GPU instance counts on
these cores).

Both steps run SmolLM2-135M's shape (30 layers, 576 wide; smollm30's ModelConfig) with random weights (the cost of
a step does not depend on them), a batch of instances, a next-token loss on each instance's answer tokens and an
AdamW step over every weight:

- full: the whole prompt (candidates' blocks, then the query and the answer) forward and backward, as
  ``icicle.reader`` trains;
- query side: the candidates' keys and values computed once by a frozen copy (what a block cache would hold:
  computed once per document, reused by every instance that lists it, so not timed per step), then only the
  query and answer tokens forward and backward through the trained copy, attending to them.

    python -m icicle.lab.queryside --prompt 512 --query 40 --batch 8 --steps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from .. import model as M

SMOLLM2_135M = M.ModelConfig(vocab_size=49153, hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64,
                             intermediate=1536, rope_theta=100000.0, max_context_tokens=4096)


def full_step(m: M.Decoder, opt, ids: torch.Tensor, answer: int) -> float:
    """One step on whole prompts [B,T]: the loss on the last `answer` positions' next tokens."""
    b, t = ids.shape
    gb = torch.arange(b).repeat_interleave(answer - 1)
    gt = torch.arange(t - answer, t - 1).repeat(b)
    logits = m.train_logits(ids, torch.ones_like(ids, dtype=torch.bool), gb, gt)
    loss = F.cross_entropy(logits, ids[gb, gt + 1])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def past_of(frozen: M.Decoder, ids: torch.Tensor) -> list[torch.Tensor]:
    """The frozen copy's keys and values of ids [B,P] (causal, positions 0..P-1): what a block cache serves."""
    b, p = ids.shape
    with torch.no_grad():
        pos = torch.arange(p).unsqueeze(0).expand(b, p)
        out = frozen.step(ids, pos, M.causal_mask(0, p).expand(b, p, p), torch.tensor([p - 1]), *frozen.empty_past(b))
    return [x.detach() for x in out[1:]]


def query_step(m: M.Decoder, opt, past: list[torch.Tensor], ids: torch.Tensor, answer: int) -> float:
    """One step on the query and answer tokens [B,Q] after the cached past: only they go through m."""
    b, q = ids.shape
    p = past[0].shape[1]
    pos = (torch.arange(q) + p).unsqueeze(0).expand(b, q)
    idx = torch.arange(q - answer, q - 1)
    logits = m.step(ids, pos, M.causal_mask(p, q).expand(b, q, p + q), idx, *past)[0]  # [B,answer-1,V]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, q - answer + 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def bench(prompt: int, query: int, batch: int, steps: int, answer: int = 8, seed: int = 0) -> dict:
    if not answer < query < prompt:
        raise ValueError(f"want answer < query < prompt tokens, got {answer}, {query}, {prompt}")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, SMOLLM2_135M.vocab_size, (batch, prompt), generator=g)
    m = M.Decoder(SMOLLM2_135M)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
    out: dict = {"prompt": prompt, "query": query, "batch": batch, "answer": answer, "threads": torch.get_num_threads()}
    full = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        full_step(m, opt, ids, answer)
        if i:  # the first step warms up
            full.append(time.perf_counter() - t0)
    frozen = M.Decoder(SMOLLM2_135M)
    frozen.load_state_dict(m.state_dict())
    frozen.requires_grad_(False)
    t0 = time.perf_counter()
    past = past_of(frozen, ids[:, : prompt - query])
    out["cache_fill_s"] = time.perf_counter() - t0
    qs = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        query_step(m, opt, past, ids[:, prompt - query:], answer)
        if i:
            qs.append(time.perf_counter() - t0)
    out["full_step_s"] = statistics.median(full)
    out["query_step_s"] = statistics.median(qs)
    out["full_instances_per_hour"] = round(3600 * batch / out["full_step_s"])
    out["query_instances_per_hour"] = round(3600 * batch / out["query_step_s"])
    out["ratio"] = out["full_step_s"] / out["query_step_s"]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=512, help="tokens of a whole prompt (blocks, query and answer)")
    ap.add_argument("--query", type=int, default=40, help="of which the query and the answer")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(json.dumps(bench(a.prompt, a.query, a.batch, a.steps)))


if __name__ == "__main__":
    main()
