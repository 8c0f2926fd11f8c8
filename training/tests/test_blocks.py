"""Block reading's scorer (icicle.lab.blocks): the pieces rebuild the prompt, one block reads as the full prefill,
and with several blocks a block no longer sees the others."""
import numpy as np
import torch

from icicle.decode import CachedPromptScorer, torch_step
from icicle.lab.blocks import BlockScorer, split_prompt
from icicle.model import Decoder, ModelConfig
from icicle.prompt import Candidate


def _model():
    torch.manual_seed(0)
    return Decoder(ModelConfig(vocab_size=49153, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16,
                               intermediate=64, max_context_tokens=1024)).eval()


def test_blocks_rebuild_the_prompt_and_one_block_reads_as_full(tok):
    m = _model()
    step, empty = torch_step(m, resident=False), [p.numpy() for p in m.empty_past()]
    one = [Candidate("Horsehead Nebula", "A dark nebula in the constellation Orion.")]
    header, blocks, query, inc = split_prompt(tok.encode, "what is it", one, 512, 24)
    assert inc == 1 and len(blocks) == 1
    full = CachedPromptScorer(step, header + blocks[0] + query, empty)
    for mode in ("contiguous", "shared"):
        b = BlockScorer(step, header, blocks, query, empty, mode)
        np.testing.assert_allclose(b.logits(()), full.logits(()), atol=1e-4)
        np.testing.assert_allclose(b.logits((5, 7)), full.logits((5, 7)), atol=1e-4)


def test_a_block_does_not_see_the_others(tok):
    m = _model()
    step, empty = torch_step(m, resident=False), [p.numpy() for p in m.empty_past()]
    a = Candidate("Horsehead Nebula", "A dark nebula in the constellation Orion.")
    b = Candidate("Orion", "A constellation on the celestial equator.")
    c = Candidate("Sirius", "The brightest star in the night sky.")
    h1, bl1, q1, _ = split_prompt(tok.encode, "what is it", [a, b], 512, 24)
    h2, bl2, q2, _ = split_prompt(tok.encode, "what is it", [c, b], 512, 24)
    full1 = CachedPromptScorer(step, h1 + bl1[0] + bl1[1] + q1, empty).logits(())
    full2 = CachedPromptScorer(step, h2 + bl2[0] + bl2[1] + q2, empty).logits(())
    assert np.abs(full1 - full2).max() > 1e-3  # the full prefill depends on every block
    # shared positions: the answer depends on the blocks as a set, not on their order
    s_ab = BlockScorer(step, h1, bl1, q1, empty, "shared").logits(())
    s_ba = BlockScorer(step, h1, [bl1[1], bl1[0]], q1, empty, "shared").logits(())
    np.testing.assert_allclose(s_ab, s_ba, atol=1e-4)
    # contiguous positions keep the order: the same two blocks listed the other way round read differently
    c_ab = BlockScorer(step, h1, bl1, q1, empty, "contiguous").logits(())
    c_ba = BlockScorer(step, h1, [bl1[1], bl1[0]], q1, empty, "contiguous").logits(())
    assert np.abs(c_ab - c_ba).max() > 1e-4
    # another block in the list changes the answer: the query reads every block
    s_cb = BlockScorer(step, h2, bl2, q2, empty, "shared")
    assert np.abs(s_cb.logits(()) - s_ab).max() > 1e-3
