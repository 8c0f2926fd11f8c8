"""The GENRE-style HF baseline (icicle.lab.hf_baseline): same logits as our decoder, Algorithm 1 never empty."""
import os

import pytest
import torch

from icicle.lab import hf_baseline as hb
from icicle.decode import Trie
from icicle.prompt import Candidate, build_prompt


@pytest.fixture(scope="module")
def models(fixture_dir):
    dec, _ = hb.load_decoder(fixture_dir, ckpt=None)  # from model.onnx's initializers: what Go runs
    return dec, hb.build_hf_llama(dec)


def test_hf_llama_logits_equal_decoder_and_onnx(fixture_dir, models, tok):
    from icicle.export import ort_session

    dec, hf = models
    assert hf.config.tie_word_embeddings and hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    p = build_prompt(tok.encode, "who appoints the chair of the federal reserve",
                     [Candidate("Federal Reserve", "The Federal Reserve System is the central bank.")], 512)
    d = hb.logit_diff(hf, dec, p.ids, ort_session(os.path.join(fixture_dir, "model.onnx")))
    assert d["hf_vs_torch"] <= hb.LOGITS_ATOL and d["hf_vs_onnx"] <= hb.LOGITS_ATOL, d


def test_allowed_fn_follows_algorithm_1_and_is_never_empty(tok):
    end, copy = tok.end_id, tok.copy_id
    g = Trie.build(["Alpha", "Alpine", "Beta"], tok.encode, end)
    ctx = Trie.build(["Gamma"], tok.encode, end)
    prompt = [5, 6, 7]
    fn = hb.make_allowed_fn(len(prompt), g, ctx, copy, end)
    ids = lambda gen: torch.tensor(prompt + gen)  # noqa: E731
    assert fn(0, ids([])) == [copy] + sorted(g.root.children)
    gamma = tok.encode("Gamma")
    assert fn(0, ids([copy])) == [gamma[0]]  # after [COPY]: the context trie
    assert fn(0, ids([copy] + gamma)) == [end]
    alpha = tok.encode("Alpha")
    assert fn(0, ids(alpha[:1])) == sorted(g.root.children[alpha[0]].children)  # otherwise the global trie
    # off-trie prefixes and finished docids: only [end], never []
    for gen in ([copy] + gamma + [end], alpha + [end], alpha + [end, end], [123456], [copy, 123456]):
        assert fn(0, ids(gen)) == [end]
    # no candidates: no [COPY] at step 0; nothing at all: [end] rather than []
    assert copy not in hb.make_allowed_fn(3, g, Trie(), copy, end)(0, ids([]))
    assert hb.make_allowed_fn(3, Trie(), Trie(), copy, end)(0, ids([])) == [end]
    assert hb.parse_answer([copy] + gamma + [end], g, ctx, copy, end) == ("Gamma", "copy")
    assert hb.parse_answer(alpha + [end, end], g, ctx, copy, end) == ("Alpha", "parametric")
    assert hb.parse_answer(alpha, g, ctx, copy, end) == (None, "parametric")
