"""Controlled, time-boxed reading experiments for issue 16 (CPU minutes, not the reader pipeline).

    python -m icicle.lab.experiment --name f2 --prompt-format 2 --minutes 6 [--query-first] [--synthetic 0.5]
                                    [--curriculum] [--choice-loss W] [--model 2x64|4x128|smollm135] [--out ../training/results/exp16]
                                    [--visible] [--shuffle F] [--swap-titles F]

One run = one change against a baseline with everything else fixed (seed, model, budget, time box): a random-init
model with the SmolLM2 tokenizer is trained from scratch for --minutes on context-dependent instances only (the
answer is always [COPY] + the gold's docid, so the run measures reading, not routing or memorising):
- NQ train queries of all D_train documents (6,510), the context = BM25 top-n over D_train in BM25 order, the gold
  at its BM25 rank or replacing the n-th hit (contexts.py), n drawn from --context-n (or, with --curriculum, from
  the first choices early and all of them late; `--context-n 1 3 5 10 --curriculum` starts from one candidate);
- with --synthetic F, a share F of the instances is synthetic (item 3): a span of a D_train document (one of its
  sentences, or with --wiki also a wiki_intro_pool introduction's) with a few words dropped is the query, its BM25
  top-n over the same pool the context, its title the answer; titles of the wiki pool then join the output vocabulary;
  --visible draws the span from the words a prompt shows instead (4-8 of the summary's first 16 words): the
  sentences are mostly beyond the 24 summary tokens, so that span could not be found in the context;
- --shuffle F shuffles that share of the candidate lists (BM25's order then tells nothing);
- --swap-titles F gives that share of the instances a random pool title per candidate (the answer: the title shown
  above the gold's summary), so the answer cannot be recalled from the query, only found by reading.
--choice-loss W trains the decision loss instead (train.choice_loss_on: at each title token the gold among the
trie's choices, what the decoder renormalises over) plus W x the usual loss.
Evaluation (serve_eval.serve_table, beam 1): serve-style = NQ dev-half queries of D_new documents with BM25 top-N over
D_new (what the sidecar serves); serve_shuffled = the same with each top 10 shuffled (reading alone, chance 0.10);
synthetic_shuffled (with --synthetic) = spans of held-out D_new documents as queries, top 10 shuffled (the synthetic
task on documents never trained); train-style = dev-half queries of D_train documents with BM25 over D_train. The
JSON has copy pick by the gold's position and the copy route's pick histogram. Note that the training loss does not
measure reading: it falls with memorising (query -> title for the training documents) and with better copying.

--query-first puts a query block ("Query: {query}\\n") right after the header as well as the usual query block at
the end, so every candidate's tokens can attend to the query (a Python-only experiment: MODEL_FORMAT.md has no such
format, and it would rule out computing a document's KV once at ingest).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import time
from dataclasses import asdict, dataclass

import torch

from ..contexts import BM25Contexts, ShuffledContexts
from ..data import Doc, Query, make_split
from ..decode import Trie, torch_step
from ..model import Decoder, ModelConfig
from ..prompt import Candidate, Prompt, build_prompt
from ..readerdata import span_with_drops, synthetic_query
from ..serve_eval import serve_table
from ..train import Instance, _extractive, choice_loss_on, copy_choices, docid_vocab, loss_on, retitled, widened

PRETRAINED = "smollm135"  # --model smollm135: the whole SmolLM2-135M-Instruct (smollm30's backbone), fine-tuned
MODELS = {
    "2x64": ModelConfig(vocab_size=49153, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=172,
                        max_context_tokens=512),
    "4x128": ModelConfig(vocab_size=49153, hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=344,
                         max_context_tokens=512),
}
WIKI = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data", "wiki_intro_pool", "corpus.jsonl.gz")


@dataclass
class Exp:
    name: str
    prompt_format: int = 2
    query_first: bool = False
    model: str = "2x64"
    minutes: float = 6.0
    context_n: tuple[int, ...] = (3, 5, 10)
    budget: int = 512
    summary_tokens: int = 24
    lr: float = 2e-3
    batch: int = 16
    synthetic: float = 0.0
    wiki: bool = False
    curriculum: bool = False
    seed: int = 0
    eval_n: int = 68
    threads: int = 2
    zero_shot: bool = False  # no training: the whole SmolLM2-135M-Instruct ([COPY] at the mean embedding)
    train_style: bool = True  # also evaluate on train-style instances (dev queries of D_train documents)
    steps: int = 0  # > 0: train exactly this many steps (a controlled comparison); else the --minutes time box
    # >= 0: train the decision loss (train.choice_loss_on: the gold among the trie's choices at each title token)
    # plus this weight x the out-vocabulary loss; < 0: the out-vocabulary loss only (loss_on)
    choice_loss: float = -1.0
    visible: bool = False  # synthetic spans only from the words the prompt shows (the summary's first ~16 words)
    # share of instances whose candidates carry random titles of the pool (one per candidate, the answer the gold
    # summary's new title): the query then cannot be mapped to its answer from memory, only by reading
    swap_titles: float = 0.0
    shuffle: float = 0.0  # share of training instances whose candidates are shuffled (the gold's rank says nothing)
    # with --model smollm135: write the trained weights as WORK/stage3.pt, so that
    # `python -m icicle.export dir --config smollm30 --work WORK --out DIR` exports a servable directory
    save_work: str = ""
    init: str = ""  # start from these weights (a --save-work WORK/stage3.pt of the same --model) instead of the backbone


def make_builder(tok, e: Exp):
    """build(query, cands) -> Prompt for the experiment's format, budget, cap and query placement."""
    def build(query: str, cands: list[Candidate]) -> Prompt:
        if not e.query_first:
            return build_prompt(tok.encode, query, cands, e.budget, max_summary_tokens=e.summary_tokens,
                                prompt_format=e.prompt_format)
        qf = tok.encode(f"Query: {query}\n")
        p = build_prompt(tok.encode, query, cands, e.budget - len(qf), max_summary_tokens=e.summary_tokens,
                         prompt_format=e.prompt_format)
        h = len(_header_ids(tok, e))
        return Prompt(p.ids[:h] + qf + p.ids[h:], p.included, p.summary_tokens)
    return build


