"""Stages 2 (DPO) and 3 (title-only LoRA) learn on tiny data, and LoRA merging is exact."""
import random

import pytest
from dataclasses import replace

import torch

from icicle.align import (LoRALinear, Pair, add_lora, dpo_margins, merge_lora, mine_pairs, run_stage2, run_stage3,
                          title_only_instances)
from icicle.configs import StageConfig, get_config
from icicle.decode import Trie
from icicle.model import Decoder, ModelConfig
from icicle.negatives import RandomNegatives
from icicle.train import Corpus, docid_vocab, loss_on, run_stage0, run_stage1, select_corpus

MICRO = ModelConfig(vocab_size=49153, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64,
                    max_context_tokens=384)


def _setup(tok, split, **kw):
    cfg = replace(get_config("tiny"), model=MICRO, n_seen_docs=8, max_summary_tokens=8, index_text_tokens=16,
                  stage0=StageConfig(epochs=15, lr=1e-2, batch=8), stage1=StageConfig(epochs=4, lr=5e-3, batch=8),
                  **kw)
    c = select_corpus(split, cfg)
    c = Corpus(c.seen, c.train_queries[:10], c.docs, c.copy_queries[:10])
    return cfg, c, docid_vocab(tok, c.seen + [q.docid for q in c.copy_queries])


def test_mined_pairs_are_failures_of_the_model(tok, split):
    torch.manual_seed(0)
    cfg, c, ov = _setup(tok, split)
    m = Decoder(cfg.model)  # untrained: almost every instance fails
    gtrie = Trie.build(c.seen, tok.encode, tok.end_id)
    pairs, stats = mine_pairs(m, tok, cfg, c, RandomNegatives(c.seen), gtrie, random.Random(1), beam=4, max_pairs=50)
    assert stats["routing"] + stats["ranking"] == len(pairs) > 0
    for p in pairs:
        assert p.chosen != p.rejected
        if p.kind == "routing":
            assert p.chosen[0] == tok.copy_id and p.rejected[0] != tok.copy_id
        assert p.chosen[-1] == tok.end_id and p.rejected[-1] == tok.end_id


@pytest.mark.slow
def test_stage2_dpo_prefers_chosen_after_training(tok, split):
    torch.manual_seed(0)
    cfg, c, ov = _setup(tok, split, stage2=StageConfig(epochs=6, lr=3e-3, batch=8, warmup=0.1), dpo_beta=0.1)
    m = Decoder(cfg.model)
    run_stage0(m, tok, c, cfg, log=lambda s: None, out_vocab=ov)
    gtrie = Trie.build(c.seen, tok.encode, tok.end_id)
    pairs, _ = mine_pairs(m, tok, cfg, c, RandomNegatives(c.seen), gtrie, random.Random(1), beam=4, max_pairs=40)
    assert len(pairs) >= 10
    r = run_stage2(m, pairs, ov, cfg, log=lambda s: None)
    assert r["pair_acc_after"] > r["pair_acc_before"], r
    assert r["margin_after"] > r["margin_before"] + 1.0, r
    assert sum(r["losses"][-4:]) / 4 < sum(r["losses"][:4]) / 4, r["losses"]


def test_dpo_margins_are_log_ratio(tok):
    torch.manual_seed(0)
    m = Decoder(MICRO)
    ov = torch.tensor(sorted({0, tok.copy_id, *tok.encode("Paris"), *tok.encode("Rome")}))
    p = Pair(tok.encode("Query: capital of France\nOutput:\n"), tok.docid("Paris"), tok.docid("Rome"), "ranking")
    flipped = Pair(p.prompt, p.rejected, p.chosen, "ranking")
    a, b = dpo_margins(m, [p, flipped], ov)
    assert abs(a + b) < 1e-5 and abs(a) > 0


def test_lora_merge_is_exact_and_starts_as_identity():
    torch.manual_seed(0)
    m = Decoder(MICRO)
    ids = torch.randint(0, 1000, (2, 12))
    pad = torch.ones_like(ids, dtype=torch.bool)
    gb, gt = torch.tensor([0, 1]), torch.tensor([11, 11])
    base = m.train_logits(ids, pad, gb, gt).detach()
    n = add_lora(m, r=4, alpha=8, dropout=0.0)
    assert n > 0 and all(not p.requires_grad for name, p in m.named_parameters() if ".a" not in name[-2:]
                         and not name.endswith(".b"))
    assert torch.allclose(m.train_logits(ids, pad, gb, gt), base, atol=1e-6)  # B = 0
    for mod in m.modules():
        if isinstance(mod, LoRALinear):
            torch.nn.init.normal_(mod.b, std=0.05)
    m.eval()
    adapted = m.train_logits(ids, pad, gb, gt).detach()
    assert not torch.allclose(adapted, base, atol=1e-4)
    merge_lora(m)
    assert not any(isinstance(x, LoRALinear) for x in m.modules())
    assert torch.allclose(m.train_logits(ids, pad, gb, gt), adapted, atol=1e-4)
    assert set(m.state_dict()) == set(Decoder(MICRO).state_dict())  # exports like any Decoder


@pytest.mark.slow
def test_stage3_title_only_loss_falls_and_only_lora_trains(tok, split):
    torch.manual_seed(0)
    cfg, c, ov = _setup(tok, split, stage3=StageConfig(epochs=8, lr=1e-2, batch=8, warmup=0.1), lora_r=8,
                        k_choices=(5, 10), stage3_instances=40)
    m = Decoder(cfg.model)
    run_stage0(m, tok, c, cfg, log=lambda s: None, out_vocab=ov)
    run_stage1(m, tok, c, cfg, RandomNegatives(c.seen), log=lambda s: None, out_vocab=ov)
    negs = RandomNegatives(c.seen + [q.docid for q in c.copy_queries])
    probe = title_only_instances(tok, cfg, c, negs, random.Random(cfg.seed * 7), 40)  # the training set
    assert any(i.answer[0] == tok.copy_id for i in probe) and any(i.answer[0] != tok.copy_id for i in probe)
    emb = m.embed_tokens.weight.detach().clone()
    before = loss_on(m, probe, ov).item()
    losses, trainable = run_stage3(m, tok, cfg, c, negs, ov, log=lambda s: None)
    after = loss_on(m, probe, ov).item()
    assert trainable < sum(p.numel() for p in m.parameters()) // 10
    assert torch.equal(m.embed_tokens.weight, emb)  # frozen backbone
    assert after < 0.9 * before, (before, after)  # a no-op stage leaves it equal
