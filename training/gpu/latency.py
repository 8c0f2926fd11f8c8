"""The reader's cost per request on the device's GPU: a causal prefill of an N-token prompt, then one-token decode
steps over its cache, batch 1, in reader135's architecture (SmolLM2-135M, 30 layers) with random weights (the time
does not depend on the weights' values, so nothing but this tree travels), fp32 and bf16. The sidecar's prompts:
433 tokens for 10 candidates with summaries, 3,692 for 100 (docs/research/2026-11-readers.md, "Block reading").

    python training/gpu/latency.py [--tokens 433 3692] [--decode 20] [--reps 20] [--device cuda] [--out FILE]

Prints one JSON object: per dtype and prompt length the median and p90 milliseconds of the prefill and of one
decode step (CUDA-synchronised wall time after --warmup runs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from icicle.configs import get_config  # noqa: E402
from icicle.model import Decoder  # noqa: E402


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _causal(n: int, past: int, dev: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [1, n, past + n]: row i sees the cache and the prompt up to i."""
    m = torch.full((n, past + n), float("-inf"), device=dev, dtype=dtype)
    m[:, :past] = 0
    m[:, past:] = torch.triu(m[:, past:], diagonal=1)
    return m.unsqueeze(0)


def measure(model: Decoder, n: int, decode: int, reps: int, warmup: int, dev: torch.device, dtype: torch.dtype) -> dict:
    vocab = model.c.vocab_size
    ids = torch.randint(0, vocab, (1, n), device=dev)
    pos = torch.arange(n, device=dev).unsqueeze(0)
    last = torch.tensor([n - 1], device=dev)
    zero = torch.tensor([0], device=dev)
    pre, step = [], []
    with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        for r in range(warmup + reps):
            _sync(dev)
            t = time.perf_counter()
            out = model.step(ids, pos, _causal(n, 0, dev, torch.float32), last, *model.empty_past())
            _sync(dev)
            if r >= warmup:
                pre.append((time.perf_counter() - t) * 1e3)
            past = list(out[1:])  # a step returns the new positions' keys and values: the caller keeps the cache
            for i in range(decode):
                tok = out[0][:, -1].argmax(-1, keepdim=True)
                _sync(dev)
                t = time.perf_counter()
                out = model.step(tok, torch.tensor([[n + i]], device=dev), _causal(1, n + i, dev, torch.float32), zero,
                                 *past)
                _sync(dev)
                if r >= warmup:
                    step.append((time.perf_counter() - t) * 1e3)
                past = [torch.cat([p, q], dim=1) for p, q in zip(past, out[1:])]

    def q(xs: list[float], p: float) -> float:
        return round(sorted(xs)[min(len(xs) - 1, int(p * len(xs)))], 3) if xs else 0.0

    return {"tokens": n, "prefill_ms_p50": round(statistics.median(pre), 3), "prefill_ms_p90": q(pre, 0.9),
            "decode_step_ms_p50": round(statistics.median(step), 3) if step else 0.0, "decode_step_ms_p90": q(step, 0.9),
            "runs": reps, "decode_steps": decode}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[433, 3692])
    ap.add_argument("--decode", type=int, default=20)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    if min(a.tokens) < 1 or a.reps < 1 or a.decode < 0:
        raise SystemExit("--tokens and --reps must be at least 1, --decode at least 0")
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Decoder(get_config("reader135").model).to(dev).eval()
    res = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
           "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1), "runs": []}
    for dtype in (torch.float32, torch.bfloat16):
        for n in a.tokens:
            res["runs"].append({"dtype": str(dtype).removeprefix("torch."),
                                **measure(model, n, a.decode, a.reps, a.warmup, dev, dtype)})
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
