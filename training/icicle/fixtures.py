"""The paper's recipe, which makes the test fixtures (models/tiny, the CI fixture; models/small, the integration
tests' reader): split -> tokenizer -> stage 0 (indexing SFT) -> stage 1 (ICL SFT with [COPY]) -> stage 2 (DPO) ->
stage 3 (title-only LoRA, merged) -> the model directory (export.write_model_dir: ONNX, int8, parity, golden).

    python -m icicle.fixtures --config tiny --out ../models/tiny
    python -m icicle.fixtures --config small --out ../models/small --from stage1   # reuse WORK/stage1.pt

Writes the MODEL_FORMAT.md directory into --out (manifest.json, model.onnx, model.int8.onnx, tokenizer.json,
seen_docids.txt, golden/) plus train_report.json (losses, held-out metrics, parity, timings). Checkpoints
go to --work (default: training/out/<config>), which is git-ignored. The shipped readers are made by the reader
pipeline instead (readerdata, reader; training/README.md, "How each shipped model was made").
"""
from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace

import numpy as np
import torch

from .align import mine_pairs, run_stage2, run_stage3, title_only_report
from .configs import get_config, with_caps
from .contexts import BM25Contexts
from .data import make_split
from .decode import Trie
from .device import resolve_device
from .export import WorkLog, add_caps, checkpoint, restore, write_model_dir
from .train import (context_sampler, copy_warmup, eval_parametric, eval_serve, icl_report, new_model, new_tok,
                    report_start, run_stage0, run_stage1, select_corpus)


STAGES = ("stage0", "stage1", "stage2", "stage3")


def work_dir(a, cfg) -> str:
    return a.work or os.path.join(os.path.dirname(__file__), "..", "out", cfg.name)


