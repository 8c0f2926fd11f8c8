"""Training the reader's query side over frozen, cached candidate blocks (issue 62).

    python -m icicle.queryside cache --set SET --work WORK [--init ../models/b7/delta.safetensors]
    python -m icicle.queryside train --set SET --work WORK [--instances N | --minutes M] [--batch 16] ...
    python -m icicle.queryside eval  --set SET --work WORK      # the held-out table of WORK's latest weights
    python -m icicle.queryside export --set SET --work WORK --out ../models/NAME [--rank 128]  # a servable directory

A block reader (`--blocks shared`, icicle.reader) reads a prompt as a header, one block per candidate (each block
sees the header and itself, every block at the positions right after the header) and the query, then the answer.
Here the header and the blocks are computed by FROZEN weights (the init, e.g. the served b7 reader) and only the
query and the answer tokens go through the TRAINED weights, attending to the frozen keys and values. Two things
follow:
- training computes each block once (`cache`: WORK/blocks, keyed by the block's token ids, which the block template
  makes the same in every prompt) and a step runs only the ~20-40 query and answer tokens of each instance forward
  and backward over the cached keys and values: the cost of an instance barely depends on its list's length;
- at serving time a block store filled by the frozen weights stays valid for every reader trained this way.
The token embedding is frozen too (the trained and the frozen weights share it); every other weight is trained.

Instances are icicle.reader's (reading with --n candidates, shuffled or in order, the teacher's KL; the parametric
route's seen questions; the index instances, which have no blocks and run whole through the trained weights),
without --swap-titles (a block shows its own document's title, or it could not be cached) and without snippets.

A run lives in WORK: ckpt.pt (trained weights, optimizer, instances and seconds so far, RNG states; on SIGTERM and
every --save-every steps), log.jsonl (the loss every 25 steps with instances an hour, each evaluation), run.json.
`train` on a WORK that has ckpt.pt continues it; `train --start DIR` continues, in a new WORK, the run that `export`
wrote to DIR (when its ckpt.pt is lost). The stopping rule (written before the runs): every --eval-every instances
(10,000) the held-out views are read (icicle.reader's evaluation: heldout, heldout_shuffled, seen_heldout); when
--patience (2) successive evaluations have not raised the held-out shuffled copy pick above the best so far, the run
stops and says so.
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

import numpy as np
import torch

from . import model as M
from . import readerdata
from .decode import torch_step
from .device import release_free_memory, rss_gb
from .reader import Args as ReaderArgs
from .reader import Reader, _log, answer_loss, load_model, lr_scale
from .train import Instance

LAYOUT = "shared"


@dataclass
class Args:
    set: str
    work: str
    init: str = os.path.join(readerdata.REPO, "models", "b7", "delta.safetensors")
    minutes: float = 0.0
    instances: int = 0  # the run's total; 0 = --minutes only
    batch: int = 16
    lr: float = 3e-5
    warmup: int = 20
    decay: str = ""
    n: tuple[int, ...] = (10, 20)
    # the reading questions' kinds ("nq", "syn"; the set's module doc); the seen questions follow --seen
    kinds: tuple[str, ...] = ("nq", "syn")
    shuffle: float = 0.5
    seen: float = 0.35
    index: float = 0.15
    kd: float = 0.5
    tau: float = 0.02
    budget: int = 1024
    summary_tokens: int = 24
    seed: int = 0
    threads: int = 2
    eval_n: int = 100
    eval_every: int = 10_000  # instances; 0 = only at the end
    patience: int = 2
    save_every: int = 25  # steps
    trim_above_gb: float = 15.0
    cache_batch: int = 32
    eval_at_start: bool = True
    # a directory written by `export` (its delta.safetensors and train_report.json) that a new WORK continues from:
    # the trained weights start as it serves them (the delta's rank), the counts (instances, steps, seconds, the
    # stopping rule's) as its report gives them; AdamW's moments start at zero. For a run whose ckpt.pt is lost.
    start: str = ""

    def reader_args(self) -> ReaderArgs:
        return ReaderArgs(set=self.set, work=self.work, init=self.init, batch=self.batch, n=self.n,
                          shuffle=self.shuffle, swap_titles=0.0, seen=self.seen, index=self.index, kd=self.kd,
                          tau=self.tau, seed=self.seed, threads=self.threads, eval_n=self.eval_n, blocks=LAYOUT,
                          budget=self.budget, summary_tokens=self.summary_tokens)


class BlockCache:
    """The frozen weights' keys and values of the header and of each block, [2 x layers, tokens, kv heads, head
    dim] in float16, keyed by the block's ids; held in memory, written to DIR in shards of new blocks (resumable: a
    shard is written whole or not at all)."""

    SHARD = 512

    def __init__(self, frozen: M.Decoder, header: list[int], path: str = "", identity: str = "",
                 batch: int = 32) -> None:
        self.frozen, self.header, self.path, self.batch = frozen, list(header), path, batch
        self.kv: dict[bytes, torch.Tensor] = {}
        self._new: list[bytes] = []
        self.misses = 0
        self.fill_s = 0.0
        if path:
            os.makedirs(path, exist_ok=True)
            meta = os.path.join(path, "meta.json")
            want = {"header": self.header, "identity": identity}
            if os.path.exists(meta):
                have = json.load(open(meta))
                if have != want:
                    raise SystemExit(f"{path} holds blocks of other frozen weights or another header "
                                     f"({have.get('identity')!r}); use a new --work")
            else:
                json.dump(want, open(meta, "w"))
            for name in sorted(os.listdir(path)):
                if name.startswith("shard-") and name.endswith(".pt"):
                    # mapped, not read: the page cache keeps the blocks in use (0.84 MB each for SmolLM2-135M)
                    self.kv.update(torch.load(os.path.join(path, name), mmap=True, weights_only=True))
        self.hkv = self._compute([self.header], pos0=0, past=None)[0]

    @staticmethod
    def key(ids) -> bytes:
        return np.asarray(ids, dtype=np.int32).tobytes()

    @torch.no_grad()
    def _compute(self, blocks: list[list[int]], pos0: int, past: torch.Tensor | None) -> list[torch.Tensor]:
        """The frozen keys and values of each block (right-padded into one batch: no real token sees a pad)."""
        t0 = time.perf_counter()
        b, n = len(blocks), max(len(x) for x in blocks)
        ids = torch.zeros(b, n, dtype=torch.int64)
        for i, x in enumerate(blocks):
            ids[i, : len(x)] = torch.tensor(x)
        p = 0 if past is None else past.shape[1]
        pos = (torch.arange(n) + pos0).unsqueeze(0).expand(b, n)
        mask = M.causal_mask(p, n).expand(b, n, p + n).contiguous()
        pasts = (self.frozen.empty_past(b) if past is None else
                 [past[i].unsqueeze(0).expand(b, *past.shape[1:]).float() for i in range(past.shape[0])])
        out = self.frozen.step(ids, pos, mask, torch.tensor([n - 1]), *pasts)[1:]
        kv = torch.stack(out, 0).to(torch.float16)  # [2L, B, n, kvh, hd]
        self.fill_s += time.perf_counter() - t0
        return [kv[:, i, : len(x)].contiguous() for i, x in enumerate(blocks)]

    def fill(self, blocks: list[list[int]], log=print) -> int:
        """Computes every block not held yet, by length (batches of similar length pad little); returns how many."""
        want = {self.key(x): x for x in blocks}
        todo = sorted((x for k, x in want.items() if k not in self.kv), key=len)
        bs = max(1, self.batch)
        t0 = time.time()
        for s in range(0, len(todo), bs):
            part = todo[s: s + bs]
            for x, kv in zip(part, self._compute(part, len(self.header), self.hkv)):
                self._put(x, kv)
            if (s // bs) % 20 == 0:
                log(json.dumps({"cache": len(self.kv), "to_fill": len(todo) - s - len(part),
                                "seconds": round(time.time() - t0), "gb": round(self.nbytes() / 1e9, 2)}))
        self.flush()
        return len(todo)

    def _put(self, ids: list[int], kv: torch.Tensor) -> None:
        k = self.key(ids)
        self.kv[k] = kv
        self._new.append(k)
        if len(self._new) >= self.SHARD:
            self.flush()

    def flush(self) -> None:
        if not self.path or not self._new:
            self._new = []
            return
        name = os.path.join(self.path, f"shard-{len(os.listdir(self.path)):06d}.pt")
        torch.save({k: self.kv[k] for k in self._new}, name + ".tmp")
        os.replace(name + ".tmp", name)
        self.kv.update(torch.load(name, mmap=True, weights_only=True))  # the file's pages instead of the heap's
        self._new = []

    def get(self, ids: list[int]) -> torch.Tensor:
        kv = self.kv.get(self.key(ids))
        if kv is None:
            self.misses += 1
            kv = self._compute([ids], len(self.header), self.hkv)[0]
            self._put(ids, kv)
        return kv

    def nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.kv.values())


def split(inst: Instance) -> tuple[list[int], list[list[int]], list[int]]:
    """(header, blocks, query) of an instance's prompt by its segments; (prompt, [], []) has no blocks."""
    s = inst.segments
    if not s:
        return [], [], list(inst.prompt)
    return (list(inst.prompt[: s[0]]), [list(inst.prompt[a:b]) for a, b in zip(s[:-1], s[1:])],
            list(inst.prompt[s[-1]:]))