def _header_ids(tok, e: Exp) -> list[int]:
    from ..prompt import TEMPLATES

    return tok.encode(TEMPLATES[e.prompt_format]["header"])


def visible_query(text: str, rng: random.Random, words: int = 16) -> str | None:
    """A span the model can find in its prompt: 4-8 consecutive words of the summary's first `words` words (about
    what 24 summary tokens show), with about one word in five dropped."""
    w = _extractive(text).split()[:words]
    if len(w) < 6:
        return None
    return span_with_drops(w, 4, 8, rng)


def run(e: Exp, out_dir: str, log=print) -> dict:
    torch.manual_seed(e.seed)
    torch.set_num_threads(e.threads)
    rng = random.Random(e.seed)
    from ..tokenizer import build_tokenizer
    from ..tokenizer import Tok

    tok = Tok(build_tokenizer())
    split = make_split()
    docs = dict(split.docs)
    pool = list(split.d_train)
    if e.wiki:
        with gzip.open(WIKI, "rt", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if r["docid"] not in docs and not r.get("in_nq_qed"):
                    docs[r["docid"]] = Doc(r["docid"], r["title"], r["text"])
                    pool.append(r["docid"])
    queries = list(split.train)
    if not e.zero_shot:
        ctx_train = BM25Contexts(pool, docs)
        ctx_train.prefetch([q.query for q in queries])
    synth: list[tuple[str, str]] = []
    if e.synthetic > 0 and not e.zero_shot:
        srng = random.Random(e.seed + 99)
        for d in srng.sample(pool, min(len(pool), 6000)):
            s = (visible_query(docs[d].text, srng) if e.visible else synthetic_query(docs[d].text, srng))
            if s:
                synth.append((s, d))
        # bm25s adds "" to its vocabulary (beyond its score matrix) for a query of stopwords only: keep spans
        # with at least one indexed term
        import bm25s

        vocab = ctx_train.index.r.vocab_dict
        toks = bm25s.tokenize([s for s, _ in synth], stopwords="en", return_ids=False, show_progress=False)
        synth = [x for x, t in zip(synth, toks) if any(w in vocab and w for w in t)]
        ctx_train.prefetch([s for s, _ in synth])
    out_vocab = docid_vocab(tok, pool)
    build = make_builder(tok, e)
    if e.zero_shot or e.model == PRETRAINED:
        from ..backbone import SMOLLM2, load_backbone
        from ..configs import get_config

        cfg30 = get_config("smollm30")
        model = load_backbone(cfg30.model, SMOLLM2, list(cfg30.backbone_keep), tok.copy_id)
    else:
        model = Decoder(MODELS[e.model])
    if e.init:
        model.load_state_dict(torch.load(e.init, map_location="cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=e.lr, betas=(0.9, 0.95))
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))

    def instance(frac: float) -> Instance:
        n = rng.choice(widened(e.context_n, frac) if e.curriculum else e.context_n)
        if synth and rng.random() < e.synthetic:
            query, gold = rng.choice(synth)
        else:
            q = rng.choice(queries)
            query, gold = q.query, q.docid
        hits = ctx_train.ranked(query)
        top = hits[:n]
        if gold not in top:
            top = top[: n - 1] + [gold]
        if e.shuffle > 0 and rng.random() < e.shuffle:
            top = rng.sample(top, len(top))
        name = retitled(top, pool, rng) if e.swap_titles > 0 and rng.random() < e.swap_titles else {t: t for t in top}
        p = build(query, [Candidate(docs[name[t]].title, _extractive(docs[t].text)) for t in top])
        if gold not in top[: p.included]:
            top = top[: p.included - 1] + [gold]
            name.setdefault(gold, gold)
            p = build(query, [Candidate(docs[name[t]].title, _extractive(docs[t].text)) for t in top])
        inc = top[: p.included]
        ch = copy_choices([tok.docid(name[t]) for t in inc], inc.index(gold)) if e.choice_loss >= 0 else None
        return Instance(p.ids, [tok.copy_id] + tok.docid(name[gold]), ch)

    t0 = time.time()
    losses: list[float] = []
    model.train()
    def more() -> bool:
        if e.zero_shot:
            return False
        return len(losses) < e.steps if e.steps > 0 else time.time() - t0 < e.minutes * 60

    while more():
        frac = len(losses) / e.steps if e.steps > 0 else (time.time() - t0) / (e.minutes * 60)
        bt = [instance(frac) for _ in range(e.batch)]
        loss = loss_on(model, bt, out_vocab) if e.choice_loss < 0 else choice_loss_on(model, bt, out_vocab, e.choice_loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if len(losses) % 50 == 0:
            log(f"{e.name} step {len(losses)} loss(last 50) {sum(losses[-50:]) / 50:.3f} ({time.time() - t0:.0f}s)")
    model.eval()
    train_s = time.time() - t0
    if e.save_work:
        save_for_export(model, e, e.save_work, len(losses), train_s)
    step = torch_step(model)
    empty = [p.cpu().numpy() for p in model.empty_past()]
    gtrie = Trie.build(split.d_train, tok.encode, tok.end_id)
    res = {"exp": asdict(e), "steps": len(losses), "train_s": train_s,
           "loss_first50": sum(losses[:50]) / max(1, len(losses[:50])),
           "loss_last50": sum(losses[-50:]) / max(1, len(losses[-50:]))}
    res["serve"] = serve_table(step, empty, tok.encode, tok.end_id, tok.copy_id, gtrie, split, build, e.eval_n, (10,))
    # reading alone: the same queries with each top-10 shuffled (seeded), so BM25's order cannot help; chance 0.10
    res["serve_shuffled"] = serve_table(step, empty, tok.encode, tok.end_id, tok.copy_id, gtrie, split, build,
                                        e.eval_n, (10,), contexts=ShuffledContexts(BM25Contexts(split.d_new, split.docs)))
    if e.synthetic > 0:
        # the synthetic task itself on held-out documents: spans of D_new summaries, each top-10 shuffled
        vrng = random.Random(1234)
        vq = [(visible_query if e.visible else synthetic_query)(split.docs[d].text, vrng) for d in split.d_new]
        vq = [Query(f"syn{i}", s, d, "dev") for i, (s, d) in enumerate(zip(vq, split.d_new)) if s][: e.eval_n]
        res["synthetic_shuffled"] = serve_table(step, empty, tok.encode, tok.end_id, tok.copy_id, gtrie, split, build,
                                                e.eval_n, (10,), queries=vq,
                                                contexts=ShuffledContexts(BM25Contexts(split.d_new, split.docs)))
    # train-style: dev-half queries of D_train documents (never trained), BM25 over D_train
    if not e.train_style:
        return _save(res, out_dir, e, log)
    new = set(split.d_new)
    dev_train = [q for q in split.dev if q.docid not in new][: e.eval_n]
    ctx_dt = BM25Contexts(split.d_train, split.docs)
    fake = type("S", (), {})()
    fake.docs, fake.dev, fake.d_new = split.docs, dev_train, [q.docid for q in dev_train]
    res["train_style"] = serve_table(step, empty, tok.encode, tok.end_id, tok.copy_id, gtrie, fake, build,
                                     e.eval_n, (10,), contexts=ctx_dt)
    return _save(res, out_dir, e, log)


def save_for_export(model, e: Exp, work: str, steps: int, train_s: float) -> None:
    """Writes WORK/stage3.pt and WORK/train_metrics.json (export.checkpoint), for `icicle.export dir --config smollm30
    --work WORK --out DIR`: the experiment's pretrained model is configs.smollm30's shape."""
    from ..export import checkpoint

    os.makedirs(work, exist_ok=True)
    checkpoint(model, work, "stage3", {"config": "smollm30", "experiment": asdict(e), "steps": steps},
               {"train_s": train_s})


def _save(res: dict, out_dir: str, e: Exp, log) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{e.name}.json"), "w") as f:
        json.dump(res, f, indent=1)
    log(json.dumps({k: res[k] for k in ("steps", "loss_first50", "loss_last50", "train_s")}) + " serve " +
        json.dumps(res["serve"]["n10"]) + " train_style " + json.dumps(res.get("train_style", {}).get("n10")) +
        " serve_shuffled " + json.dumps(res.get("serve_shuffled", {}).get("n10")) +
        " synthetic_shuffled " + json.dumps(res.get("synthetic_shuffled", {}).get("n10")))
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.experiment", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--prompt-format", type=int, default=2)
    ap.add_argument("--query-first", action="store_true")
    ap.add_argument("--model", choices=sorted(MODELS) + [PRETRAINED], default="2x64",
                    help=f"a from-scratch shape, or {PRETRAINED}: fine-tune the whole pretrained SmolLM2-135M")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--context-n", type=int, nargs="+", default=[3, 5, 10])
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=16, help="instances per optimizer step")
    ap.add_argument("--synthetic", type=float, default=0.0)
    ap.add_argument("--wiki", action="store_true")
    ap.add_argument("--curriculum", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-n", type=int, default=68)
    ap.add_argument("--no-train-style", action="store_true", help="evaluate on serve-style instances only")
    ap.add_argument("--steps", type=int, default=0, help="train exactly this many steps instead of --minutes")
    ap.add_argument("--choice-loss", type=float, default=-1.0,
                    help=">= 0: the decision loss (the gold among the trie's choices) plus this weight x the usual loss")
    ap.add_argument("--visible", action="store_true",
                    help="synthetic spans only from the words the prompt shows (the summary's first 16 words)")
    ap.add_argument("--swap-titles", type=float, default=0.0,
                    help="share of instances whose candidates carry random titles (answerable only by reading)")
    ap.add_argument("--shuffle", type=float, default=0.0,
                    help="share of training instances whose candidates are in a random order")
    ap.add_argument("--zero-shot", action="store_true",
                    help="no training: evaluate the untouched full-depth SmolLM2-135M-Instruct in this prompt format")
    ap.add_argument("--save-work", default="", metavar="WORK",
                    help=f"with --model {PRETRAINED}: write the trained weights as WORK/stage3.pt for "
                    "`icicle.export dir --config smollm30 --work WORK --out DIR`")
    ap.add_argument("--init", default="", metavar="PT",
                    help="start from these weights (WORK/stage3.pt of an earlier --save-work run of the same --model)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "results", "exp16"))
    a = ap.parse_args(argv)
    if a.save_work and not (a.zero_shot or a.model == PRETRAINED):
        ap.error(f"--save-work: only --model {PRETRAINED} (or --zero-shot) has a training config to export with, "
                 "smollm30")
    e = Exp(a.name, a.prompt_format, a.query_first, a.model, a.minutes, tuple(a.context_n), lr=a.lr, batch=a.batch,
            synthetic=a.synthetic, wiki=a.wiki, curriculum=a.curriculum, seed=a.seed, eval_n=a.eval_n,
            threads=a.threads, zero_shot=a.zero_shot, train_style=not a.no_train_style, steps=a.steps,
            choice_loss=a.choice_loss, shuffle=a.shuffle, visible=a.visible, swap_titles=a.swap_titles,
            save_work=a.save_work, init=a.init)
    run(e, a.out)


if __name__ == "__main__":
    main()
