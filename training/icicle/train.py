"""Training stages 0 and 1 (SFT). Stage 0: indexing SFT; stage 1: ICL SFT with [COPY]. Stages 2 (DPO) and 3
(title-only LoRA) are in align.py; one command per stage is stages.py, all of them in order fixtures.py.

An instance is (prompt ids, answer ids); the loss is the mean cross-entropy over answer tokens only.
- Stage 0 (indexing): doc -> title with prompt INDEX_TEMPLATE over the first `index_text_tokens` of the text,
  and query -> title with the ICL prompt and no candidates; answer = docid tokens (title + [end]).
- Stage 1 (ICL): per train query one context-dependent instance (gold at a uniformly random position among
  n-1 negatives, answer [COPY] + docid tokens) and one query-irrelevant instance (n negatives, answer docid
  tokens), n = `shots`, plus indexing anchors (`anchor_ratio` of the ICL count). Negatives from
  negatives.py; instances are redrawn every epoch. With `copy_pool_queries` > 0 (tiny), that many extra
  context-dependent instances per epoch come from train queries of D_train documents outside the seen
  subset: a tiny model otherwise learns to "copy" the title it memorised instead of reading the context
  (never D_new documents).
"""
from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F

from . import metrics
from .compress import cached_extractive as _extractive
from .configs import StageConfig, TrainConfig
from .contexts import BM25Contexts, draw_n
from .data import Doc, Query, Split
from .decode import CachedPromptScorer, Trie, decode, torch_step
from .device import autocast, micro_batches, model_device
from .model import Decoder
from .negatives import NegativeSampler, RandomNegatives
from .prompt import Candidate, build_prompt
from .serve_eval import serve_table
from .tokenizer import Tok

INDEX_TEMPLATE = "Document: {text}\nTitle:\n"


@dataclass
class Instance:
    prompt: list[int]
    answer: list[int]
    # Per answer token, the ids decoding could choose there (the children of the prompt's candidate trie on the
    # gold's path), or None at a position where the whole output vocabulary competes (the route token). Set for
    # context-dependent instances; read by choice_loss_on.
    choices: list[list[int] | None] | None = None
    # The prompt's segments (prompt.Prompt.segments) when the instance is read by blocks (reader.py --blocks);
    # None reads it causally.
    segments: list[int] | None = None


def copy_choices(seqs: list[list[int]], gold: int) -> list[list[int] | None]:
    """The choices of a [COPY] answer: None for the route token, then at each of the gold's docid tokens (title
    tokens and end) the distinct next tokens of the candidates whose docid so far shares the gold's prefix.
    seqs[i] = candidate i's docid ids (Tok.docid); gold = the gold's index."""
    g = seqs[gold]
    out: list[list[int] | None] = [None]
    live = list(range(len(seqs)))
    for j, t in enumerate(g):
        out.append(sorted({seqs[i][j] for i in live if len(seqs[i]) > j}))
        live = [i for i in live if len(seqs[i]) > j and seqs[i][j] == t]
    return out


@dataclass
class Corpus:
    """What the stages train on: the seen docs (subset of D_train) and their train queries; copy_queries are
    train queries of the other D_train docs, used only as context-dependent stage-1 instances."""

    seen: list[str]
    train_queries: list[Query]
    docs: dict[str, Doc]
    copy_queries: list[Query] = field(default_factory=list)


def select_corpus(split: Split, cfg: TrainConfig) -> Corpus:
    """Picks the seen corpus: D_train docs that have train queries, the first n_seen_docs in sha256(docid)
    order (a spread-out sample; docid order would take only titles starting with digits)."""
    with_q = sorted({q.docid for q in split.train}, key=lambda d: hashlib.sha256(d.encode("utf-8")).hexdigest())
    seen = with_q if cfg.n_seen_docs <= 0 else with_q[: cfg.n_seen_docs]
    s = set(seen)
    others = [q for q in split.train if q.docid not in s]
    return Corpus(seen, [q for q in split.train if q.docid in s], split.docs, others)