def query_batch(cache: BlockCache, insts: list[Instance]):
    """The trained side's inputs of a batch: ids [B,Q] (each instance's query, then its answer but the last token,
    right-padded), positions [B,Q], the additive mask [B,Q,P+Q] over the frozen past (padded to P) and the ids,
    the past (2 x layers tensors [B,P,kvh,hd]) and the answer positions (gather_b, gather_t) with their targets."""
    rows = []
    for inst in insts:
        header, blocks, query = split(inst)
        if blocks:
            if header != cache.header:
                raise ValueError("query_batch: an instance's header differs from the cache's")
            kv = torch.cat([cache.hkv] + [cache.get(b) for b in blocks], dim=1)
            pos0 = len(header) + max(len(b) for b in blocks)  # decode.block_attention's shared layout
            prefix = query
        else:
            kv, pos0, prefix = None, 0, query
        rows.append((kv, pos0, prefix + list(inst.answer[:-1]), len(prefix) - 1, inst.answer))
    b = len(rows)
    p = max([0] + [r[0].shape[1] for r in rows if r[0] is not None])
    q = max(len(r[2]) for r in rows)
    L2, kvh, hd = cache.hkv.shape[0], cache.hkv.shape[2], cache.hkv.shape[3]
    past = torch.zeros(L2, b, p, kvh, hd)
    mask = torch.full((b, q, p + q), M.MASKED)
    ids = torch.zeros(b, q, dtype=torch.int64)
    pos = torch.zeros(b, q, dtype=torch.int64)
    causal = M.causal_mask(0, q)[0]
    gb, gt, tgt = [], [], []
    for i, (kv, pos0, x, start, answer) in enumerate(rows):
        if kv is not None:
            past[:, i, : kv.shape[1]] = kv.float()
            mask[i, :, : kv.shape[1]] = 0.0
        mask[i, :, p:] = causal
        ids[i, : len(x)] = torch.tensor(x)
        pos[i] = torch.arange(q) + pos0
        for j, t in enumerate(answer):
            gb.append(i)
            gt.append(start + j)
            tgt.append(t)
    return ids, pos, mask, list(past.unbind(0)), torch.tensor(gb), torch.tensor(gt), torch.tensor(tgt)


