"""ONNX export to the MODEL_FORMAT.md contract, parity checks, int8 variant, and the model directory files.

Parity tolerances (checked by ``check_parity`` and the tests):
- fp32 ONNX vs PyTorch: for every compared tensor, max |diff| <= FP32_ATOL (1e-4) + FP32_RTOL (5e-4) x its
  largest |value|, on random prompts (prefill, past = 0), on a chunk after a cache, and on a tree step (two
  branches after a shared prefix give the same logits and presents as each branch run alone); presents within
  the same tolerance. The relative term is for deep pretrained models: ORT sums in another order than PyTorch,
  and the 30-block SmolLM2 carries very large activations at early positions, where its logits (up to about
  30) differed by up to 9.6e-4 (position 2 of a 28-token probe; reader135), while a 2-block fixture differs
  by 1e-5 (tests/test_export.py still holds the fixture to FP32_ATOL alone). RTOL was 1e-4 until r24f (session 23,
  a CPU without AVX-512): at position 1 of the fourth probe its logit 8.77 came out of ORT 4.6e-3 off PyTorch's
  (1.44 x the old tolerance; with ORT's graph optimisations off 8.7e-3), while PyTorch fp32 was 6.2e-4 off an fp64
  run of the same weights: ORT's fp32 GEMMs on AVX2 sum in another order, and r24f's early-position activations
  amplify it. r24a's graph on the same probes and host: 2.1e-4. An export bug (mask, rotary, cache layout) moves
  logits by whole units, which 5e-4 x 30 still catches by three orders of magnitude.
- int8 ONNX vs PyTorch: max |logit diff| reported, top-1 agreement reported (must be >= INT8_MIN_TOP1).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import torch

from .decode import causal_mask_np, ort_step, torch_step
# the int8 file (torch-free, for scripts/model.sh's light venv); callers import it from here as before
from .int8 import (HEAD_NODE, KEEP_FP32, add_arguments, add_int8, quantize_int8,  # noqa: F401
                   quantize_weights, untie_head)
from .model import Decoder

OPSET = 17
FP32_ATOL = 1e-4
FP32_RTOL = 5e-4  # the module doc says why (r24f on an AVX2 CPU)
INT8_MIN_TOP1 = 0.5


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    ins = ["input_ids", "position_ids", "attention_mask", "logits_index"]
    outs = ["logits"]
    for l in range(num_layers):
        ins += [f"past_key_values.{l}.key", f"past_key_values.{l}.value"]
        outs += [f"present.{l}.key", f"present.{l}.value"]
    return ins, outs


def export_onnx(model: Decoder, path: str) -> None:
    """Exports model.step to path (fp32, opset 17, dynamic n / past / m)."""
    model.eval()
    c = model.c
    n, past = 3, 2
    args = (
        torch.zeros(1, n, dtype=torch.int64),
        torch.arange(past, past + n).unsqueeze(0),
        torch.zeros(1, n, past + n),
        torch.tensor([n - 1]),
        *[torch.zeros(1, past, c.kv_heads, c.head_dim) for _ in range(2 * c.layers)],
    )
    ins, outs = io_names(c.layers)
    dyn = {"input_ids": {1: "n"}, "position_ids": {1: "n"}, "attention_mask": {1: "n", 2: "past_plus_n"},
           "logits_index": {0: "m"}, "logits": {1: "m"}}
    for name in ins[4:]:
        dyn[name] = {1: "past"}
    for name in outs[1:]:
        dyn[name] = {1: "n"}
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=ins, output_names=outs, dynamic_axes=dyn,
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)


def next_token_agreement(model_dir: str, int8: str = "", passages: int = 12, tokens: int = 160) -> dict:
    """How often the int8 file's next token (the argmax at every position) is model_dir's fp32 graph's, over the first
    `tokens` tokens of `passages` nq_qed passages (every 97th document): what decides whether an int8 file can serve.
    int8: the file to compare (default: the manifest's onnx_quantized). On an AVX2 host without VNNI models/r24a's
    8-bit file agreed on 0.241 of 1,613 positions, its 7-bit file on 0.862."""
    import gzip

    from tokenizers import Tokenizer

    from .data import DEFAULT_DATA_DIR

    m = json.load(open(os.path.join(model_dir, "manifest.json"), encoding="utf-8"))
    out = {}
    if not int8:
        if not m.get("onnx_quantized"):
            raise SystemExit(f"{model_dir}: the manifest names no onnx_quantized file")
        int8 = os.path.join(model_dir, m["onnx_quantized"])
        out["int8_weight_bits"] = m.get("int8_weight_bits", 8)
    texts = []
    with gzip.open(os.path.join(DEFAULT_DATA_DIR, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % 97 == 0:
                texts.append(json.loads(line)["text"])
            if len(texts) == passages:
                break
    tok = Tokenizer.from_file(os.path.join(model_dir, m["tokenizer"]))
    layers = m["num_layers"]
    empty = [np.zeros((1, 0, m["num_kv_heads"], m["head_dim"]), np.float32)] * (2 * layers)
    runs = [ort_step(ort_session(p), layers) for p in (os.path.join(model_dir, m["onnx"]), int8)]
    agree = total = 0
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids[:tokens]
        n = len(ids)
        pos = np.arange(n, dtype=np.int64)
        ref, got = (r(np.asarray([ids], np.int64), pos[None], causal_mask_np(0, n), pos, empty)[0][0].argmax(-1)
                    for r in runs)
        agree += int((ref == got).sum())
        total += n
    return {"agreement": round(agree / total, 4), "positions": total, "passages": len(texts)} | out


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m icicle.export", description="A model directory's int8 file: "
                                 "its weight MatMuls in int8 (quantize_weights), named by the manifest's "
                                 "onnx_quantized; the sidecar serves it with model.quantized: true.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_arguments(sub.add_parser("int8", help="write MODEL/model.int8.onnx and set the manifest's onnx_quantized"))
    g = sub.add_parser("agree", help="next-token agreement of MODEL's int8 file with its fp32 graph on nq_qed text")
    g.add_argument("--model", required=True, help="model directory with both files (onnx and onnx_quantized)")
    a = ap.parse_args(argv)
    if a.cmd == "agree":
        print(json.dumps(next_token_agreement(a.model)))
        return
    print(json.dumps(add_int8(a.model, tuple(a.keep), a.head, a.weight_bits)))


def ort_session(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@dataclass
class ParityReport:
    fp32_max_abs: float
    tree_max_abs: float
    int8_max_abs: float
    int8_top1_agreement: float
    fp32_worst: float = 0.0  # largest max|diff| / (FP32_ATOL + FP32_RTOL x max|ref|) over the fp32 comparisons
    tree_worst: float = 0.0  # the same over the tree-step comparisons; both must be <= 1

    def to_dict(self) -> dict:
        return self.__dict__.copy()


class _Worst:
    """The largest max |got - ref| over the comparisons added, and the largest as a fraction of ref's fp32
    tolerance, FP32_ATOL + FP32_RTOL x max |ref| (<= 1 passes)."""

    def __init__(self):
        self.abs = self.ratio = 0.0

    def add(self, got: np.ndarray, ref: np.ndarray) -> None:
        d = float(np.abs(got - ref).max())
        self.abs = max(self.abs, d)
        self.ratio = max(self.ratio, d / (FP32_ATOL + FP32_RTOL * float(np.abs(ref).max())))


def _tree_inputs(prefix_len: int, a: list[int], b: list[int]):
    """Tree step: branches a and b both follow the cached prefix. Returns ids, pos, mask, idx."""
    n = len(a) + len(b)
    ids = np.asarray([a + b], np.int64)
    pos = np.asarray([[prefix_len + i for i in range(len(a))] + [prefix_len + i for i in range(len(b))]], np.int64)
    mask = np.full((1, n, prefix_len + n), -1e9, np.float32)
    mask[0, :, :prefix_len] = 0
    for i in range(len(a)):
        mask[0, i, prefix_len:prefix_len + i + 1] = 0
    for j in range(len(b)):
        mask[0, len(a) + j, prefix_len + len(a):prefix_len + len(a) + j + 1] = 0
    idx = np.arange(n, dtype=np.int64)
    return ids, pos, mask, idx


def check_parity(model: Decoder, onnx_path: str, int8_path: str | None, seed: int = 0, trials: int = 4,
                 int8_required: bool = True) -> ParityReport:
    """Compares ORT against PyTorch as described in the module doc; raises AssertionError past tolerance.
    int8_required=False (a model that ships its fp32 graph) reports the int8 agreement without enforcing it."""
    rng = np.random.default_rng(seed)
    c = model.c
    ts, os_ = torch_step(model), ort_step(ort_session(onnx_path), c.layers)
    qs = ort_step(ort_session(int8_path), c.layers) if int8_path else None
    empty = [np.zeros((1, 0, c.kv_heads, c.head_dim), np.float32)] * (2 * c.layers)
    fp32, tree = _Worst(), _Worst()
    int8_max = 0.0
    agree = total = 0
    for _ in range(trials):
        p = int(rng.integers(5, 40))
        ids = rng.integers(0, c.vocab_size, size=(1, p), dtype=np.int64)
        pos = np.arange(p, dtype=np.int64)[None]
        idx = np.asarray(sorted(rng.choice(p, size=min(3, p), replace=False)), np.int64)
        args = (ids, pos, causal_mask_np(0, p), idx, empty)
        lt, pt = ts(*args)
        lo, po = os_(*args)  # prefill with past = 0
        fp32.add(lo, lt)
        for ref, got in zip(pt, po):
            fp32.add(got, ref)
        if qs:
            lq, _ = qs(*args)
            int8_max = max(int8_max, float(np.abs(lt - lq).max()))
            agree += int((lt.argmax(-1) == lq.argmax(-1)).sum())
            total += lt.shape[1]
        # tree step after the cached prompt: branch a and b vs each alone
        a = rng.integers(0, c.vocab_size, size=int(rng.integers(1, 4))).tolist()
        b = rng.integers(0, c.vocab_size, size=int(rng.integers(1, 4))).tolist()
        tid, tpos, tmask, tidx = _tree_inputs(p, a, b)
        tree_t, tree_pt = ts(tid, tpos, tmask, tidx, pt)
        tree_o, tree_po = os_(tid, tpos, tmask, tidx, po)
        tree.add(tree_o, tree_t)
        for off, br in ((0, a), (len(a), b)):
            k = len(br)
            alone, alone_p = os_(np.asarray([br], np.int64), np.arange(p, p + k, dtype=np.int64)[None],
                                 causal_mask_np(p, k), np.arange(k, dtype=np.int64), po)
            tree.add(alone[0], tree_o[0, off:off + k])
            for x, y in zip(alone_p, tree_po):
                tree.add(x, y[:, off:off + k])
    rep = ParityReport(fp32.abs, tree.abs, int8_max, agree / total if total else float("nan"), fp32.ratio, tree.ratio)
    assert rep.fp32_worst <= 1, (f"ORT vs PyTorch differ by {rep.fp32_max_abs} ({rep.fp32_worst:.2f} x the tolerance "
                                 f"{FP32_ATOL} + {FP32_RTOL} x max|value|)")
    assert rep.tree_worst <= 1, (f"tree step differs from separate branches by {rep.tree_max_abs} "
                                 f"({rep.tree_worst:.2f} x the tolerance)")
    if qs and int8_required:
        assert rep.int8_top1_agreement >= INT8_MIN_TOP1, f"int8 top-1 agreement {rep.int8_top1_agreement}"
    return rep


def write_manifest(out: str, *, name: str, config: str, backbone: str, model_version: str, data_version: str,
                   model: Decoder, copy_token_id: int, end_token_id: int, template: dict,
                   quantized: bool = True, int8_only: bool = False, max_summary_tokens: int = 0, max_prompt_tokens: int = 0,
                   prompt_format: int = 1) -> dict:
    """Writes manifest.json (MODEL_FORMAT.md version 1) into out and returns it. int8_only: the directory ships
    only the int8 file, named as `onnx` (for models whose fp32 file is too big to commit). prompt_format: the
    prompt format trained (prompt.py); 1 is left out of the file (absent = 1, as older manifests)."""
    c = model.c
    m = {
        "format_version": 1,
        "name": name,
        "config": config,
        "backbone": backbone,
        "model_version": model_version,
        "data_version": data_version,
        "onnx": "model.int8.onnx" if int8_only else "model.onnx",
        "tokenizer": "tokenizer.json",
        "seen_docids": "seen_docids.txt",
        "vocab_size": c.vocab_size,
        "num_layers": c.layers,
        "num_kv_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "kv_dtype": "float32",
        "max_context_tokens": c.max_context_tokens,
        "rope_theta": c.rope_theta,  # block reading moves stored keys by it (inference/blocks.go)
        "copy_token_id": copy_token_id,
        "end_token_id": end_token_id,
        "template": template,
    }
    if max_summary_tokens > 0:  # the trained summary cap; the engine never exceeds it
        m["max_summary_tokens"] = max_summary_tokens
    if max_prompt_tokens > 0:  # the trained prompt budget; the engine never builds a longer prompt
        m["max_prompt_tokens"] = max_prompt_tokens
    if prompt_format != 1:
        m["prompt_format"] = prompt_format
    if quantized and not int8_only:
        m["onnx_quantized"] = "model.int8.onnx"
        m["int8_weight_bits"] = 7  # quantize_int8
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(m, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return m


def write_seen_docids(out: str, docids: list[str]) -> None:
    for d in docids:
        if not d or "\n" in d or "\r" in d:
            raise ValueError(f"docid {d!r} cannot be written one per line")
    with open(os.path.join(out, "seen_docids.txt"), "w", encoding="utf-8") as f:
        f.write("".join(d + "\n" for d in docids))


if __name__ == "__main__":
    main()