def summary_of(tok: Tok, doc: Doc) -> str:
    """The stored summary the sidecar's index holds: the shared extractive compressor (first 120 words, the
    same function as Go's internal/compress.Extractive); the prompt builder then cuts it in tokens. (The models
    trained before 2026-11-22 used the raw text here; the first 32 tokens of both rarely differ.)"""
    return _extractive(doc.text)


def index_instances(tok: Tok, corpus: Corpus, cfg: TrainConfig) -> list[Instance]:
    out = []
    for d in corpus.seen:
        text_ids = tok.encode(corpus.docs[d].text)[: cfg.index_text_tokens]
        pre, _, post = INDEX_TEMPLATE.partition("{text}")
        out.append(Instance(tok.encode(pre) + text_ids + tok.encode(post), tok.docid(d)))
    for q in corpus.train_queries:
        p = build_prompt(tok.encode, q.query, [], cfg.max_prompt_tokens, prompt_format=cfg.prompt_format)
        out.append(Instance(p.ids, tok.docid(q.docid)))
    return out


def candidate_prompt(tok: Tok, cfg: TrainConfig, query: str, titles: list[str], docs: dict[str, Doc],
                     title_only: bool = False, shown: Mapping[str, str] | None = None):
    """The prompt for query over the candidates titles (in that order) under the config's budget and cap; with
    shown, candidate t shows the title of document shown[t] above its own summary (retitled)."""
    shown = shown or {}
    cands = [Candidate(docs[shown.get(t, t)].title, summary_of(tok, docs[t])) for t in titles]
    return build_prompt(tok.encode, query, cands, cfg.max_prompt_tokens, max_summary_tokens=cfg.max_summary_tokens,
                        title_only=title_only, prompt_format=cfg.prompt_format)


def retitled(top: list[str], pool: Sequence[str], rng: random.Random) -> dict[str, str]:
    """TrainConfig.swap_titles: each candidate docid -> a distinct docid of the pool whose title it shows (and, for
    the gold, the answer). Title and summary then belong to different documents, so no query maps to its answer
    from memory: only reading which summary matches the query does (training/results/README.md, issue 16)."""
    return dict(zip(top, rng.sample(list(pool), len(top))))


def icl_instance(tok: Tok, cfg: TrainConfig, q: Query, docs: dict[str, Doc], negs: NegativeSampler,
                 rng: random.Random, with_gold: bool, title_only: bool = False,
                 title_pool: Sequence[str] = ()) -> tuple[Instance, list[str]]:
    """Builds one context-dependent (with_gold) or query-irrelevant instance; returns it and its titles.

    negs is a NegativeSampler (cfg.shots candidates, the gold at a random position) or BM25Contexts (a
    context size drawn from cfg.context_n, candidates in BM25 order; contexts.py). With cfg.swap_titles > 0 and
    a title_pool (D_train docids), that share of context-dependent instances is retitled: the returned titles are
    then the shown ones, and the answer is [COPY] + the title shown above the gold's summary."""
    if isinstance(negs, BM25Contexts):
        titles = negs.context(q, draw_n(cfg.context_n, rng), with_gold)
    else:
        k = cfg.shots - 1 if with_gold else cfg.shots
        titles = negs.sample(q.docid, k, rng)
        if with_gold:
            titles.insert(rng.randrange(cfg.shots), q.docid)
    shown: dict[str, str] = {}
    if with_gold and title_pool and cfg.swap_titles > 0 and rng.random() < cfg.swap_titles:
        shown = retitled(titles, title_pool, rng)

    p = candidate_prompt(tok, cfg, q.query, titles, docs, title_only, shown)
    if with_gold and 0 < p.included < len(titles) and q.docid not in titles[: p.included]:
        # the budget cut the gold off: it takes the last place that fits (the answer must be copyable)
        titles = titles[: p.included - 1] + [q.docid]
        p = candidate_prompt(tok, cfg, q.query, titles, docs, title_only, shown)
    titles = titles[: p.included]
    ans = tok.docid(shown.get(q.docid, q.docid))
    if with_gold and q.docid in titles:
        ans = [tok.copy_id] + ans
    return Instance(p.ids, ans), [shown.get(t, t) for t in titles]