def query_logits(trained: M.Decoder, cache: BlockCache, insts: list[Instance], out_vocab: torch.Tensor):
    """Logits [k, len(out_vocab)] at the batch's k answer positions, the trained weights over the frozen blocks,
    and the targets [k]."""
    ids, pos, mask, past, gb, gt, tgt = query_batch(cache, insts)
    h, _ = trained._hidden(ids, pos, mask, past)
    h = h[gb, gt]
    return torch.matmul(h, trained.embed_tokens.weight[out_vocab].t()), tgt


def split_step(frozen: M.Decoder, trained: M.Decoder, held: dict):
    """A contract step (decode.CachedPromptScorer's) whose prefill runs the prompt's header and blocks through the
    frozen weights and the rest through the trained ones; held["p"] is the prompt being read (the builder's last,
    see evaluate). Steps over a past (the answer's prefixes) run the trained weights."""
    fstep, tstep = torch_step(frozen, resident=False), torch_step(trained, resident=False)

    def step(ids, pos, mask, idx, past):
        p = held.get("p")
        if past[0].shape[1] == 0 and p is not None and p.segments and ids.shape[1] == len(p.ids):
            q = p.segments[-1]
            _, pre = fstep(ids[:, :q], pos[:, :q], np.ascontiguousarray(mask[:, :q, :q]),
                           np.asarray([q - 1], np.int64), past)
            logits, qkv = tstep(ids[:, q:], pos[:, q:], np.ascontiguousarray(mask[:, q:, :]),
                                np.asarray(idx, np.int64) - q, pre)
            return logits, [np.concatenate([a, b], axis=1) for a, b in zip(pre, qkv)]
        return tstep(ids, pos, mask, idx, past)

    return step


