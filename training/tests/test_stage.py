"""Each implemented stage learns on tiny data: the answer loss falls (fixed seed, tiny model, few docs)."""
import random

import torch

from icicle.configs import StageConfig, get_config
from icicle.model import Decoder, ModelConfig
from icicle.negatives import RandomNegatives
from icicle.train import (Corpus, docid_vocab, index_instances, loss_on, run_stage0, run_stage1, select_corpus,
                          stage1_instances)
from dataclasses import replace

MICRO = ModelConfig(vocab_size=49153, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64)


def _setup(tok, split):
    cfg = replace(get_config("tiny"), model=MICRO, n_seen_docs=8, max_summary_tokens=8, index_text_tokens=16,
                  stage0=StageConfig(epochs=25, lr=1e-2, batch=8), stage1=StageConfig(epochs=6, lr=5e-3, batch=8))
    c = select_corpus(split, cfg)
    c = Corpus(c.seen, c.train_queries[:10], c.docs)
    return cfg, c, docid_vocab(tok, c.seen)


def test_stage0_indexing_loss_falls(tok, split):
    torch.manual_seed(0)
    cfg, c, ov = _setup(tok, split)
    m = Decoder(cfg.model)
    insts = index_instances(tok, c, cfg)
    before = loss_on(m, insts, ov).item()
    run_stage0(m, tok, c, cfg, log=lambda s: None, out_vocab=ov)
    after = loss_on(m, insts, ov).item()
    assert after < 0.5 * before, (before, after)


def test_stage1_icl_loss_falls(tok, split):
    torch.manual_seed(0)
    cfg, c, ov = _setup(tok, split)
    m = Decoder(cfg.model)
    negs = RandomNegatives(c.seen)
    anchors = index_instances(tok, c, cfg)
    probe = stage1_instances(tok, c, cfg, negs, random.Random(99), anchors)
    assert any(i.answer[0] == tok.copy_id for i in probe) and any(i.answer[0] != tok.copy_id for i in probe)
    before = loss_on(m, probe, ov).item()
    run_stage1(m, tok, c, cfg, negs, log=lambda s: None, out_vocab=ov)
    after = loss_on(m, probe, ov).item()
    assert after < 0.7 * before, (before, after)
