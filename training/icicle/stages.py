"""One training stage per command, each reading the previous stage's checkpoint (fixtures.py runs them all,
evaluates after each and exports):

    python -m icicle.stages stage0 --config tiny --out DIR        # writes DIR/stage0.pt
    python -m icicle.stages stage1 --config tiny --out DIR        # reads DIR/stage0.pt, writes DIR/stage1.pt
    python -m icicle.stages stage2 --config tiny --out DIR        # reads DIR/stage1.pt, writes DIR/stage2.pt
    python -m icicle.stages stage3 --config tiny --out DIR        # reads DIR/stage2.pt, writes DIR/stage3.pt

Stages 0 and 1 are in train.py, 2 and 3 in align.py. Each writes DIR/<stage>_losses.json beside its checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import random

import torch

from .align import mine_pairs, run_stage2, run_stage3
from .configs import get_config
from .data import make_split
from .decode import Trie
from .device import resolve_device
from .train import context_sampler, docid_vocab, new_model, new_tok, run_stage0, run_stage1, select_corpus


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.stages", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["stage0", "stage1", "stage2", "stage3"])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    a = ap.parse_args(argv)
    cfg = get_config(a.config)
    dev = resolve_device(a.device)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    os.makedirs(a.out, exist_ok=True)
    tok = new_tok(cfg)
    split = make_split()
    corpus = select_corpus(split, cfg)
    model = new_model(cfg, tok.copy_id)
    out_vocab = docid_vocab(tok, split.d_train).to(dev)
    prev = {"stage1": "stage0", "stage2": "stage1", "stage3": "stage2"}.get(a.stage)
    if prev:
        model.load_state_dict(torch.load(os.path.join(a.out, f"{prev}.pt"), map_location="cpu"))
    model.to(dev)
    negs = context_sampler(cfg, split, corpus)
    result: object
    if a.stage == "stage0":
        result = run_stage0(model, tok, corpus, cfg, out_vocab=out_vocab)
    elif a.stage == "stage1":
        result = run_stage1(model, tok, corpus, cfg, negs, out_vocab=out_vocab)
    elif a.stage == "stage2":
        gtrie = Trie.build(corpus.seen, tok.encode, tok.end_id)
        pairs, _ = mine_pairs(model, tok, cfg, corpus, negs, gtrie, random.Random(cfg.seed + 20), cfg.mine_beam,
                              cfg.dpo_max_pairs)
        result = run_stage2(model, pairs, out_vocab, cfg)
    else:
        result = run_stage3(model, tok, cfg, corpus, negs, out_vocab)[0]
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(a.out, f"{a.stage}.pt"))
    with open(os.path.join(a.out, f"{a.stage}_losses.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
