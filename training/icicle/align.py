"""Stages 2 and 3 of the recipe: DPO routing/ranking calibration and title-only LoRA context adaptation.

    python -m icicle.fixtures --config tiny --out DIR                  # runs every stage, 0 to 3
    python -m icicle.fixtures --config tiny --out DIR --from stage1    # reuses WORK/stage1.pt, runs 2 and 3

Stage 2 (paper Section 3.2, Appendix B.2). Preference pairs are mined with the same routed, trie-constrained
beam search the sidecar runs (decode.decode, width `mine_beam`), on fresh 3-shot instances of the training
queries:
- routing failure: a context-dependent instance (gold in context) whose top beam is not a copy of the gold;
  y+ = [COPY] + gold, y- = the best parametric (context-blind) beam that is not the gold;
- ranking failure: the gold is among the top beams but not first (either route); y+ = the gold on its
  route, y- = the top beam.
Loss: the DPO objective with beta, the reference being the frozen stage-1 model. Reference log-probabilities
are computed once before training (the reference never changes), so one model is held in memory.
Sequence log-probabilities are sums of answer-token log-probs under the same restricted output softmax as
SFT (train.docid_vocab), which is the distribution constrained decoding renormalises.

Stage 3 (Section 3.3, Appendix C). The backbone is frozen; LoRA adapters (rank r, alpha, dropout) on the
attention and MLP projections are trained on title-only prompts with K candidates (K drawn from
`k_choices`), context-dependent and all-noise instances in equal numbers, drawn once (a fixed set, as the
paper's epochs), with the ICL loss. The adapters
are merged into the weights afterwards (``merge_lora``), so export sees a plain Decoder.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from .configs import TrainConfig
from .decode import CachedPromptScorer, Trie, decode, torch_step
from .device import autocast, model_device
from .model import Decoder
from .negatives import NegativeSampler
from .tokenizer import Tok
from .train import Corpus, Instance, _batch, icl_instance, sft

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Pair:
    prompt: list[int]
    chosen: list[int]
    rejected: list[int]
    kind: str  # "routing" | "ranking"


def _answer(tok: Tok, docid: str, route: str) -> list[int]:
    ids = tok.docid(docid)
    return [tok.copy_id] + ids if route == "copy" else ids


def mine_pairs(model: Decoder, tok: Tok, cfg: TrainConfig, corpus: Corpus, negs: NegativeSampler,
               global_trie: Trie, rng: random.Random, beam: int, max_pairs: int) -> tuple[list[Pair], dict]:
    """Mines DPO pairs from the training queries (seen corpus and the copy pool); returns them and counts."""
    step = torch_step(model)
    empty = [p.cpu().numpy() for p in model.empty_past()]
    queries = list(corpus.train_queries) + list(corpus.copy_queries)
    rng.shuffle(queries)
    seen = set(corpus.seen)
    pairs: list[Pair] = []
    stats = {"instances": 0, "top1_correct": 0, "routing": 0, "ranking": 0}
    for q in queries:
        if len(pairs) >= max_pairs:
            break
        # context-dependent for every query; all-noise only where the gold is memorised (seen)
        for with_gold in (True, False) if q.docid in seen else (True,):
            inst, titles = icl_instance(tok, cfg, q, corpus.docs, negs, rng, with_gold)
            if with_gold and q.docid not in titles:
                continue  # cut by the prompt budget: no context-dependent label
            ctx = Trie.build(titles, tok.encode, tok.end_id)
            res = decode(CachedPromptScorer(step, inst.prompt, empty), global_trie, ctx, tok.copy_id, tok.end_id,
                         beam)
            stats["instances"] += 1
            gold_route = "copy" if with_gold else "parametric"
            top = res.beams[0]
            if top.docid == q.docid and top.route == gold_route:
                stats["top1_correct"] += 1
                continue
            chosen = _answer(tok, q.docid, gold_route)
            if with_gold and top.route != "copy":
                blind = next((b for b in res.beams if b.route != "copy" and b.docid != q.docid), top)
                pairs.append(Pair(inst.prompt, chosen, _answer(tok, blind.docid, blind.route), "routing"))
                stats["routing"] += 1
            elif any(b.docid == q.docid and b.route == gold_route for b in res.beams):
                pairs.append(Pair(inst.prompt, chosen, _answer(tok, top.docid, top.route), "ranking"))
                stats["ranking"] += 1
    stats["pairs"] = len(pairs)
    return pairs, stats


def seq_logps(model: Decoder, insts: list[Instance], out_vocab: torch.Tensor) -> torch.Tensor:
    """Sum of answer-token log-probs per instance under the restricted output softmax; [len(insts)]."""
    dev = model_device(model)
    ids, pad, gb, gt, tgt = (x.to(dev) for x in _batch(insts))
    out_vocab = out_vocab.to(dev)
    logits = model.train_logits(ids, pad, gb, gt, out_vocab).float()
    lp = torch.log_softmax(logits, -1).gather(1, torch.searchsorted(out_vocab, tgt).unsqueeze(1)).squeeze(1)
    return torch.zeros(len(insts), dtype=lp.dtype, device=dev).index_add(0, gb, lp)


def _pair_insts(pairs: list[Pair]) -> list[Instance]:
    return [Instance(p.prompt, p.chosen) for p in pairs] + [Instance(p.prompt, p.rejected) for p in pairs]


def dpo_margins(model: Decoder, pairs: list[Pair], out_vocab: torch.Tensor, batch: int = 16) -> torch.Tensor:
    """log pi(y+) - log pi(y-) per pair (no grad)."""
    out = []
    with torch.no_grad():
        for i in range(0, len(pairs), batch):
            lp = seq_logps(model, _pair_insts(pairs[i: i + batch]), out_vocab)
            n = len(lp) // 2
            out.append(lp[:n] - lp[n:])
    return torch.cat(out) if out else torch.zeros(0, device=model_device(model))


def run_stage2(model: Decoder, pairs: list[Pair], out_vocab: torch.Tensor, cfg: TrainConfig, log=print) -> dict:
    """DPO on pairs against the frozen current weights as reference. Returns losses and pair accuracies."""
    dc = cfg.stage2
    ref = dpo_margins(model, pairs, out_vocab)  # reference log-ratio per pair, fixed
    rng = random.Random(cfg.seed + 2)
    order = list(range(len(pairs)))
    total = dc.epochs * math.ceil(len(pairs) / dc.batch)
    warm = max(1, int(dc.warmup * total))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=dc.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    losses: list[float] = []
    model.train()
    t0 = time.time()
    for e in range(dc.epochs):
        rng.shuffle(order)
        for i in range(0, len(order), dc.batch):
            idx = order[i: i + dc.batch]
            bp = [pairs[j] for j in idx]
            with autocast(model_device(model), cfg.bf16):
                lp = seq_logps(model, _pair_insts(bp), out_vocab)
            n = len(bp)
            logits = cfg.dpo_beta * ((lp[:n] - lp[n:]) - ref[torch.tensor(idx, device=ref.device)])
            loss = -F.logsigmoid(logits).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        n = math.ceil(len(pairs) / dc.batch)
        log(f"stage2 epoch {e + 1}/{dc.epochs} dpo loss {sum(losses[-n:]) / max(1, n):.4f} ({time.time() - t0:.0f}s)")
    model.eval()
    after = dpo_margins(model, pairs, out_vocab)
    return {"losses": losses, "pair_acc_before": float((ref > 0).float().mean()) if len(ref) else 0.0,
            "pair_acc_after": float((after > 0).float().mean()) if len(after) else 0.0,
            "margin_before": float(ref.mean()) if len(ref) else 0.0,
            "margin_after": float(after.mean()) if len(after) else 0.0}


class LoRALinear(nn.Module):
    """y = base(x) + (alpha/r) * B(A(dropout(x))); base frozen, B starts at zero (so the wrapped model is
    initially identical)."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        dev = base.weight.device
        self.a = nn.Parameter(torch.empty(r, base.in_features, device=dev))
        self.b = nn.Parameter(torch.zeros(base.out_features, r, device=dev))
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        self.scale = alpha / r
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (self.drop(x) @ self.a.t() @ self.b.t()) * self.scale

    def merged(self) -> nn.Linear:
        lin = nn.Linear(self.base.in_features, self.base.out_features, bias=False, device=self.base.weight.device)
        with torch.no_grad():
            lin.weight.copy_(self.base.weight + self.scale * (self.b @ self.a))
        return lin


