"""A model directory's int8 file, without PyTorch: its weight MatMuls in int8 (ONNX Runtime's dynamic
quantisation), named by the manifest's ``onnx_quantized``; the sidecar serves it with ``model.quantized: true``.

Needs numpy, onnx and onnxruntime only, so ``scripts/model.sh`` makes the int8 file of a shipped model whose
manifest names one (``models/b7``) in the light venv of ``scripts/pyenv.sh --graft``, as it fills graph.onnx's
weights. ``python -m icicle.export int8`` is the same command in the training venv.

    python -m icicle.int8 --model ../models/b7 --head
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np


def quantize_int8(src: str, dst: str) -> None:
    """Writes the int8 dynamically quantised variant (MatMul and Gather weights, one scale per output channel)
    of src to dst. Per-channel scales matter for the tied 49k-row output head: on the small model, per-tensor
    int8 agreed with fp32 on the top-1 token in 0.42 of the parity probes, per-channel in 0.75 (same probes).
    7-bit weights (reduce_range), right on every x86 CPU (add_int8); write_manifest states them."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gather"],
                     per_channel=True, reduce_range=True)


# The MatMuls left in fp32 by quantize_weights: the MLP's down projection reads SiLU(gate) x up, whose few very
# large activations leave one per-tensor int8 scale no resolution for the rest (b3, 4 golden prompts, 982
# positions: next-token agreement with fp32 0.60 with every weight MatMul in int8, 0.81 with down_proj kept).
KEEP_FP32 = ("down_proj",)


HEAD_NODE = "/MatMul"  # the tied output head: MatMul(embedding, Transpose(hidden)), then Transpose to logits