def evaluate(rd: Reader, frozen: M.Decoder, trained: M.Decoder, n: int) -> dict:
    """icicle.reader's held-out views, every prompt read with frozen blocks and the trained query side."""
    held: dict = {}

    def build(query, cands):
        held["p"] = rd.build(query, cands)
        return held["p"]

    with torch.no_grad():
        return rd.evaluate(trained, n, step=split_step(frozen, trained, held), build=build)


def listed_blocks(rd: Reader, depth: int, kinds: tuple[str, ...]) -> list[list[int]]:
    """The blocks of every document in the first `depth` of a list that training reads (questions of the given
    kinds and the seen ones) or the evaluation does (its first 10)."""
    docs = set()
    for q in rd.rs["questions"]:
        if q["part"] != "train":
            docs.update(q["list"][:10])
        elif q["kind"] in kinds or q["kind"] == "seen":
            docs.update(q["list"][:depth])
    out = []
    for d in sorted(docs):
        p = rd.prompt("x", [d], {})
        if p.included:
            out.append(list(p.ids[p.segments[0]: p.segments[1]]))
    return out


def stopping_rule(best: float, flat: int, pick: float) -> tuple[float, int]:
    """(best, flat) after an evaluation whose held-out shuffled copy pick is `pick`: flat counts the successive
    evaluations that did not raise the best; the run stops when it reaches --patience."""
    return (pick, 0) if pick > best + 1e-9 else (best, flat + 1)


def _identity(init: str) -> str:
    st = os.stat(init) if os.path.exists(init) else None
    return f"{os.path.basename(os.path.dirname(os.path.abspath(init)))}/{os.path.basename(init)}" + (
        f":{st.st_size}" if st else "")


def setup(a: Args):
    from .tokenizer import Tok, build_tokenizer

    torch.set_num_threads(a.threads)
    tok = Tok(build_tokenizer())
    rd = Reader(readerdata.load(a.set), tok, a.reader_args())
    rd.reading = [q for q in rd.reading if q["kind"] in a.kinds]
    if not rd.reading:
        raise SystemExit(f"--kinds {' '.join(a.kinds)}: the set has no training questions of these kinds")
    frozen = load_model(a.init, tok.copy_id, torch.device("cpu")).eval()
    frozen.requires_grad_(False)
    header = rd.prompt("x", [], {})
    cache = BlockCache(frozen, list(header.ids[: header.segments[0]]), os.path.join(a.work, "blocks"),
                       _identity(a.init), a.cache_batch)
    return tok, rd, frozen, cache


def build_cache(a: Args) -> dict:
    os.makedirs(a.work, exist_ok=True)
    _, rd, _, cache = setup(a)
    blocks = listed_blocks(rd, max(a.n), a.kinds)
    t0 = time.time()
    made = cache.fill(blocks, log=lambda s: print(s, flush=True))
    out = {"blocks": len(cache.kv), "computed": made, "seconds": round(time.time() - t0, 1),
           "gb": round(cache.nbytes() / 1e9, 3), "tokens": sum(v.shape[1] for v in cache.kv.values())}
    _log(a.work, {"cache": out})
    return out