def _avg(xs, n=20):
    xs = xs[:n] if n > 0 else xs[n:]
    return float(sum(xs) / max(1, len(xs)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.fixtures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--work", default=None, help="checkpoint folder (default training/out/<config>)")
    ap.add_argument("--from", dest="from_stage", choices=STAGES, default=None,
                    help="load WORK/<stage>.pt and run only the later stages (stage3: export only)")
    ap.add_argument("--more-stage1", type=int, default=0, metavar="ROUNDS",
                    help="with --from stage1: first run ROUNDS more rounds of stage 1 (fresh draws, fresh schedule)")
    ap.add_argument("--device", default=None,
                    help="cpu, cuda or cuda:N (default: cuda if available, else cpu); export always runs on the CPU")
    ap.add_argument("--micro-batch", type=int, default=None, metavar="N",
                    help="gradient accumulation over micro-batches of N instances (default: the config's)")
    ap.add_argument("--swap-titles", type=float, default=None, metavar="F",
                    help="share 0-1 of context-dependent instances shown with random D_train titles, answerable only "
                    "by reading (TrainConfig.swap_titles; default: the config's, 0 in every shipped config)")
    ap.add_argument("--round-epochs", type=int, default=0, metavar="N",
                    help="with --more-stage1: N epochs per extra round (default: the config's stage-1 epochs)")
    add_caps(ap)
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = get_config(a.config)
    if a.round_epochs:
        if not a.more_stage1:
            raise SystemExit("--round-epochs needs --more-stage1")
        cfg = replace(cfg, stage1=replace(cfg.stage1, epochs=a.round_epochs))
    if a.micro_batch is not None:
        cfg = replace(cfg, micro_batch=a.micro_batch)
    if a.swap_titles is not None:
        if not 0.0 <= a.swap_titles <= 1.0:
            raise SystemExit(f"--swap-titles: a share from 0 to 1, got {a.swap_titles}")
        cfg = replace(cfg, swap_titles=a.swap_titles)
    cfg = with_caps(cfg, a.summary_tokens, a.prompt_tokens)
    dev = resolve_device(a.device)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    work = work_dir(a, cfg)
    os.makedirs(work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    times = {}
    log = WorkLog(os.path.join(work, "fixtures.log"), append=bool(a.from_stage))

    split = make_split()
    tok = new_tok(cfg)
    corpus = select_corpus(split, cfg)
    log(f"split {split.data_version}: D_train {len(split.d_train)} D_new {len(split.d_new)} train {len(split.train)} "
        f"dev {len(split.dev)} test {len(split.test)}; seen corpus {len(corpus.seen)} docs, "
        f"{len(corpus.train_queries)} train queries; copy id {tok.copy_id} end id {tok.end_id}")
    model = new_model(cfg, tok.copy_id)
    log(f"device {dev}" + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
        + f", micro-batch {cfg.micro_batch or 'off'}, prompt format {cfg.prompt_format}")
    gtrie = Trie.build(corpus.seen, tok.encode, tok.end_id)
    sneg = context_sampler(cfg, split, corpus)
    report, out_vocab = report_start(cfg, split, corpus, tok, dev)
    start = 0
    if a.from_stage:
        restore(model, work, a.from_stage, report, times)
        start = STAGES.index(a.from_stage) + 1
        log(f"resumed from {work}/{a.from_stage}.pt")
    model.to(dev)
    if a.more_stage1 and a.from_stage != "stage1":
        raise SystemExit("--more-stage1 needs --from stage1")
    for r in range(a.more_stage1):
        t = time.time()
        done_rounds = report.get("stage1_rounds", 1)
        done_epochs = report.get("stage1_epochs", get_config(a.config).stage1.epochs)  # fresh draws: next epoch
        l1 = run_stage1(model, tok, corpus, cfg, sneg, log, out_vocab, first_epoch=done_epochs)
        report["stage1_rounds"] = done_rounds + 1
        report["stage1_epochs"] = done_epochs + cfg.stage1.epochs
        report[f"stage1_round{done_rounds + 1}"] = {"steps": len(l1), "loss_first20": _avg(l1, 20),
                                                    "loss_last20": _avg(l1, -20)}
        report["stage1_icl"] = icl_report(model, tok, cfg, split, corpus, gtrie)
        log(f"stage1 round {done_rounds + 1}: {report[f'stage1_round{done_rounds + 1}']} ICL {report['stage1_icl']}")
        times[f"stage1_round{done_rounds + 1}_s"] = time.time() - t
        checkpoint(model, work, "stage1", report, times)
    _train(model, tok, split, corpus, cfg, gtrie, sneg, out_vocab, report, times, work, log, start)
    write_model_dir(model, tok, split, corpus.seen, cfg, a.out, work, report, times, log)


def _train(model, tok, split, corpus, cfg, gtrie, sneg, out_vocab, report, times, work, log, start):
    def done(stage: str, t: float) -> None:
        times[f"{stage}_s"] = time.time() - t
        checkpoint(model, work, stage, report, times)

    def evaluate(stage: str, title_only: bool = False) -> None:
        report[f"{stage}_icl"] = icl_report(model, tok, cfg, split, corpus, gtrie)
        report[f"{stage}_parametric_trainq"] = eval_parametric(model, tok, cfg, corpus.train_queries, split.docs, sneg,
                                                               gtrie, 60)
        if cfg.context == "bm25" and stage != "stage0":  # stage 0 never saw a candidate
            report[f"{stage}_serve"] = eval_serve(model, tok, cfg, split, gtrie, cfg.eval_instances, ns=(10, 100))
            log(f"{stage} serve-like (BM25 over D_new): {report[f'{stage}_serve']}")
        if title_only:
            report[f"{stage}_title_only"] = title_only_report(model, tok, cfg, split, corpus, gtrie)
        log(f"{stage} {report[stage]} ICL {report[f'{stage}_icl']} parametric(train queries) "
            f"{report[f'{stage}_parametric_trainq']}" + (f" title-only {report[f'{stage}_title_only']}" if title_only else ""))

    if start <= 0:
        report["init_icl"] = icl_report(model, tok, cfg, split, corpus, gtrie)
        log(f"init ICL copy accuracy: {report['init_icl']}")
        if cfg.copy_warmup_steps:
            t = time.time()
            lw = copy_warmup(model, tok, cfg, split, BM25Contexts(split.d_train, split.docs), out_vocab, log)
            report["copy_warmup"] = {"steps": len(lw), "loss_first20": _avg(lw, 20), "loss_last20": _avg(lw, -20)}
            report["copy_warmup_serve"] = eval_serve(model, tok, cfg, split, gtrie, cfg.eval_instances, ns=(10, 100))
            log(f"copy warm-up {report['copy_warmup']} serve-like (BM25 over D_new): {report['copy_warmup_serve']}")
            times["copy_warmup_s"] = time.time() - t
        t = time.time()
        l0 = run_stage0(model, tok, corpus, cfg, log, out_vocab)
        report["stage0"] = {"steps": len(l0), "loss_first20": _avg(l0, 20), "loss_last20": _avg(l0, -20)}
        evaluate("stage0")
        done("stage0", t)
    if start <= 1:
        t = time.time()
        l1 = run_stage1(model, tok, corpus, cfg, sneg, log, out_vocab)
        report["stage1"] = {"steps": len(l1), "loss_first20": _avg(l1, 20), "loss_last20": _avg(l1, -20)}
        evaluate("stage1")
        done("stage1", t)
    if start <= 2:
        t = time.time()
        pairs, mined = mine_pairs(model, tok, cfg, corpus, sneg, gtrie, random.Random(cfg.seed + 20), cfg.mine_beam,
                                  cfg.dpo_max_pairs)
        log(f"stage2 mined {mined}")
        r2 = run_stage2(model, pairs, out_vocab, cfg, log)
        l2 = r2.pop("losses")
        report["stage2"] = {"mined": mined, "steps": len(l2), "loss_first20": _avg(l2, 20),
                            "loss_last20": _avg(l2, -20), **r2}
        evaluate("stage2", title_only=True)
        done("stage2", t)
    if start <= 3:
        t = time.time()
        l3, trainable = run_stage3(model, tok, cfg, corpus, sneg, out_vocab, log)
        report["stage3"] = {"steps": len(l3), "lora_trainable_params": trainable, "loss_first20": _avg(l3, 20),
                            "loss_last20": _avg(l3, -20)}
        evaluate("stage3", title_only=True)
        done("stage3", t)


if __name__ == "__main__":
    main()
