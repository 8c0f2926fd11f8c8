"""Each implemented stage learns on tiny data: the answer loss falls (fixed seed, tiny model, few docs)."""
import random

import torch

from icicle.configs import StageConfig, get_config
from icicle.model import Decoder, ModelConfig
from icicle.negatives import RandomNegatives
from icicle.train import (Corpus, Instance, choice_loss_on, copy_choices, curriculum_sizes, docid_vocab, index_instances,
                          loss_on, run_stage0, run_stage1, select_corpus, stage1_instances, widened)
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


def test_curriculum_starts_with_the_first_size_and_ends_with_all():
    sizes = (1, 3, 5, 10, 20, 50, 100)
    got = [curriculum_sizes(sizes, e, 6) for e in range(6)]
    assert got[0] == (1,) and got[-1] == sizes
    assert all(len(a) <= len(b) for a, b in zip(got, got[1:]))
    assert curriculum_sizes(sizes, 0, 1) == sizes  # one epoch: no curriculum to spread


def test_widened_adds_a_size_per_share_of_the_run():
    sizes = (1, 3, 5, 10)
    assert [widened(sizes, f) for f in (0.0, 0.24, 0.25, 0.5, 0.99)] == [
        (1,), (1,), (1, 3), (1, 3, 5), sizes]


def test_copy_choices_are_the_trie_children_on_the_gold_path():
    cands = [[7, 2, 0], [7, 3, 0], [4, 0]]  # docid ids, 0 = end
    assert copy_choices(cands, 0) == [None, [4, 7], [2, 3], [0]]
    assert copy_choices(cands, 2) == [None, [4, 7], [0]]


def test_choice_loss_is_the_gold_among_its_choices(tok, split):
    torch.manual_seed(0)
    m = Decoder(MICRO)
    ov = docid_vocab(tok, ["Alpha", "Beta"])
    ans = [tok.copy_id, 11, 12]
    inst = Instance([5, 6, 7], ans, [None, [11, 13], [12]])
    got = choice_loss_on(m, [inst], ov).item()
    ids, pad = torch.tensor([[5, 6, 7, tok.copy_id, 11]]), torch.ones(1, 5, dtype=torch.bool)
    lg = m.train_logits(ids, pad, torch.tensor([0, 0, 0]), torch.tensor([2, 3, 4]))
    route = torch.log_softmax(lg[0, ov], -1)[torch.searchsorted(ov, torch.tensor(tok.copy_id))]
    pick = torch.log_softmax(lg[1, [11, 13]], -1)[0]
    want = -(route + pick + 0.0) / 3  # the one-choice position costs nothing
    assert abs(got - want.item()) < 1e-5
    assert choice_loss_on(m, [inst], ov, full_weight=1.0).item() > got