def train(a: Args) -> dict:
    os.makedirs(a.work, exist_ok=True)
    path = os.path.join(a.work, "run.json")
    fixed = {k: v for k, v in asdict(a).items() if k not in ("minutes", "instances", "threads", "eval_n",
                                                              "save_every", "trim_above_gb", "cache_batch",
                                                              "eval_at_start", "patience", "eval_every")}
    if os.path.exists(path):
        was = json.load(open(path))["args"]
        diff = {k: (was.get(k), v) for k, v in fixed.items() if json.loads(json.dumps(v)) != was.get(k)}
        if diff:
            raise SystemExit(f"{a.work} holds a run with other arguments {diff}; use a new --work to change them")
    with open(path, "w") as f:
        json.dump({"args": asdict(a), "command": "python -m icicle.queryside " + " ".join(sys.argv[1:])}, f, indent=1)
    tok, rd, frozen, cache = setup(a)
    ck_path = os.path.join(a.work, "ckpt.pt")
    started = _start_state(a) if a.start and not os.path.exists(ck_path) else None
    trained = load_model(os.path.join(a.start, "delta.safetensors") if started else a.init, tok.copy_id,
                         torch.device("cpu"))
    trained.embed_tokens.weight = frozen.embed_tokens.weight  # shared and frozen
    params = [p for n, p in trained.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(a.seed)
    state = {"step": 0, "instances": 0, "seconds": 0.0, "best": -1.0, "flat": 0, "evaluated": -1}
    if started:
        state = started
        rng = random.Random(f"{a.seed}/{state['instances']}")  # not the first run's instances again
        _log(a.work, {"started_from": a.start, **state})
    if os.path.exists(ck_path):
        ck = torch.load(ck_path, map_location="cpu", weights_only=False)
        _load_trained(trained, ck["model"])
        opt.load_state_dict(ck["opt"])
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        state = ck["state"]
        _log(a.work, {"resumed": True, **state})
    stop = {"now": False, "why": ""}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True, why="signal"))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True, why="signal"))
    t0 = time.time()

    def spent() -> float:
        return state["seconds"] + time.time() - t0

    def save() -> None:
        s = dict(state, seconds=spent())
        sd = {k: v for k, v in trained.state_dict().items() if not k.startswith("embed_tokens")}
        torch.save({"model": sd, "opt": opt.state_dict(), "rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
                    "state": s}, ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)

    def evaluation() -> None:
        trained.eval()
        ev = evaluate(rd, frozen, trained, a.eval_n)
        trained.train()
        pick = ev["heldout_shuffled"]["copy_pick"]
        state["best"], state["flat"] = stopping_rule(state["best"], state["flat"], pick)
        _log(a.work, {"instances": state["instances"], "step": state["step"], "seconds": round(spent()),
                      "eval": ev, "best_shuffled_pick": state["best"], "flat": state["flat"]})
        state["evaluated"] = state["instances"]
        if a.patience and state["flat"] >= a.patience:
            stop.update(now=True, why=f"stopping rule: {state['flat']} evaluations without a gain")

    def more() -> bool:
        if stop["now"]:
            return False
        if a.instances and state["instances"] >= a.instances:
            return False
        return bool(a.instances) or spent() < a.minutes * 60

    if a.eval_at_start and state["step"] == 0 and a.eval_every:
        evaluation()
        save()
    window: list[tuple[float, float, int]] = []
    trained.train()
    while more():
        ts = time.perf_counter()
        insts, teach = rd.batch(rng)
        logits, tgt = query_logits(trained, cache, insts, rd.out_vocab)
        loss = answer_loss(logits.float(), rd.out_vocab, tgt, insts, teach, a.kd)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] += 1
        state["instances"] += len(insts)
        done = (state["instances"] / a.instances if a.instances else spent() / (a.minutes * 60))
        for g in opt.param_groups:
            g["lr"] = a.lr * lr_scale(state["step"], a.warmup, done, a.decay)
        window.append((loss.item(), time.perf_counter() - ts, len(insts)))
        if a.trim_above_gb > 0 and (rss_gb() or 0) > a.trim_above_gb:
            release_free_memory()
        if state["step"] % 25 == 0:
            w = window[-25:]
            _log(a.work, {"step": state["step"], "instances": state["instances"],
                          "loss": round(sum(x[0] for x in w) / len(w), 4),
                          "instances_per_hour": round(3600 * sum(x[2] for x in w) / sum(x[1] for x in w)),
                          "lr": float(f"{opt.param_groups[0]['lr']:.3g}"), "seconds": round(spent()),
                          "cache_misses": cache.misses, "rss_gb": rss_gb()})
            cache.flush()
        if state["step"] % a.save_every == 0:
            save()
        if a.eval_every and state["instances"] >= max(0, state["evaluated"]) + a.eval_every:
            evaluation()
            save()
    cache.flush()
    if not stop["now"] and state["evaluated"] != state["instances"]:
        evaluation()
    save()
    res = {"instances": state["instances"], "steps": state["step"], "seconds": round(spent()),
           "stopped": stop["why"] or "", "best_shuffled_pick": state["best"]}
    _log(a.work, {"end": res})
    return res


