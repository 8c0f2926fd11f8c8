"""icicle.lab.lengthscale: its blocks and its one-step copy scores are the block reading the sidecar does (the
one-mask form of decode.block_attention, title by title), and a length ref above every row's view changes nothing."""
import math

import numpy as np
import torch

from icicle.decode import CachedPromptScorer, block_attention, torch_step
from icicle.lab.lengthscale import blocks_of, copy_scores, picks
from icicle.model import Decoder, ModelConfig
from icicle.prompt import TEMPLATE_BLOCKS, Candidate, build_prompt


def test_copy_scores_are_the_block_readings_title_scores(tok):
    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=49153, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16,
                            intermediate=64, max_context_tokens=1024)).eval()
    cands = [Candidate("Horsehead Nebula", "A dark nebula in the constellation Orion."),
             Candidate("Orion", "A constellation on the celestial equator, named after a hunter."),
             Candidate("Sirius", "The brightest star in the night sky.")]
    p = build_prompt(tok.encode, "what is it", cands, 512, max_summary_tokens=24, prompt_format=2,
                     template=TEMPLATE_BLOCKS, fixed_cap=True)
    titles = [tok.encode(c.title) + [tok.end_id] for c in cands]
    h, hpast, blocks = blocks_of(m, p)
    got = copy_scores(m, h, hpast, blocks, p.ids[p.segments[-1]:], titles, tok.copy_id)
    ref = CachedPromptScorer(torch_step(m, resident=False), p.ids, [x.numpy() for x in m.empty_past()],
                             block_attention(p.segments, len(p.ids), "shared"))

    def lsm(z):
        z = z.astype(np.float64)
        return z - z.max() - math.log(np.exp(z - z.max()).sum())

    want = [sum(lsm(ref.logits((tok.copy_id,) + tuple(t[:i])))[t[i]] for i in range(len(t))) for t in titles]
    np.testing.assert_allclose(got, want, atol=1e-3)
    m.set_length_ref(10_000)  # no row sees that many: nothing changes
    assert copy_scores(m, h, hpast, blocks, p.ids[p.segments[-1]:], titles, tok.copy_id) == got
    m.set_length_ref(20)  # every query row sees more than 20: the scores move
    assert max(abs(a - b) for a, b in zip(copy_scores(m, h, hpast, blocks, p.ids[p.segments[-1]:], titles,
                                                      tok.copy_id), got)) > 1e-4
    # the prior takes the first place's title unless another is ahead by more than 4 x ln(its place)
    assert picks([-3.0, -2.0, -9.0]) == {"pick": 2, "pick_prior": 1, "top": -2.0}