def add_lora(model: Decoder, r: int, alpha: float, dropout: float) -> int:
    """Freezes every parameter and wraps LORA_TARGETS in LoRALinear; returns the trainable parameter count."""
    for p in model.parameters():
        p.requires_grad_(False)
    for mod in list(model.modules()):
        for name in LORA_TARGETS:
            child = getattr(mod, name, None)
            if isinstance(child, nn.Linear):
                setattr(mod, name, LoRALinear(child, r, alpha, dropout))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def merge_lora(model: Decoder) -> None:
    """Replaces every LoRALinear by its merged nn.Linear and unfreezes the model."""
    for mod in list(model.modules()):
        for name in LORA_TARGETS:
            child = getattr(mod, name, None)
            if isinstance(child, LoRALinear):
                setattr(mod, name, child.merged())
    for p in model.parameters():
        p.requires_grad_(True)


def title_only_instances(tok: Tok, cfg: TrainConfig, corpus: Corpus, negs: NegativeSampler,
                         rng: random.Random, n: int) -> list[Instance]:
    """n title-only instances with K from cfg.k_choices: half context-dependent (any training query), half
    all-noise (seen-corpus queries, answered from memory)."""
    out = []
    pool = list(corpus.train_queries) + list(corpus.copy_queries)
    while len(out) < n:
        k = rng.choice(cfg.k_choices)
        kc = replace(cfg, shots=k, context_n=(k,), max_prompt_tokens=cfg.model.max_context_tokens)
        with_gold = len(out) % 2 == 0
        q = rng.choice(pool if with_gold else corpus.train_queries)
        inst, titles = icl_instance(tok, kc, q, corpus.docs, negs, rng, with_gold, title_only=True)
        if with_gold and q.docid not in titles:
            continue  # the budget cut the gold off: no context-dependent label
        out.append(inst)
    return out