def _portable(args: dict) -> dict:
    """A run's arguments as a committed report shows them: paths inside the repository relative to it, paths under
    the home directory with ~, so that no machine's layout is written into a model directory."""
    repo, home = os.path.realpath(readerdata.REPO), os.path.expanduser("~")
    out = {}
    for k, v in args.items():
        if isinstance(v, str) and os.path.isabs(v):
            r = os.path.realpath(v)
            if r.startswith(repo + os.sep):
                v = os.path.relpath(r, repo)
            elif r.startswith(home + os.sep):
                v = "~" + r[len(home):]
        out[k] = v
    return out


def _start_state(a: Args) -> dict:
    """The counts a run continued from an exported directory (--start) begins with: its report's instances, steps
    and seconds, and the stopping rule replayed over its curve. Refuses a directory over other frozen weights."""
    path = os.path.join(a.start, "train_report.json")
    if not os.path.exists(path):
        raise SystemExit(f"--start {a.start}: no train_report.json (a directory written by `export`)")
    rep = json.load(open(path))
    frozen = os.path.normpath(os.path.join(os.path.abspath(a.start), rep.get("frozen", "")))
    if rep.get("trainer") != "icicle.queryside" or frozen != os.path.dirname(os.path.abspath(a.init)):
        raise SystemExit(f"--start {a.start}: trained over {frozen} by {rep.get('trainer')}, not over --init's "
                         f"{os.path.dirname(os.path.abspath(a.init))} by icicle.queryside")
    best, flat, evaluated = -1.0, 0, -1
    for e in rep.get("curve", []):
        best, flat = stopping_rule(best, flat, e["heldout_shuffled"]["copy_pick"])
        evaluated = e["instances"]
    return {"step": rep["steps"], "instances": rep["instances"], "seconds": float(rep["seconds"]), "best": best,
            "flat": flat, "evaluated": evaluated}


def _load_trained(trained: M.Decoder, sd: dict) -> None:
    """A checkpoint's trained weights: every weight but the (frozen, shared) token embedding."""
    missing, unexpected = trained.load_state_dict(sd, strict=False)
    if unexpected or [k for k in missing if not k.startswith("embed_tokens")]:
        raise SystemExit(f"checkpoint mismatch: missing {missing}, unexpected {unexpected}")


def evaluate_work(a: Args) -> dict:
    tok, rd, frozen, _ = setup(a)
    trained = load_model(a.init, tok.copy_id, torch.device("cpu"))
    ck_path = os.path.join(a.work, "ckpt.pt")
    if os.path.exists(ck_path):
        _load_trained(trained, torch.load(ck_path, map_location="cpu", weights_only=False)["model"])
    trained.eval()
    return evaluate(rd, frozen, trained, a.eval_n)


GOLDEN_TOP = 20


def _empty_past(model: M.Decoder) -> list[np.ndarray]:
    c = model.c
    return [np.zeros((1, 0, c.kv_heads, c.head_dim), np.float32) for _ in range(2 * c.layers)]


def _top(z: np.ndarray, k: int = GOLDEN_TOP) -> list[list]:
    idx = np.argsort(-z)[:k]
    return [[int(i), float(z[i])] for i in idx]


