"""Block reading (icicle.lab.blocks' cached scorer, decode.block_attention's one-mask form, the block template): the
pieces rebuild the prompt, one shared block reads as the full prefill, a block does not see the others, and the
one-mask form reads as the cached blocks."""
import numpy as np
import torch

from icicle.decode import CachedPromptScorer, block_attention, torch_step
from icicle.lab.blocks import BlockScorer, split_prompt
from icicle.model import Decoder, ModelConfig
from icicle.prompt import TEMPLATE_BLOCKS, Candidate, build_prompt


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
    b = BlockScorer(step, header, blocks, query, empty, "shared")  # one block over the header: causal reading
    np.testing.assert_allclose(b.logits(()), full.logits(()), atol=1e-4)
    np.testing.assert_allclose(b.logits((5, 7)), full.logits((5, 7)), atol=1e-4)
    c = BlockScorer(step, header, blocks, query, empty, "contiguous")  # the block does not see the header
    assert np.abs(c.logits(()) - full.logits(())).max() > 1e-4


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


def test_one_mask_reads_as_the_stored_blocks(tok):
    """decode.block_attention (training's and serve_table's one-mask form) gives the logits of the cached form
    (each block computed on its own, then the query over all: what the Go engine does with stored blocks), for
    both layouts and for the answer tokens after the prompt."""
    m = _model()
    step, empty = torch_step(m, resident=False), [p.numpy() for p in m.empty_past()]
    cands = [Candidate("Horsehead Nebula", "A dark nebula in the constellation Orion."),
             Candidate("Orion", "A constellation on the celestial equator."),
             Candidate("Sirius", "The brightest star in the night sky, in Canis Major.")]
    header, blocks, query, inc = split_prompt(tok.encode, "what is it", cands, 512, 24)
    p = build_prompt(tok.encode, "what is it", cands, 512, max_summary_tokens=24, prompt_format=2)
    assert p.segments == [len(header)] + [len(header) + sum(len(b) for b in blocks[:i + 1]) for i in range(inc)]
    for mode in ("contiguous", "shared"):
        one = CachedPromptScorer(step, p.ids, empty, block_attention(p.segments, len(p.ids), mode))
        cached = BlockScorer(step, header, blocks, query, empty, mode)
        np.testing.assert_allclose(one.logits(()), cached.logits(()), atol=1e-4)
        np.testing.assert_allclose(one.logits((5, 7)), cached.logits((5, 7)), atol=1e-4)
    causal = CachedPromptScorer(step, p.ids, empty).logits(())
    assert np.abs(causal - CachedPromptScorer(step, p.ids, empty, block_attention(p.segments, len(p.ids), "shared"))
                  .logits(())).max() > 1e-4


def test_block_template_blocks_are_the_same_in_any_list(tok):
    """The block template (no "[i]") with fixed_cap: a candidate's block is the same ids at any place, its summary
    cut to the cap whatever the room, and a candidate goes in whole or not at all."""
    a = Candidate("Horsehead Nebula", "A dark nebula in the constellation Orion, " * 5)
    b = Candidate("Orion", "A constellation.")
    kw = dict(max_summary_tokens=12, prompt_format=2, template=TEMPLATE_BLOCKS, fixed_cap=True)
    p = build_prompt(tok.encode, "q", [a, b], 512, **kw)
    q = build_prompt(tok.encode, "q", [b, a], 512, **kw)
    seg = lambda x, i: x.ids[x.segments[i]:x.segments[i + 1]]
    assert seg(p, 0) == seg(q, 1) and seg(p, 1) == seg(q, 0)
    assert p.summary_tokens[0] == 12
    tight = build_prompt(tok.encode, "q", [a, b], p.segments[1] + len(p.ids) - p.segments[2] + 2, **kw)
    assert tight.included == 1 and tight.summary_tokens == [12]
