"""The device code path (icicle.device, --device): the same functions a GPU run uses, on every device torch has
here (the CPU in CI; CUDA too where a GPU is present), so the GPU path is the CPU path with the device as a
parameter."""
import random
import sys
from dataclasses import replace

import pytest
import torch

from icicle.configs import StageConfig, get_config
from icicle.decode import CachedPromptScorer, Trie, decode, torch_step
from icicle.device import autocast, micro_batches, release_free_memory, resolve_device, rss_gb
from icicle.model import Decoder, ModelConfig
from icicle.negatives import RandomNegatives
from icicle.train import (Corpus, accumulate_loss, docid_vocab, icl_instance, index_instances, loss_on,
                          run_stage0, select_corpus)

MICRO = ModelConfig(vocab_size=49153, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="only cpu and cuda"):
        resolve_device("meta")
    with pytest.raises(ValueError, match="--device 'nonsense'"):
        resolve_device("nonsense")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            resolve_device("cuda")


def test_micro_batches():
    assert micro_batches([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert micro_batches([1, 2, 3], 0) == [[1, 2, 3]]


def _setup(tok, split):
    cfg = replace(get_config("tiny"), model=MICRO, n_seen_docs=8, max_summary_tokens=8, index_text_tokens=16,
                  stage0=StageConfig(epochs=3, lr=1e-2, batch=8))
    c = select_corpus(split, cfg)
    return cfg, Corpus(c.seen, c.train_queries[:10], c.docs), docid_vocab(tok, c.seen)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_accumulation_equals_whole_batch(tok, split, device):
    cfg, c, ov = _setup(tok, split)
    insts = index_instances(tok, c, cfg)[:7]
    torch.manual_seed(0)
    m = Decoder(cfg.model).to(device)
    grads = []
    for micro in (0, 3):
        m.zero_grad(set_to_none=True)
        loss = accumulate_loss(m, insts, ov, micro, bf16=False)
        grads.append([p.grad.detach().clone() for p in m.parameters()])
        assert loss == pytest.approx(loss_on(m, insts, ov.to(device)).item(), rel=1e-4)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_stage0_and_resident_kv_decode_on_device(tok, split, device):
    """Stage 0 trains on the device (loss falls); the evaluation decoder with its KV cache kept on the device
    (resident torch tensors) scores exactly as the host-numpy path."""
    cfg, c, ov = _setup(tok, split)
    torch.manual_seed(0)
    m = Decoder(cfg.model).to(device)
    insts = index_instances(tok, c, cfg)
    before = loss_on(m, insts, ov.to(device)).item()
    losses = run_stage0(m, tok, c, replace(cfg, micro_batch=3), log=lambda s: None, out_vocab=ov.to(device))
    assert next(m.parameters()).device.type == device
    assert loss_on(m, insts, ov.to(device)).item() < before and len(losses) > 0
    q = c.train_queries[0]
    inst, titles = icl_instance(tok, cfg, q, c.docs, RandomNegatives(c.seen), random.Random(1), True)
    g, ctx = Trie.build(c.seen, tok.encode, tok.end_id), Trie.build(titles, tok.encode, tok.end_id)
    empty = [p.cpu().numpy() for p in m.empty_past()]
    res = [decode(CachedPromptScorer(torch_step(m, resident=r), inst.prompt, empty), g, ctx, tok.copy_id,
                  tok.end_id, 4) for r in (False, True)]
    assert [b.docid for b in res[0].beams] == [b.docid for b in res[1].beams]
    for a, b in zip(res[0].beams, res[1].beams):
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_autocast_per_device():
    with autocast(torch.device("cpu"), bf16=True):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    with autocast(torch.device("cpu"), bf16=False):
        assert not torch.is_autocast_enabled("cpu")


def test_heap_trim_and_resident_size_on_linux():
    """The reader's CPU runs trim the C heap above a resident size (reader.Args.trim_above_gb): both work here."""
    import platform

    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only (malloc_trim, /proc/self/statm)")
    before = rss_gb()
    assert before is not None and before > 0.01
    assert release_free_memory() is True
    assert 0 < rss_gb() <= before + 0.5