def block_golden(frozen: M.Decoder, trained: M.Decoder, man: dict, cases: list[dict], encode) -> list[dict]:
    """For each case (query, candidates with title and summary), the prompt the Go engine builds from the manifest
    (its template, prompt_format, max_summary_tokens as the fixed cap of block reading, max_prompt_tokens) and the
    top logits after its last token, read as the sidecar reads it: header and blocks by the frozen weights in the
    shared layout, the query by the trained ones (split_step)."""
    from .decode import block_attention
    from .prompt import Candidate, build_prompt

    out = []
    for c in cases:
        cands = [Candidate(x["title"], x.get("summary", "")) for x in c["candidates"]]
        p = build_prompt(encode, c["query"], cands, man["max_prompt_tokens"], max_summary_tokens=man["max_summary_tokens"],
                         template=man["template"], prompt_format=man["prompt_format"], fixed_cap=True)
        n = len(p.ids)
        attend, pos = block_attention(p.segments, n, LAYOUT)
        mask = np.where(attend, 0.0, -1e9).astype(np.float32)[None]
        step = split_step(frozen, trained, {"p": p})
        logits, _ = step(np.asarray([p.ids], np.int64), pos[None], mask, np.asarray([n - 1], np.int64),
                         _empty_past(trained))
        out.append({"query": c["query"], "candidates": c["candidates"][: p.included], "input_ids": list(p.ids),
                    "segments": list(p.segments), "layout": LAYOUT, "last_logits_top": _top(logits[0, -1])})
    return out


def causal_golden(model: M.Decoder, rows: list[dict]) -> list[dict]:
    """golden/logits.jsonl's rows (prompt ids) with model's top logits after the last id, read causally: what
    icicle.graft checks a rebuilt graph against."""
    from .decode import causal_mask_np, torch_step

    step = torch_step(model, resident=False)
    out = []
    for r in rows:
        ids = r["input_ids"]
        n = len(ids)
        logits, _ = step(np.asarray([ids], np.int64), np.arange(n, dtype=np.int64)[None], causal_mask_np(0, n),
                         np.asarray([n - 1], np.int64), _empty_past(model))
        out.append({"input_ids": ids, "last_logits_top": _top(logits[0, -1])})
    return out