def run_stage3(model: Decoder, tok: Tok, cfg: TrainConfig, corpus: Corpus, negs: NegativeSampler,
               out_vocab: torch.Tensor, log=print) -> tuple[list[float], int]:
    """LoRA title-only adaptation, merged at the end. Returns per-step losses and the trainable count."""
    trainable = add_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout)
    insts = title_only_instances(tok, cfg, corpus, negs, random.Random(cfg.seed * 7), cfg.stage3_instances)
    losses = sft(model, lambda e: insts, cfg.stage3, cfg.seed + 3, log, "stage3", out_vocab, cfg.bf16, cfg.micro_batch)
    merge_lora(model)
    return losses, trainable


def title_only_report(model: Decoder, tok: Tok, cfg: TrainConfig, split, corpus: Corpus, global_trie: Trie) -> dict:
    """Copy accuracy on held-out title-only instances at the largest K of k_choices (and the smallest): dev
    queries of never-trained documents, negatives from never-trained documents; chance = 1/K."""
    from .negatives import RandomNegatives
    from .train import eval_icl, heldout_queries, unseen_pool

    negs = RandomNegatives(unseen_pool(split, corpus))
    out = {}
    for k in sorted({min(cfg.k_choices), max(cfg.k_choices)}):
        kc = replace(cfg, shots=k, max_prompt_tokens=cfg.model.max_context_tokens)
        out[f"k{k}"] = eval_icl(model, tok, kc, heldout_queries(split, corpus), split.docs, negs, global_trie,
                                min(cfg.eval_instances, 100), seed=11, title_only=True)
    return out
