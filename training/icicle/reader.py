"""Training the reader on the reader set (issue 24): first-stage lists, a dense teacher, the parametric route, and
runs that resume.

    python -m icicle.reader train --set DIR/readerset.json.gz --work WORK [--init reader135|backbone|PT|DELTA]
                                  [--minutes M | --steps S] [--device cpu|cuda] [--batch 8] [--lr 3e-5] [--decay linear]
                                  [--n 5 10 15] [--shuffle 0.5] [--swap-titles 0.25] [--seen 0.15] [--index 0.05]
                                  [--kd 0.5] [--tau 0.02] [--eval-n 100]
    python -m icicle.reader eval --set ... --work WORK        # the held-out table of WORK's latest weights

One step = `--batch` instances, each drawn as (shares by the flags):
- reading: an "nq" or "syn" question of part "train", its first n candidates (n from --n) in the first stage's
  order, or shuffled (--shuffle); when the gold is not among them it takes a uniformly drawn place (never the
  last by rule: the old BM25 lists put it last, and the shipped reader learned to favour the last slot); with
  --swap-titles the candidates show random titles of the set (only reading finds the answer). The answer is
  [COPY] + the gold's (shown) title. With --kd W, W x KL(teacher || model) at the first title token, over the
  candidates' distinct first tokens (what constrained decoding chooses among there): the teacher is
  softmax(cosine / tau) over the candidates in the prompt, summed by first token (distillation from the dense
  encoder that ranks the same list).
- parametric (--seen): a "seen" question of part "train" with its list (the gold is never in it): the answer is
  the gold's title without [COPY], from memory; (--index) a seen document's first 64 text tokens -> its title.
Loss: the answer tokens' cross-entropy over the set's title tokens (train.loss_on's restricted softmax) plus the
teacher term. Prompts: reader135's format (2), --budget tokens (512), 24-token summaries. With --blocks contiguous |
shared (issue 26) every prompt is built in the block template (no "[i]", every summary cut to 24) and read by
blocks (decode.block_attention: a mask and position ids, no new parameters), in training and in the evaluation.
--summary-candidates K keeps the summaries of the first stage's top K only in training prompts, the rest by title
alone (the sidecar's experimental.summary_candidates); the evaluation's lists of 10 are read as before.

A run lives in WORK: ckpt.pt (weights, optimizer, scheduler, step, RNG states, seconds so far; written every
--save-every steps, at the end, and on SIGTERM/SIGINT), log.jsonl (loss every 25 steps, each evaluation), run.json
(arguments, command). `train` on a WORK that has ckpt.pt continues it (same set and arguments; --minutes/--steps
are the total). WORK/stage3.pt + train_metrics.json at the end are what `icicle.delta pack --work WORK` reads.

Evaluation (serve_eval.serve_table, beam 1, the held-out part, never the dev queries): "heldout" = NQ questions of
held-out documents over lists of every unseen training document in first-stage order (the sidecar's situation: it
lists every unseen document as new; readerdata's module doc), top 10;
"heldout_shuffled" = the same lists shuffled (reading alone, chance 0.10); "seen_heldout" = 100 seen questions
never trained, lists without the gold (the parametric route's recall). Each row also gives the list's own [1].
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from . import readerdata
from .data import Doc, Query
from .decode import BLOCK_LAYOUTS, SCORINGS, Trie, block_attention, torch_step
from .device import autocast, model_device, release_free_memory, resolve_device, rss_gb
from .prompt import TEMPLATE_BLOCKS, Candidate, build_prompt
from .serve_eval import serve_table
from .train import INDEX_TEMPLATE, Instance, _batch, docid_vocab

BUDGET, SUMMARY_TOKENS, PROMPT_FORMAT = 512, 24, 2  # reader135's manifest


@dataclass
class Args:
    set: str
    work: str
    # reader135 (backbone + the shipped delta) | backbone | a .pt state dict | a delta file (.safetensors, e.g.
    # models/r24a/delta.safetensors: a run continued from a shipped model whose checkpoint is gone)
    init: str = "reader135"
    minutes: float = 0.0
    steps: int = 0
    device: str = "auto"
    batch: int = 8
    micro: int = 0
    lr: float = 3e-5
    warmup: int = 20
    # "" keeps lr after the warmup; "linear" takes it down to 0 at the run's end (--steps, or --minutes by the
    # seconds spent: a time-bound run still ends at 0). b4 (constant lr, resumed) got worse where r24a's loss
    # was still falling: a run continued from a model decays.
    decay: str = ""
    n: tuple[int, ...] = (5, 10, 15)
    shuffle: float = 0.5
    swap_titles: float = 0.25
    seen: float = 0.15
    index: float = 0.05
    kd: float = 0.5
    tau: float = 0.02
    seed: int = 0
    threads: int = 2
    eval_n: int = 100
    # the held-out view is read at 10 candidates (the sidecar's default); each further K here adds "heldout_nK",
    # the same questions with their first K candidates in order (issue 26's 100 needs --budget 8192 at 64 tokens and
    # a set built that deep: readerdata build --depth)
    eval_cands: tuple[int, ...] = (10,)
    eval_every: int = 0  # steps; 0 = only at the end
    save_every: int = 25
    bf16: bool = True
    blocks: str = ""  # issue 26: "contiguous" | "shared" reads every prompt by blocks (decode.block_attention)
    budget: int = BUDGET
    # each candidate's summary is cut to this many tokens (reader135's manifest: 24). The dense encoder ranks the
    # sidecar's 10 candidates 0.776 right from 24 tokens, 0.864 from 64, 0.916 from the whole passage
    # (lab.readerview): longer summaries need a larger --budget (64 with 10-20 candidates: 1024 or 2048); the
    # landed model's manifest and golden decodes take both from the run (icicle.delta build: reader_caps).
    summary_tokens: int = SUMMARY_TOKENS
    # issue 26: only the list's first K (the first stage's top K) keep their summaries, the rest go in by title
    # alone, as the sidecar reads them with experimental.summary_candidates K; 0 = every candidate with its summary.
    summary_candidates: int = 0
    # each candidate is shown by its query snippet (the set's q["snip"], `readerdata snippets`) instead of its
    # summary, as the sidecar serves with experimental.snippet_chars; in training and in the evaluation.
    snippets: bool = False
    # how the evaluation's decoder scores a title's tokens (decode.SCORINGS; the sidecar's experimental.scoring):
    # "trie" renormalises over the trie, "vocab" pays every token at the model's probability over the vocabulary
    scoring: str = "trie"
    # CPU runs: after a step that leaves the process above this many GB resident, the C heap's free pages go back
    # to the system (device.release_free_memory). glibc otherwise keeps what varying prompt lengths free: b7 grew
    # from 12 to 19.5 GB in 15 minutes on a 24 GB host. Trimming after every step instead (0 < this < a step's
    # working set) costs page faults each step. 0: never.
    trim_above_gb: float = 15.0


class Reader:
    """The set's questions and documents turned into training instances and evaluation views."""

    def __init__(self, rs: dict, tok, a: Args) -> None:
        self.rs, self.tok, self.a = rs, tok, a
        self.docs = {d: Doc(d, t, s) for d, (t, s) in rs["docs"].items()}
        qs = rs["questions"]
        self.reading = [q for q in qs if q["part"] == "train" and q["kind"] in ("nq", "syn")]
        self.seen_q = [q for q in qs if q["part"] == "train" and q["kind"] == "seen"]
        self.seen_docs = [d for d in rs["seen"] if d in self.docs]
        self.titles = sorted(self.docs)
        self.out_vocab = docid_vocab(tok, [self.docs[d].title for d in self.titles])
        if a.snippets and any("snip" not in q for q in qs):
            raise ValueError(f"--snippets: {a.set} has no snippets; write them with "
                             "`python -m icicle.readerdata snippets`")

    def texts(self, q: dict) -> dict[str, str] | None:
        """What q's listed documents show with --snippets (their snippets for q), None for their summaries."""
        return dict(zip(q["list"], q["snip"])) if self.a.snippets else None

    def build(self, query: str, cands: list[Candidate]):
        """reader135's prompt (serve_table's build); with --blocks the block template (no per-request "[i]") and
        every summary cut to the same cap, so a block is the same ids in every prompt."""
        blocks = dict(template=TEMPLATE_BLOCKS, fixed_cap=True) if self.a.blocks else {}
        return build_prompt(self.tok.encode, query, cands, self.a.budget, max_summary_tokens=self.a.summary_tokens,
                            prompt_format=PROMPT_FORMAT, **blocks)

    def _segments(self, p) -> list[int] | None:
        return p.segments if self.a.blocks else None

    def prompt(self, query: str, names: list[str], shown: dict[str, str], ranks: list[int] | None = None,
               texts: dict[str, str] | None = None):
        """The prompt of names (in prompt order) under shown's swapped titles; ranks are their places in the first
        stage's list, which --summary-candidates reads (default: the prompt order); texts replace summaries."""
        k = self.a.summary_candidates
        ranks = ranks if ranks is not None else list(range(len(names)))
        texts = texts or {}
        return self.build(query, [Candidate(self.docs[shown.get(d, d)].title,
                                            "" if 0 < k <= r else texts.get(d, self.docs[d].text))
                                  for d, r in zip(names, ranks)])

    def reading_instance(self, rng: random.Random) -> tuple[Instance, list[float] | None]:
        """One reading instance and the teacher over its included candidates (None without --kd)."""
        a = self.a
        q = rng.choice(self.reading)
        n = rng.choice(a.n)
        order = list(range(len(q["list"])))[:n]
        gi = q["list"].index(q["gold"]) if q["gold"] in q["list"] else -1
        if gi < 0 or gi >= n:
            return self.reading_instance(rng) if gi < 0 else self._place(q, order, gi, rng)
        return self._finish(q, order, gi, rng)

    def _place(self, q: dict, order: list[int], gi: int, rng: random.Random):
        order = order[:-1]
        order.insert(rng.randrange(len(order) + 1), gi)
        return self._finish(q, order, gi, rng)

    def _finish(self, q: dict, order: list[int], gi: int, rng: random.Random):
        a = self.a
        if rng.random() < a.shuffle:
            rng.shuffle(order)
        names = [q["list"][i] for i in order]
        shown = dict(zip(names, rng.sample(self.titles, len(names)))) if rng.random() < a.swap_titles else {}
        texts = self.texts(q)
        p = self.prompt(q["q"], names, shown, order, texts)
        if order.index(gi) >= p.included:  # the budget cut the gold off: it takes a drawn place among those shown
            order = [i for i in order[: p.included] if i != gi]
            order = order[: p.included - 1]
            order.insert(rng.randrange(len(order) + 1), gi)
            names = [q["list"][i] for i in order]
            p = self.prompt(q["q"], names, shown, order, texts)
        inc = order[: p.included]
        gold = shown.get(q["gold"], q["gold"])
        inst = Instance(p.ids, [self.tok.copy_id] + self.tok.docid(gold), segments=self._segments(p))
        teacher = None
        if a.kd > 0:
            cos = torch.tensor([q["cos"][i] for i in inc])
            teacher = (torch.softmax(cos / a.tau, 0).tolist(),
                       [self.tok.docid(shown.get(q["list"][i], q["list"][i]))[0] for i in inc])
        return inst, teacher

    def seen_instance(self, rng: random.Random) -> Instance:
        q = rng.choice(self.seen_q)
        n = rng.choice(self.a.n)
        p = self.prompt(q["q"], q["list"][:n], {}, texts=self.texts(q))
        return Instance(p.ids, self.tok.docid(q["gold"]), segments=self._segments(p))

    def index_instance(self, rng: random.Random) -> Instance:
        d = rng.choice(self.seen_docs)
        pre, _, post = INDEX_TEMPLATE.partition("{text}")
        return Instance(self.tok.encode(pre) + self.tok.encode(self.docs[d].text)[:64] + self.tok.encode(post),
                        self.tok.docid(d))

    def batch(self, rng: random.Random) -> tuple[list[Instance], list]:
        insts, teach = [], []
        for _ in range(self.a.batch):
            r = rng.random()
            if self.seen_q and r < self.a.seen:
                insts.append(self.seen_instance(rng))
                teach.append(None)
            elif self.seen_docs and r < self.a.seen + self.a.index:
                insts.append(self.index_instance(rng))
                teach.append(None)
            else:
                inst, t = self.reading_instance(rng)
                insts.append(inst)
                teach.append(t)
        return insts, teach

    def evaluate(self, model, n: int, step=None, build=None) -> dict:
        """The held-out views (module doc), through the reference decoder on the model's device; step and build
        (default: the model's torch step, self.build) replace the step function and the prompt builder (the
        query-side reader's frozen blocks: icicle.queryside)."""
        tok = self.tok
        step = step or torch_step(model)
        build = build or self.build
        empty = [p.cpu().numpy() for p in model.empty_past()]
        gtrie = Trie.build(self.seen_docs, tok.encode, tok.end_id)
        view = type("View", (), {})()
        view.docs = self.docs
        out = {}

        def table(part: str, k: int, shuffled: bool) -> dict:
            """The first n questions of part, each read with its first k candidates (the first 10 shuffled)."""
            qs = [q for q in self.rs["questions"] if q["part"] == part][:n]
            lists = {q["q"]: (random.Random(q["q"]).sample(q["list"][:10], len(q["list"][:10])) if shuffled
                              else q["list"]) for q in qs}
            queries = [Query(f"{part}{i}", q["q"], q["gold"], "train") for i, q in enumerate(qs)]
            texts = {q["q"]: self.texts(q) or {} for q in qs}
            return serve_table(step, empty, tok.encode, tok.end_id, tok.copy_id, gtrie, view, build,
                               n, (k,), contexts=_Lists(lists), summary=lambda d: self.docs[d].text,
                               queries=queries, layout=self.a.blocks,
                               query_summary=lambda qt, d: texts[qt].get(d, self.docs[d].text),
                               scoring=self.a.scoring)[f"n{k}"]

        for name, part, shuffled in (("heldout", "heldout", False), ("heldout_shuffled", "heldout", True),
                                     ("seen_heldout", "seen_heldout", False)):
            out[name] = table(part, 10, shuffled)
        for k in sorted(set(self.a.eval_cands) - {10}):
            out[f"heldout_n{k}"] = table("heldout", k, False)
        return out