def export_dir(a: Args, out: str, rank: int = 128, name: str = "", version: str = "", cases: int = 4) -> dict:
    """A model directory the sidecar serves by blocks: the trained weights as a delta on the backbone (the format of
    models/b7, rebuilt by scripts/model.sh), the frozen reader's graph, tokenizer and seen corpus, a manifest whose
    block_model names the frozen reader's directory (its graph computes the header and the blocks, so a block store
    filled for it serves this reader too), golden/logits.jsonl (causal, for the rebuild's check) and
    golden/blocks.jsonl (block reading with frozen blocks, for the Go parity suite), and train_report.json. The
    goldens are computed from the packed delta, i.e. the weights the directory serves."""
    import shutil

    from safetensors.torch import save_file

    from .delta import FORMAT, _sha256, base_state_dict, pack
    from .configs import get_config
    from .tokenizer import Tok, build_tokenizer, gguf_path

    frozen_dir = os.path.dirname(os.path.abspath(a.init))
    fman = json.load(open(os.path.join(frozen_dir, "manifest.json")))
    ck_path = os.path.join(a.work, "ckpt.pt")
    if not os.path.exists(ck_path):
        raise SystemExit(f"{a.work}: no ckpt.pt to export (run `train` first)")
    torch.set_num_threads(a.threads)
    tok = Tok(build_tokenizer())
    frozen = load_model(a.init, tok.copy_id, torch.device("cpu")).eval()
    trained = load_model(a.init, tok.copy_id, torch.device("cpu"))
    ck = torch.load(ck_path, map_location="cpu", weights_only=False)
    _load_trained(trained, ck["model"])
    cfg = get_config(fman["config"])
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    delta = pack({k: v.detach() for k, v in trained.state_dict().items()}, base_state_dict(cfg), rank)
    dpath = os.path.join(out, "delta.safetensors")
    save_file(delta, dpath, metadata={"format": FORMAT, "config": cfg.name, "rank": str(rank),
                                      "base_gguf_sha256": _sha256(gguf_path()), "block_model": fman["name"]})
    served = load_model(dpath, tok.copy_id, torch.device("cpu")).eval()
    for f in ("graph.onnx", "graph.json", "tokenizer.json", fman["seen_docids"], "seen_heldout_queries.jsonl"):
        if os.path.exists(os.path.join(frozen_dir, f)):
            shutil.copyfile(os.path.join(frozen_dir, f), os.path.join(out, f))
    st = ck["state"]
    man = dict(fman)  # its int8 file (onnx_quantized) too, made by scripts/model.sh from the rebuilt graph
    man.update(name=name or f"icicle-{os.path.basename(os.path.abspath(out))}",
               model_version=version or time.strftime("%Y-%m-%d"),
               block_model=os.path.relpath(frozen_dir, os.path.abspath(out)))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(man, f, indent=2)
        f.write("\n")
    rows = [json.loads(x) for x in open(os.path.join(frozen_dir, "golden", "logits.jsonl"))]
    dec = [json.loads(x) for x in open(os.path.join(frozen_dir, "golden", "decode.jsonl"))]
    dec = [c for c in dec if len(c.get("candidates", [])) >= 2][:cases]
    with torch.no_grad():
        golden = {"logits.jsonl": causal_golden(served, rows),
                  "blocks.jsonl": block_golden(frozen, served, man, dec, tok.encode)}
    for fname, rs in golden.items():
        with open(os.path.join(out, "golden", fname), "w") as f:
            for r in rs:
                f.write(json.dumps(r) + "\n")
    evals = [json.loads(x) for x in open(os.path.join(a.work, "log.jsonl")) if '"eval"' in x]
    report = {"config": cfg.name, "trainer": "icicle.queryside", "frozen": man["block_model"],
              "instances": st["instances"], "steps": st["step"], "seconds": round(st["seconds"]),
              "args": _portable(json.load(open(os.path.join(a.work, "run.json")))["args"]), "delta_rank": rank,
              "curve": [{"instances": e["instances"], **{v: e["eval"][v] for v in e["eval"]}} for e in evals]}
    with open(os.path.join(out, "train_report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    return {"out": out, "instances": st["instances"], "delta_bytes": os.path.getsize(dpath),
            "golden": {k: len(v) for k, v in golden.items()}}


def parse(argv=None) -> tuple[str, Args, dict]:
    ap = argparse.ArgumentParser(prog="python -m icicle.queryside", description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=("cache", "train", "eval", "export"))
    ap.add_argument("--out", default="", help="export: the model directory to write")
    ap.add_argument("--rank", type=int, default=128, help="export: the delta's rank (models/b7's is 128)")
    ap.add_argument("--name", default="", help="export: the manifest's name (default icicle-<out's base name>)")
    ap.add_argument("--version", default="", help="export: the manifest's model_version (default today)")
    d = Args(set="", work="")
    for f in Args.__dataclass_fields__.values():
        flag = "--" + f.name.replace("_", "-")
        v = getattr(d, f.name)
        if f.name in ("set", "work"):
            ap.add_argument(flag, required=True)
        elif isinstance(v, bool):
            ap.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=v)
        elif isinstance(v, tuple):
            ap.add_argument(flag, type=type(v[0]), nargs="+", default=list(v))
        else:
            ap.add_argument(flag, type=type(v), default=v)
    ns = vars(ap.parse_args(argv))
    cmd = ns.pop("cmd")
    ex = {k: ns.pop(k) for k in ("out", "rank", "name", "version")}
    if cmd == "export" and not ex["out"]:
        ap.error("export needs --out")
    ns["n"], ns["kinds"] = tuple(ns["n"]), tuple(ns["kinds"])
    return cmd, Args(**ns), ex


def main(argv=None) -> None:
    cmd, a, ex = parse(argv)
    if cmd == "export":
        out = export_dir(a, ex["out"], ex["rank"], ex["name"], ex["version"])
    else:
        out = {"cache": build_cache, "train": train, "eval": evaluate_work}[cmd](a)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
