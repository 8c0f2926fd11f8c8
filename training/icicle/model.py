"""A small Llama-style decoder in plain PyTorch (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings).

``Decoder.step`` is exactly the ONNX contract of inference/MODEL_FORMAT.md (batch 1, tree attention via an
additive mask, KV cache in layout [1, past, kv_heads, head_dim], logits only at logits_index, present = the
new tokens' keys/values only). ``Decoder.train_logits`` is the ordinary causal forward used for training
(batched, logits only at the answer positions, so the vocab projection is not paid for prompt tokens).
Parameter names and the rotate-half RoPE follow HF LlamaForCausalLM so its weights can be loaded later
(``load_hf_llama_state_dict``; the `small` config).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

MASKED = -1e9  # the additive mask value of the contract


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 49153
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate: int = 172
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_context_tokens: int = 4096
    qk_norm: bool = False  # per-head RMSNorm on q and k before RoPE (Qwen3)

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_eps)

    def forward(self, x, cos, sin, mask, past_k, past_v, scale=None):
        # x [B,n,H]; cos/sin [B,n,hd]; mask additive [B,n,past+n]; past_* [B,past,kvh,hd]; scale [B,n] or None: each
        # row's attention logits times it (Decoder.set_length_ref)
        c = self.c
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, c.heads, c.head_dim)
        k = self.k_proj(x).view(b, n, c.kv_heads, c.head_dim)
        v = self.v_proj(x).view(b, n, c.kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        cs, sn = cos.unsqueeze(2), sin.unsqueeze(2)
        q = q * cs + _rotate_half(q) * sn
        k = k * cs + _rotate_half(k) * sn
        rep = c.heads // c.kv_heads
        if mask is None or mask.dtype == torch.bool:  # training: no past
            qh = q.transpose(1, 2)  # [B,h,n,hd]
            kh = k.transpose(1, 2).repeat_interleave(rep, dim=1)  # [B,h,n,hd]
            vh = v.transpose(1, 2).repeat_interleave(rep, dim=1)
            if mask is None:  # plain causal attention, fused (identical maths, see train_logits)
                o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
            else:  # under a block layout: [B,1,T,T], True attends (decode.block_attention)
                o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
            o = o.transpose(1, 2).reshape(b, n, c.heads * c.head_dim)
            return self.o_proj(o), k, v
        # The step (and the ONNX graph): query heads are grouped by the key/value head they share (head h reads kv
        # head h // rep), so the keys and values are never repeated per query head: with a long cached past
        # (block reading's stored blocks) each Run then moves the past about three times less.
        kk = torch.cat([past_k, k], dim=1).permute(0, 2, 3, 1)  # [B,kvh,hd,past+n]
        vv = torch.cat([past_v, v], dim=1).transpose(1, 2)  # [B,kvh,past+n,hd]
        m = kk.shape[-1]
        qg = q.view(b, n, c.kv_heads, rep, c.head_dim).permute(0, 2, 3, 1, 4).reshape(b, c.kv_heads, rep * n, c.head_dim)
        att = torch.matmul(qg, kk) / math.sqrt(c.head_dim)  # [B,kvh,rep*n,past+n]
        att = att.view(b, c.kv_heads, rep, n, m)
        if scale is not None:
            att = att * scale.view(b, 1, 1, n, 1)
        att = att + mask.view(b, 1, 1, n, m)
        w = torch.softmax(att, dim=-1).view(b, c.kv_heads, rep * n, m)
        o = torch.matmul(w, vv)  # [B,kvh,rep*n,hd]
        o = o.view(b, c.kv_heads, rep, n, c.head_dim).permute(0, 3, 1, 2, 4).reshape(b, n, c.heads * c.head_dim)
        return self.o_proj(o), k, v


class MLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask, past_k, past_v, scale=None):
        a, k, v = self.self_attn(self.input_layernorm(x), cos, sin, mask, past_k, past_v, scale)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, k, v


class Decoder(nn.Module):
    """The ICICLE decoder; see the module doc for its two forwards."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        if c.heads % c.kv_heads or c.head_dim % 2:
            raise ValueError(f"bad config {c}: heads % kv_heads and head_dim % 2 must be 0")
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.rms_eps)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.length_ref = 0.0  # issue 26: set_length_ref; 0 = the step's attention unscaled
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def _rope(self, position_ids: torch.Tensor):
        f = position_ids.to(torch.float32).unsqueeze(-1) * self.inv_freq  # [B,n,hd/2]
        e = torch.cat([f, f], dim=-1)
        return e.cos(), e.sin()

    def _hidden(self, input_ids, position_ids, mask, past, scale=None):
        x = self.embed_tokens(input_ids)
        cos, sin = self._rope(position_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, mask, past[2 * i], past[2 * i + 1], scale)
            presents += [k, v]
        return self.norm(x), presents

    def _lm_head(self, h: torch.Tensor) -> torch.Tensor:
        # (W @ h^T)^T rather than h @ W^T: in ONNX the tied weight then feeds MatMul as-is, so the file holds
        # one copy of the embedding (constant folding would otherwise store a transposed second copy).
        return torch.matmul(self.embed_tokens.weight, h.transpose(-1, -2)).transpose(-1, -2)

    def step(self, input_ids, position_ids, attention_mask, logits_index, *past):
        """One contract step: returns (logits [1,m,V], present.0.key, present.0.value, ...)."""
        scale = None
        if self.length_ref:
            # a row that sees more positions than training showed attends as sharply as one that saw ref
            # (log-length scaling): its logits times ln(visible) / ln(ref), never below 1; once for every layer
            seen = (attention_mask > -1e8).sum(-1, dtype=torch.float32)  # [B,n] positions the row may attend to
            scale = torch.clamp(torch.log(seen) / math.log(self.length_ref), min=1.0)
        h, presents = self._hidden(input_ids, position_ids, attention_mask, list(past), scale)
        h = torch.index_select(h, 1, logits_index)
        return (self._lm_head(h), *presents)

    forward = step

    def set_length_ref(self, ref: float) -> None:
        """Issue 26: the step's attention scales each row's logits by max(1, ln(visible) / ln(ref)), visible the
        positions its mask lets it see, so that a row reading far more cached positions than the model was trained
        with (100 candidate blocks against 20) keeps training's sharpness; rows that see ref positions or fewer (a
        stored block's, a short prompt's) are unchanged. 0 turns it off. Training's forward ignores it."""
        if ref and ref <= 1:
            raise ValueError(f"length ref {ref}: want more than 1 position (or 0: off)")
        self.length_ref = float(ref)

    def empty_past(self, batch: int = 1) -> list[torch.Tensor]:
        z = torch.zeros(batch, 0, self.c.kv_heads, self.c.head_dim, device=self.embed_tokens.weight.device)
        return [z, z] * self.c.layers

    def train_logits(self, input_ids, pad_mask, gather_b, gather_t, out_vocab=None, layout=None):
        """Causal training forward on a right-padded batch [B,T]; pad_mask [B,T] bool (True = real token).

        Returns logits [k, V] at the k positions (gather_b[j], gather_t[j]) (the positions that predict the
        answer tokens); with out_vocab (a 1-D id tensor) only those columns, [k, len(out_vocab)]. layout: block
        reading's (attend [B,T,T] bool, positions [B,T]) from block_attention, instead of causal attention at
        positions 0..T-1."""
        b, t = input_ids.shape
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0).expand(b, t)
        # The batch is right-padded, so under a causal mask no real token ever sees a pad: the pad mask only
        # changes rows at pad positions, which are never gathered. mask=None selects the fused causal kernel.
        if not bool(pad_mask[:, 1:].le(pad_mask[:, :-1]).all()):
            raise ValueError("train_logits: pad_mask must be right padding (True then False per row)")
        mask = None
        if layout is not None:
            mask, pos = layout[0].unsqueeze(1), layout[1]
        h, _ = self._hidden(input_ids, pos, mask, self.empty_past(b))
        h = h[gather_b, gather_t]
        if out_vocab is None:
            return self._lm_head(h)
        return torch.matmul(h, self.embed_tokens.weight[out_vocab].t())


def causal_mask(past: int, n: int) -> torch.Tensor:
    """Returns the additive [1,n,past+n] mask of a plain causal chunk after `past` cached tokens."""
    m = torch.zeros(1, n, past + n)
    m[0, :, past:] = torch.full((n, n), MASKED).triu(1)
    return m


def load_hf_llama_state_dict(model: Decoder, sd: dict) -> None:
    """Loads a HF LlamaForCausalLM state dict (keys model.* / lm_head.weight) into model (tied embeddings)."""
    out = {}
    for k, v in sd.items():
        if k == "lm_head.weight":
            continue
        out[k.removeprefix("model.")] = v
    missing, unexpected = model.load_state_dict(out, strict=False)
    if unexpected or [m for m in missing if m != "inv_freq"]:
        raise ValueError(f"HF llama state dict mismatch: missing={missing} unexpected={unexpected}")