class _Lists:
    """serve_table's contexts over the set's precomputed lists."""

    def __init__(self, lists: dict[str, list[str]]) -> None:
        self.lists = lists

    def prefetch(self, queries) -> None:
        pass

    def ranked(self, query: str) -> list[str]:
        return self.lists[query]


def batch_layout(insts: list[Instance], t: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Block reading's (attend [B,t,t], positions [B,t]) over _batch's right-padded rows: each instance with segments
    under decode.block_attention, the others (and every pad) causal at their index."""
    attend = torch.ones(len(insts), t, t, dtype=torch.bool).tril()
    pos = torch.arange(t).repeat(len(insts), 1)
    for b, inst in enumerate(insts):
        if inst.segments:
            n = len(inst.prompt) + len(inst.answer) - 1
            m, p = block_attention(inst.segments, n, layout)
            attend[b, :n, :n] = torch.from_numpy(m)
            pos[b, :n] = torch.from_numpy(p)
            pos[b, n:] = torch.arange(int(p[-1]) + 1, int(p[-1]) + 1 + t - n)
    return attend, pos


def step_loss(model, out_vocab: torch.Tensor, insts: list[Instance], teach: list, kd: float,
              layout: str = "") -> torch.Tensor:
    """Answer cross-entropy over out_vocab (summed, per instance mean over tokens, then the batch mean) plus kd x the
    teacher KL at the first title token of reading instances; with layout, prompts are read by blocks."""
    dev = model_device(model)
    ids, pad, gb, gt, tgt = (x.to(dev) for x in _batch(insts))
    ov = out_vocab.to(dev)
    lay = tuple(x.to(dev) for x in batch_layout(insts, ids.shape[1], layout)) if layout else None
    logits = model.train_logits(ids, pad, gb, gt, ov, layout=lay).float()
    return answer_loss(logits, ov, tgt, insts, teach, kd)


def answer_loss(logits: torch.Tensor, ov: torch.Tensor, tgt: torch.Tensor, insts: list[Instance], teach: list,
                kd: float) -> torch.Tensor:
    """step_loss's loss from the logits [k, len(ov)] at the k answer positions (instance by instance, in order) and
    their targets tgt [k] (token ids): the cross-entropy plus kd x the teacher KL at each reading instance's first
    title token."""
    dev = logits.device
    loss = F.cross_entropy(logits, torch.searchsorted(ov, tgt))
    if kd <= 0:
        return loss
    terms = []
    row = 0
    for inst, t in zip(insts, teach):
        if t is not None:
            probs, first = t
            j = row + 1  # the position after [COPY] predicts the first title token
            uniq = sorted(set(first))
            col = torch.searchsorted(ov, torch.tensor(uniq, device=dev))
            lp = torch.log_softmax(logits[j, col], 0)
            tp = torch.zeros(len(uniq), device=dev)
            for p, f in zip(probs, first):
                tp[uniq.index(f)] += p
            terms.append((tp * (torch.log(tp.clamp_min(1e-9)) - lp)).sum())
        row += len(inst.answer)
    if terms:
        loss = loss + kd * torch.stack(terms).mean()
    return loss


def lr_scale(step: int, warmup: int, done: float, decay: str) -> float:
    """The factor on --lr for the step after `step`: the warmup's ramp, times (1 - done) with --decay linear, where
    done is the share of the run behind (steps, or seconds of --minutes)."""
    ramp = min(1.0, (step + 1) / max(1, warmup))
    return ramp * max(0.0, 1.0 - done) if decay == "linear" else ramp


def load_model(init: str, copy_id: int, dev: torch.device):
    from .backbone import SMOLLM2, load_backbone
    from .configs import get_config

    cfg = get_config("reader135")
    model = load_backbone(cfg.model, SMOLLM2, list(cfg.backbone_keep), copy_id)
    if init == "reader135" or init.endswith(".safetensors"):
        from safetensors.torch import load_file

        from .delta import base_state_dict, unpack

        delta = init if init != "reader135" else os.path.join(readerdata.REPO, "models", "reader135", "delta.safetensors")
        model.load_state_dict(unpack(load_file(delta), base_state_dict(cfg)))
    elif init != "backbone":
        model.load_state_dict(torch.load(init, map_location="cpu"))
    return model.to(dev)


def _log(work: str, rec: dict) -> None:
    with open(os.path.join(work, "log.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)


def _same_run(work: str, a: Args) -> None:
    path = os.path.join(work, "run.json")
    if not os.path.exists(path):
        return
    old = json.load(open(path))["args"]
    fixed = {k: v for k, v in asdict(a).items() if k not in ("minutes", "steps", "eval_every", "save_every", "threads",
                                                              "device", "eval_n", "eval_cands", "micro", "scoring",
                                                              "trim_above_gb")}
    # An argument added after the run began counts as its default there.
    default = asdict(Args(set="", work=""))
    was = {k: old.get(k, json.loads(json.dumps(default[k]))) for k in fixed}
    diff = {k: (was[k], v) for k, v in fixed.items() if json.loads(json.dumps(v)) != was[k]}
    if diff:
        raise SystemExit(f"{work} holds a run with other arguments {diff}; use a new --work to change them")


def train(a: Args) -> dict:
    from .tokenizer import Tok, build_tokenizer

    torch.set_num_threads(a.threads)
    dev = resolve_device(a.device)
    os.makedirs(a.work, exist_ok=True)
    _same_run(a.work, a)
    with open(os.path.join(a.work, "run.json"), "w") as f:
        json.dump({"args": asdict(a), "command": "python -m icicle.reader " + " ".join(sys.argv[1:])}, f, indent=1)
    tok = Tok(build_tokenizer())
    rd = Reader(readerdata.load(a.set), tok, a)
    ck_path = os.path.join(a.work, "ckpt.pt")
    ck = torch.load(ck_path, map_location="cpu", weights_only=False) if os.path.exists(ck_path) else None
    model = load_model("backbone" if ck else a.init, tok.copy_id, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, a.warmup)))
    rng = random.Random(a.seed)
    step, spent = 0, 0.0
    if ck:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sched.load_state_dict(ck["sched"])
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        step, spent = ck["step"], ck["seconds"]
        _log(a.work, {"resumed": True, "step": step, "seconds": round(spent)})

    def save() -> None:
        tmp = ck_path + ".tmp"
        torch.save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "opt": opt.state_dict(),
                    "sched": sched.state_dict(), "rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
                    "step": step, "seconds": spent + (time.time() - t0)}, tmp)
        os.replace(tmp, ck_path)

    stop = {"now": False}

    def on_signal(sig, frame) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.time()

    def more() -> bool:
        if stop["now"]:
            return False
        if a.steps:
            return step < a.steps
        return spent + time.time() - t0 < a.minutes * 60

    losses: list[float] = []
    model.train()
    while more():
        insts, teach = rd.batch(rng)
        opt.zero_grad(set_to_none=True)
        parts = [(insts, teach)] if a.micro <= 0 else [(insts[i: i + a.micro], teach[i: i + a.micro])
                                                       for i in range(0, len(insts), a.micro)]
        total = 0.0
        for pi, pt in parts:
            with autocast(dev, a.bf16):
                loss = step_loss(model, rd.out_vocab, pi, pt, a.kd, a.blocks) * (len(pi) / len(insts))
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if a.decay:
            done = step / a.steps if a.steps else (spent + time.time() - t0) / (a.minutes * 60)
            for g in opt.param_groups:
                g["lr"] = a.lr * lr_scale(step, a.warmup, done, a.decay)
        losses.append(total)
        if dev.type == "cpu" and a.trim_above_gb > 0 and (rss_gb() or 0) > a.trim_above_gb:
            release_free_memory()
        if step % 25 == 0:
            _log(a.work, {"step": step, "loss": round(sum(losses[-25:]) / len(losses[-25:]), 4),
                          "lr": float(f"{opt.param_groups[0]['lr']:.3g}"),
                          "seconds": round(spent + time.time() - t0), "rss_gb": rss_gb()})
        if step % a.save_every == 0:
            save()
        if a.eval_every and step % a.eval_every == 0:
            model.eval()
            _log(a.work, {"step": step, "eval": rd.evaluate(model, a.eval_n)})
            model.train()
    save()
    model.eval()
    res = {"step": step, "seconds": round(spent + time.time() - t0), "stopped": stop["now"]}
    if not stop["now"]:
        from .export import checkpoint

        checkpoint(model.cpu(), a.work, "stage3", {"config": "reader135", "reader": asdict(a), "steps": step},
                   {"train_s": res["seconds"]})
        model.to(dev)
        res["eval"] = rd.evaluate(model, a.eval_n)
        _log(a.work, {"step": step, "final": True, "eval": res["eval"]})
    return res


def evaluate_work(a: Args) -> dict:
    from .tokenizer import Tok, build_tokenizer

    torch.set_num_threads(a.threads)
    tok = Tok(build_tokenizer())
    rd = Reader(readerdata.load(a.set), tok, a)
    src = os.path.join(a.work, "stage3.pt") if a.work else ""
    model = load_model(src if src and os.path.exists(src) else a.init, tok.copy_id, resolve_device(a.device))
    model.eval()
    return rd.evaluate(model, a.eval_n)


def parse(argv=None) -> tuple[str, Args]:
    """The command and its arguments, every value checked but the files' existence (the GPU queue's jobs are
    checked with it here, where their files are not: tests/test_reader.py)."""
    ap = argparse.ArgumentParser(prog="python -m icicle.reader", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("train", "eval"):
        p = sub.add_parser(name)
        p.add_argument("--set", required=True)
        p.add_argument("--work", default="" if name == "eval" else None, required=name == "train")
        d = Args(set="", work="")
        for k, v in asdict(d).items():
            if k in ("set", "work"):
                continue
            flag = "--" + k.replace("_", "-")
            if isinstance(v, bool):
                p.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=v)
            elif isinstance(v, tuple):
                p.add_argument(flag, type=int, nargs="+", default=list(v))
            else:
                p.add_argument(flag, type=type(v), default=v)
    ns = vars(ap.parse_args(argv))
    cmd = ns.pop("cmd")
    ns["n"], ns["eval_cands"] = tuple(ns["n"]), tuple(ns["eval_cands"])
    a = Args(**ns)
    if min(a.eval_cands) < 1 or max(a.eval_cands) > 100:
        raise SystemExit(f"--eval-cands {' '.join(map(str, a.eval_cands))}: want 1 to 100 candidates each")
    if a.blocks and a.blocks not in BLOCK_LAYOUTS:
        raise SystemExit(f"--blocks {a.blocks!r}: want one of {BLOCK_LAYOUTS} (or nothing: causal reading)")
    if a.summary_tokens < 1:
        raise SystemExit(f"--summary-tokens {a.summary_tokens}: want at least 1")
    if a.scoring not in SCORINGS:
        raise SystemExit(f"--scoring {a.scoring!r}: want one of {SCORINGS}")
    if a.decay not in ("", "linear"):
        raise SystemExit(f"--decay {a.decay!r}: want linear (or nothing: the lr stays after the warmup)")
    if a.decay and not (a.steps or a.minutes):
        raise SystemExit("--decay linear needs --steps or --minutes (the run's end, where the lr reaches 0)")
    return cmd, a


def main(argv=None) -> None:
    cmd, a = parse(argv)
    if a.init.endswith(".safetensors") and not os.path.exists(a.init):
        raise SystemExit(f"--init {a.init}: no such delta file")
    if cmd == "train":
        res = train(a)
    else:
        res = evaluate_work(a)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