def stage1_instances(tok: Tok, corpus: Corpus, cfg: TrainConfig, negs: NegativeSampler, rng: random.Random,
                     anchors: list[Instance], copy_negs: NegativeSampler | None = None) -> list[Instance]:
    out = []
    pool = sorted({q.docid for q in corpus.train_queries + corpus.copy_queries}) if cfg.swap_titles > 0 else ()
    for q in corpus.train_queries:
        out.append(icl_instance(tok, cfg, q, corpus.docs, negs, rng, True, title_pool=pool)[0])
        out.append(icl_instance(tok, cfg, q, corpus.docs, negs, rng, False)[0])
    extra = min(cfg.copy_pool_queries, len(corpus.copy_queries))
    if extra:
        # negatives from the same unmemorised pool, so "pick the title I don't know" is no shortcut
        copy_negs = copy_negs or RandomNegatives(sorted({q.docid for q in corpus.copy_queries}))
    for q in rng.sample(corpus.copy_queries, extra):
        out.append(icl_instance(tok, cfg, q, corpus.docs, copy_negs, rng, True, title_pool=pool)[0])
    n_anchor = min(len(anchors), int(round(cfg.anchor_ratio * len(out))))
    out += rng.sample(anchors, n_anchor)
    return out


def _batch(insts: list[Instance]):
    seqs = [i.prompt + i.answer for i in insts]
    t = max(len(s) for s in seqs) - 1
    ids = torch.zeros(len(seqs), t, dtype=torch.int64)
    pad = torch.zeros(len(seqs), t, dtype=torch.bool)
    gb, gt, tgt = [], [], []
    for b, (s, inst) in enumerate(zip(seqs, insts)):
        x = s[:-1]
        ids[b, : len(x)] = torch.tensor(x)
        pad[b, : len(x)] = True
        start = len(inst.prompt) - 1
        for j in range(len(inst.answer)):
            gb.append(b)
            gt.append(start + j)
            tgt.append(inst.answer[j])
    return ids, pad, torch.tensor(gb), torch.tensor(gt), torch.tensor(tgt)


def loss_on(model: Decoder, insts: list[Instance], out_vocab: torch.Tensor | None = None,
            reduction: str = "mean") -> torch.Tensor:
    """Returns the mean (or, reduction="sum", summed) answer-token cross-entropy of insts under model, on the
    model's device; with out_vocab (sorted ids that must contain every answer token) the softmax runs over those
    ids only."""
    dev = model_device(model)
    ids, pad, gb, gt, tgt = (x.to(dev) for x in _batch(insts))
    if out_vocab is not None:
        out_vocab = out_vocab.to(dev)
        tgt = torch.searchsorted(out_vocab, tgt)
    return F.cross_entropy(model.train_logits(ids, pad, gb, gt, out_vocab).float(), tgt, reduction=reduction)


def choice_loss_on(model: Decoder, insts: list[Instance], out_vocab: torch.Tensor,
                   full_weight: float = 0.0) -> torch.Tensor:
    """The decision loss: at each answer position with choices, the cross-entropy of the gold token among those
    choices only (what the trie decoder renormalises over; a position with one choice costs nothing), elsewhere
    over out_vocab; plus full_weight x the ordinary out_vocab loss_on. Returns the mean over answer positions."""
    dev = model_device(model)
    ids, pad, gb, gt, tgt = (x.to(dev) for x in _batch(insts))
    logits = model.train_logits(ids, pad, gb, gt, None).float()  # [k, V]
    allowed = torch.zeros_like(logits, dtype=torch.bool)
    ov = out_vocab.to(dev)
    row = 0
    for inst in insts:
        ch = inst.choices or [None] * len(inst.answer)
        for c in ch:
            if c is None:
                allowed[row, ov] = True
            else:
                allowed[row, torch.tensor(c, device=dev)] = True
            row += 1
    loss = F.cross_entropy(logits.masked_fill(~allowed, float("-inf")), tgt)
    if full_weight > 0:
        full = logits[:, ov]
        loss = loss + full_weight * F.cross_entropy(full, torch.searchsorted(ov, tgt))
    return loss