def untie_head(model) -> bool:
    """Rewrites model's tied output head, MatMul(embed_tokens.weight, hidden^T) between two Transposes, as
    MatMul(hidden, W) with W a constant copy of the embedding transposed (576 x vocab), so that the head is a weight
    MatMul that quantize_weights can make int8 (one scale per vocabulary row); the embedding's Gather keeps the
    original. The logits are the same numbers. Returns False when the graph has no such head."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    by_out = {o: n for n in g.node for o in n.output}
    head = next((n for n in g.node if n.name == HEAD_NODE and n.op_type == "MatMul"), None)
    if head is None:
        return False
    users = [n for n in g.node if head.output[0] in n.input]
    pre, post = by_out.get(head.input[1]), users[0] if len(users) == 1 else None
    emb = next((i for i in g.initializer if i.name == head.input[0]), None)
    if pre is None or post is None or emb is None or pre.op_type != "Transpose" or post.op_type != "Transpose":
        return False
    if sum(pre.output[0] in n.input for n in g.node) != 1:
        return False  # the transposed hidden state feeds something else too: leave the graph as it is
    w = numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(emb).T), "lm_head.weight_t")
    g.initializer.append(w)
    node = onnx.helper.make_node("MatMul", [pre.input[0], w.name], [post.output[0]], name="/lm_head/MatMul")
    at = list(g.node).index(pre)  # where the hidden state is ready
    for n in (pre, head, post):
        g.node.remove(n)
    g.node.insert(at, node)
    return True


def quantize_weights(src: str, dst: str, keep: tuple[str, ...] = KEEP_FP32, head: bool = False,
                     reduce_range: bool = False) -> list[str]:
    """Writes src with its weight MatMuls (constant right operand) int8, one scale per output channel, and the
    activations quantised per Run (ONNX Runtime's dynamic quantisation: MatMulInteger, VNNI on x86); a MatMul
    whose node name contains one of keep and the attention's activation products stay fp32. The tied output head
    (the embedding is its left operand) stays fp32 unless head, which makes it a weight MatMul first (untie_head:
    the largest single read of a short Run, 113 MB in fp32 for the 135M model, 28 MB in int8). reduce_range: the
    weights in [-64, 64] (7 bits), which x86 CPUs without VNNI multiply without saturating (add_int8). Returns the
    names of the MatMuls made int8. One file (the int8 graph is about 300 MB for the 135M model, 330 MB with the head,
    within protobuf's 2 GB).

    Its working copies (the untied graph, and the shape-inferred copy that ONNX Runtime writes beside its input and
    reads back) go in a folder beside dst, not in the system's temporary folder: where that was short of space, onnx's
    shape inference wrote a truncated copy without an error and the read-back failed with protobuf's bare "Wire format
    was corrupt" (CI, models/b7; the same error here with TMPDIR on a 900 MB tmpfs). The free space is checked first
    (need_space)."""
    import tempfile

    import onnx
    from google.protobuf.message import DecodeError
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work = os.path.dirname(os.path.abspath(dst))
    need_space(work, os.path.getsize(src) * (3 if head else 2), f"making an int8 graph of {src}")
    with tempfile.TemporaryDirectory(dir=work, prefix=".int8-") as tmp:
        if head:
            m = onnx.load(src)
            if not untie_head(m):
                raise SystemExit(f"{src}: no tied output head ({HEAD_NODE} between two Transposes) to make int8")
            src = os.path.join(tmp, "untied.onnx")
            onnx.save(m, src)
            del m
        g = onnx.load(src, load_external_data=False).graph
        consts = {i.name for i in g.initializer}
        weights = [n.name for n in g.node if n.op_type == "MatMul" and n.input[1] in consts]
        kept = [n for n in weights if any(k in n for k in keep)]
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True, reduce_range=reduce_range,
                             op_types_to_quantize=["MatMul"], nodes_to_exclude=kept,
                             extra_options={"MatMulConstBOnly": True})
        except DecodeError as e:  # a copy written short: say where and how much room there was
            free = shutil.disk_usage(work).free
            raise SystemExit(f"{dst}: ONNX Runtime could not read back its shape-inferred copy of {src} ({e}); "
                             f"{work} has {free / 1e6:.0f} MB free, a short write is the usual cause") from e
    return [n for n in weights if n not in kept]


def need_space(folder: str, need: int, what: str) -> None:
    """Stops with an error naming folder, what it is for and both sizes when folder's file system has less than
    need bytes free."""
    free = shutil.disk_usage(folder).free
    if free < need:
        raise SystemExit(f"{folder}: {free / 1e6:.0f} MB free; {what} needs about {need / 1e6:.0f} MB there "
                         "(its working copies and the int8 file)")


def add_int8(model_dir: str, keep: tuple[str, ...] = KEEP_FP32, head: bool = False, weight_bits: int = 7) -> dict:
    """Writes model_dir/model.int8.onnx from model_dir's fp32 graph (quantize_weights) and names it the
    manifest's onnx_quantized (served with model.quantized: true), with int8_weight_bits. weight_bits 7 (ONNX
    Runtime's reduce_range) is right on every x86 CPU; 8 only where the CPU has VNNI: without it ONNX Runtime's
    u8 x s8 kernels add pairs of products into 16 bits and saturate (on an AVX2 host models/r24a's 8-bit file
    agreed with fp32 on 0.24 of next tokens over nq_qed text, its 7-bit file on 0.86), and the Go loader refuses
    such a file there. Returns what it did."""
    if weight_bits not in (7, 8):
        raise SystemExit(f"weight_bits must be 7 or 8, got {weight_bits}")
    path = os.path.join(model_dir, "manifest.json")
    if not os.path.exists(path):
        raise SystemExit(f"{model_dir}: no manifest.json (not a model directory)")
    m = json.load(open(path, encoding="utf-8"))
    src = os.path.join(model_dir, m["onnx"])
    if not os.path.exists(src):
        raise SystemExit(f"{model_dir}: manifest field onnx names {m['onnx']}, which does not exist "
                         "(a delta-built model: run scripts/model.sh or python -m icicle.delta build first)")
    if m["onnx"] == "model.int8.onnx":
        raise SystemExit(f"{model_dir}: manifest field onnx is already the int8 file")
    dst = os.path.join(model_dir, "model.int8.onnx")
    tmp = dst + ".tmp"
    quantized = quantize_weights(src, tmp, keep, head, reduce_range=weight_bits == 7)
    os.replace(tmp, dst)
    m["onnx_quantized"] = "model.int8.onnx"
    m["int8_weight_bits"] = weight_bits
    if head:  # the Go manifest's int8_head: the tied output head is int8 too
        m["int8_head"] = True
    else:
        m.pop("int8_head", None)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(m, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return {"file": dst, "bytes": os.path.getsize(dst), "int8_matmuls": len(quantized), "kept_fp32": list(keep),
            "int8_head": head, "int8_weight_bits": weight_bits}


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m icicle.int8", description=__doc__.splitlines()[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    print(json.dumps(add_int8(a.model, tuple(a.keep), a.head, a.weight_bits)))


def add_arguments(p) -> None:
    """The int8 command's flags (here and in ``python -m icicle.export int8``)."""
    p.add_argument("--model", required=True, help="model directory with manifest.json and its fp32 graph")
    p.add_argument("--keep", nargs="*", default=list(KEEP_FP32),
                   help=f"MatMuls whose node name contains one of these stay fp32 (default {' '.join(KEEP_FP32)})")
    p.add_argument("--head", action="store_true",
                   help="the tied output head in int8 too (untie_head; its effect on the scores is the model's to measure)")
    p.add_argument("--weight-bits", type=int, choices=(7, 8), default=7,
                   help="7 (default) is right on every x86 CPU; 8 saturates on CPUs without VNNI (add_int8)")


if __name__ == "__main__":
    main()