def accumulate_loss(model: Decoder, batch: list[Instance], out_vocab: torch.Tensor | None, micro: int,
                    bf16: bool) -> float:
    """Backpropagates the mean answer-token loss of batch in micro-batches of at most micro instances (gradient
    accumulation: each micro-batch's summed loss over the batch's answer-token count, so the gradient equals the
    whole batch's); returns the batch's mean loss. Autocast per device.autocast."""
    n_tok = sum(len(i.answer) for i in batch)
    dev = model_device(model)
    total = 0.0
    for mb in micro_batches(batch, micro):
        with autocast(dev, bf16):
            loss = loss_on(model, mb, out_vocab, reduction="sum") / n_tok
        loss.backward()
        total += loss.item()
    return total


def docid_vocab(tok: Tok, titles: list[str]) -> torch.Tensor:
    """The sorted ids that can appear in an answer: tokens of the given titles, [COPY] and the end token.

    Decoding only ever scores trie children (renormalised over the allowed set), so a softmax restricted to
    these ids trains what inference uses; `tiny` does this to fit its CPU budget (the 49k-row vocab
    projection dominates a step otherwise). Built from D_train titles only (no D_new leakage); a D_new title
    token outside it keeps its untrained logit."""
    ids = {tok.copy_id, tok.end_id}
    for t in titles:
        ids.update(tok.encode(t))
    return torch.tensor(sorted(ids), dtype=torch.int64)


def sft(model: Decoder, make_epoch, sc: StageConfig, seed: int, log=print, name: str = "sft",
        out_vocab: torch.Tensor | None = None, bf16: bool = False, micro: int = 0) -> list[float]:
    """Runs sc.epochs of SFT on the model's device; make_epoch(epoch) returns that epoch's instances; micro > 0
    splits each batch into micro-batches with gradient accumulation. Returns per-step losses."""
    rng = random.Random(seed)
    epochs = [make_epoch(e) for e in range(sc.epochs)] if sc.epochs else []
    total = sum(math.ceil(len(e) / sc.batch) for e in epochs)
    warm = max(1, int(sc.warmup * total))
    opt = torch.optim.AdamW(model.parameters(), lr=sc.lr, betas=(0.9, 0.95), weight_decay=sc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.1, 1 - (s - warm) / max(1, total - warm))))
    losses: list[float] = []
    model.train()
    t0 = time.time()
    for e, insts in enumerate(epochs):
        insts = list(insts)
        rng.shuffle(insts)
        # bucket by length inside windows of 8 batches to cut padding
        win = sc.batch * 8
        order = []
        for i in range(0, len(insts), win):
            order += sorted(insts[i: i + win], key=lambda x: len(x.prompt) + len(x.answer))
        batches = [order[i: i + sc.batch] for i in range(0, len(order), sc.batch)]
        rng.shuffle(batches)
        for bt in batches:
            opt.zero_grad(set_to_none=True)
            loss = accumulate_loss(model, bt, out_vocab, micro, bf16)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss)
            if len(losses) % 100 == 0:
                log(f"{name} step {len(losses)}/{total} loss(last 100) {sum(losses[-100:]) / 100:.4f} "
                    f"({time.time() - t0:.0f}s)")
        n = len(batches)
        log(f"{name} epoch {e + 1}/{sc.epochs} loss {sum(losses[-n:]) / n:.4f} ({time.time() - t0:.0f}s)")
    model.eval()
    return losses


def run_stage0(model: Decoder, tok: Tok, corpus: Corpus, cfg: TrainConfig, log=print,
               out_vocab: torch.Tensor | None = None) -> list[float]:
    insts = index_instances(tok, corpus, cfg)
    return sft(model, lambda e: insts, cfg.stage0, cfg.seed, log, "stage0", out_vocab, cfg.bf16, cfg.micro_batch)


def context_sampler(cfg: TrainConfig, split: Split, corpus: Corpus) -> NegativeSampler | BM25Contexts:
    """The config's source of in-context candidates for training instances (configs.TrainConfig.context)."""
    if cfg.context == "bm25":
        return BM25Contexts(split.d_train, split.docs)
    if cfg.context != "negatives":
        raise ValueError(f"config {cfg.name}: context must be 'negatives' or 'bm25', got {cfg.context!r}")
    return RandomNegatives(corpus.seen)


def copy_warmup(model: Decoder, tok: Tok, cfg: TrainConfig, split: Split, contexts: BM25Contexts,
                out_vocab: torch.Tensor | None, log=print) -> list[float]:
    """The copy warm-up (TrainConfig.copy_warmup_steps): context-dependent instances only, one per step per batch
    slot, from the train queries of all D_train documents (BM25 over D_train in BM25 order, as stage 1), with n
    drawn from copy_warmup_n[:k] where k grows from 1 to all over the steps; constant learning rate after a
    50-step ramp. Returns the per-step losses."""
    sc, steps, sizes = cfg.copy_warmup, cfg.copy_warmup_steps, cfg.copy_warmup_n
    rng = random.Random(cfg.seed + 7)
    queries = list(split.train)
    contexts.prefetch([q.query for q in queries])
    opt = torch.optim.AdamW(model.parameters(), lr=sc.lr, betas=(0.9, 0.95), weight_decay=sc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    losses: list[float] = []
    model.train()
    t0 = time.time()
    for step in range(steps):
        c = replace(cfg, context_n=widened(sizes, step / steps))
        bt = [icl_instance(tok, c, rng.choice(queries), split.docs, contexts, rng, True, title_pool=split.d_train)[0]
              for _ in range(sc.batch)]
        opt.zero_grad(set_to_none=True)
        losses.append(accumulate_loss(model, bt, out_vocab, cfg.micro_batch, cfg.bf16))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if len(losses) % 100 == 0:
            log(f"copy warm-up step {len(losses)}/{steps} n from {c.context_n} loss(last 100) "
                f"{sum(losses[-100:]) / 100:.4f} ({time.time() - t0:.0f}s)")
    model.eval()
    return losses


def widened(sizes: tuple[int, ...], frac: float) -> tuple[int, ...]:
    """The step-wise curriculum (copy warm-up, icicle.lab.experiment): at fraction frac of the run, the first
    1 + int(frac x len(sizes)) context sizes (the first one only at the start, all of them in the last share)."""
    return sizes[: 1 + int(frac * len(sizes))]


def curriculum_sizes(context_n: tuple[int, ...], epoch: int, epochs: int) -> tuple[int, ...]:
    """The context sizes stage-1 epoch `epoch` of `epochs` draws from under the curriculum: the first one only at
    epoch 0, one more choice every so often, all of them at the last epoch."""
    if epochs <= 1:
        return context_n
    k = 1 + round(epoch * (len(context_n) - 1) / (epochs - 1))
    return context_n[:k]


def run_stage1(model: Decoder, tok: Tok, corpus: Corpus, cfg: TrainConfig, negs: NegativeSampler | None = None,
               log=print, out_vocab: torch.Tensor | None = None, first_epoch: int = 0) -> list[float]:
    """Stage-1 SFT; first_epoch > 0 continues a finished run with fresh draws (epochs first_epoch, ...) and a
    fresh learning-rate schedule."""
    negs = negs or RandomNegatives(corpus.seen)
    anchors = index_instances(tok, corpus, cfg)
    if isinstance(negs, BM25Contexts):  # BM25 over D_train serves the copy pool too: no shortcut to avoid
        negs.prefetch([q.query for q in corpus.train_queries + corpus.copy_queries])
        copy_negs = negs
    else:
        copy_negs = RandomNegatives(sorted({q.docid for q in corpus.copy_queries})) if corpus.copy_queries else None
    def epoch(e: int) -> list[Instance]:
        c = cfg
        if cfg.curriculum:
            c = replace(cfg, context_n=curriculum_sizes(cfg.context_n, first_epoch + e, first_epoch + cfg.stage1.epochs))
        return stage1_instances(tok, corpus, c, negs, random.Random(cfg.seed * 1000 + first_epoch + e), anchors, copy_negs)

    return sft(model, epoch,
               cfg.stage1, cfg.seed + 1 + first_epoch, log, "stage1", out_vocab, cfg.bf16, cfg.micro_batch)


def new_tok(cfg: TrainConfig) -> Tok:
    """The config's tokenizer: the backbone directory's tokenizer.json (+[COPY]) for a local HF backbone, else
    SmolLM2's, rebuilt from the GGUF."""
    from .backbone import SMOLLM2, hf_dir_tokenizer
    from .tokenizer import build_tokenizer

    if cfg.backbone_source and cfg.backbone_source != SMOLLM2:
        return Tok(hf_dir_tokenizer(cfg.backbone_source))
    return Tok(build_tokenizer())


def report_start(cfg: TrainConfig, split: Split, corpus: Corpus, tok: Tok,
                 dev: torch.device) -> tuple[dict, torch.Tensor]:
    """What a train_report.json starts with, and the restricted output vocabulary (docid_vocab) on dev."""
    out_vocab = docid_vocab(tok, split.d_train).to(dev)
    report = {"config": cfg.name, "data_version": split.data_version, "seen_docs": len(corpus.seen),
              "train_queries": len(corpus.train_queries), "train_out_vocab": int(out_vocab.numel()),
              "device": str(dev), "prompt_format": cfg.prompt_format}
    if cfg.swap_titles:
        report["swap_titles"] = cfg.swap_titles
    return report, out_vocab


def new_model(cfg: TrainConfig, copy_id: int | None = None) -> Decoder:
    """The stage-0 starting point: the config's pretrained backbone slice, or a random init. copy_id: the
    [COPY] id, whose embedding row starts at the mean embedding for a HF backbone."""
    if cfg.backbone_source:
        from .backbone import load_backbone

        return load_backbone(cfg.model, cfg.backbone_source, list(cfg.backbone_keep) or None, copy_id)
    return Decoder(cfg.model)


def eval_icl(model: Decoder, tok: Tok, cfg: TrainConfig, queries: list[Query], docs: dict[str, Doc],
             negs: NegativeSampler, global_trie: Trie, n: int, seed: int = 123, title_only: bool = False) -> dict:
    """Held-out 3-shot context-dependent instances: copy_pick_acc = the gold has the best copy-route score
    among the candidates (chance 1/shots); route_copy_rate = share with p_copy > 0.5; mean_p_copy."""
    rng = random.Random(seed)
    qs = queries[:n]
    step = torch_step(model)
    empty = [p.cpu().numpy() for p in model.empty_past()]
    pick = route = 0
    pc = 0.0
    for q in qs:
        inst, titles = icl_instance(tok, cfg, q, docs, negs, rng, True, title_only)
        ctx = Trie.build(titles, tok.encode, tok.end_id)
        sc = CachedPromptScorer(step, inst.prompt, empty)
        res = decode(sc, global_trie, ctx, tok.copy_id, tok.end_id, beam_width=1)
        copy = res.copy  # all copy-route candidates, best first
        pick += int(bool(copy) and copy[0].docid == q.docid)
        route += int(res.p_copy > 0.5)
        pc += res.p_copy
    return {"n": len(qs), "copy_pick_acc": pick / max(1, len(qs)), "chance": 1 / cfg.shots,
            "route_copy_rate": route / max(1, len(qs)), "mean_p_copy": pc / max(1, len(qs))}


def eval_parametric(model: Decoder, tok: Tok, cfg: TrainConfig, queries: list[Query], docs, negs, global_trie: Trie,
                    n: int, seed: int = 321) -> dict:
    """Query-irrelevant 3-shot instances (gold absent, gold seen): top-1 correct and share with p_copy < 0.5."""
    rng = random.Random(seed)
    qs = queries[:n]
    step = torch_step(model)
    empty = [p.cpu().numpy() for p in model.empty_past()]
    top1 = route = 0
    for q in qs:
        inst, titles = icl_instance(tok, cfg, q, docs, negs, rng, False)
        ctx = Trie.build(titles, tok.encode, tok.end_id)
        res = decode(CachedPromptScorer(step, inst.prompt, empty), global_trie, ctx, tok.copy_id, tok.end_id, 4)
        top1 += metrics.hit([b.docid for b in res.beams], q.docid)
        route += int(res.p_copy < 0.5)
    return {"n": len(qs), "top1": top1 / max(1, len(qs)), "route_parametric_rate": route / max(1, len(qs)),
            "chance_top1": 1 / max(1, global_trie.size)}


def icl_report(model: Decoder, tok: Tok, cfg: TrainConfig, split: Split, corpus: Corpus, global_trie: Trie) -> dict:
    """Copy accuracy on fresh 3-shot context-dependent instances, three ways (n = cfg.eval_instances each):
    heldout_unseen: NQ dev-half queries of never-trained documents, negatives from never-trained docs
        (true in-context retrieval of new titles);
    seen_titles: train queries of the seen corpus, fresh positions and negatives from never-trained docs
        (the gold title is memorised, the instance is new);
    copy_pool: train queries of D_train docs outside the seen corpus (titles only ever copied in stage 1)."""
    n = cfg.eval_instances
    unseen = RandomNegatives(unseen_pool(split, corpus))
    pool = RandomNegatives(sorted({q.docid for q in corpus.copy_queries})) if corpus.copy_queries else unseen
    return {
        "heldout_unseen": eval_icl(model, tok, cfg, heldout_queries(split, corpus), split.docs, unseen, global_trie, n),
        "seen_titles": eval_icl(model, tok, cfg, corpus.train_queries, split.docs, unseen, global_trie, n, seed=5),
        "copy_pool": eval_icl(model, tok, cfg, corpus.copy_queries, split.docs, pool, global_trie, n, seed=7),
    }


def eval_serve(model: Decoder, tok: Tok, cfg: TrainConfig, split: Split, global_trie: Trie, n: int,
               ns: tuple[int, ...] = (10, 100), contexts: BM25Contexts | None = None) -> dict:
    """The sidecar's situation in Python: NQ dev-half queries of D_new documents, the context = BM25 top-N over
    D_new in BM25 order (gold present only where BM25 found it), the prompt budget of the model. Per N:
    hits@1 of the top beam (either route), bm25_hits@1 (the first candidate in the prompt), gold_in_prompt,
    copy_pick (the gold is the best copy-route candidate, over queries with the gold in the prompt) and the
    share routed to [COPY]; serve_eval.serve_table adds where the gold sat and where the copy route picked."""
    def build(query: str, cands: list[Candidate]):
        return build_prompt(tok.encode, query, cands, cfg.max_prompt_tokens, max_summary_tokens=cfg.max_summary_tokens,
                            prompt_format=cfg.prompt_format)

    empty = [p.cpu().numpy() for p in model.empty_past()]
    return serve_table(torch_step(model), empty, tok.encode, tok.end_id, tok.copy_id, global_trie, split, build, n, ns,
                       contexts=contexts, summary=lambda d: summary_of(tok, split.docs[d]))


def heldout_queries(split: Split, corpus: Corpus) -> list[Query]:
    """NQ dev-half queries whose document was never trained (unseen titles), in a stable order."""
    s = set(corpus.seen)
    return [q for q in split.dev if q.docid not in s]


def unseen_pool(split: Split, corpus: Corpus) -> list[str]:
    s = set(corpus.seen)
    return [d for d in sorted(split.docs) if d not in s]
