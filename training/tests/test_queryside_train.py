"""icicle.queryside: the trained query side over frozen, cached blocks computes what block reading computes."""
import copy
import types

import numpy as np
import pytest
import torch

from icicle import model as M
from icicle.decode import CachedPromptScorer, block_attention
from icicle.queryside import Args, BlockCache, _portable, _start_state, query_batch, query_logits, split_step, stopping_rule
from icicle.reader import batch_layout
from icicle.train import Instance, _batch

CFG = M.ModelConfig(vocab_size=40, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=48)
HEADER = [1, 2, 3]
OV = torch.arange(20, 30)


def decoder(seed: int) -> M.Decoder:
    torch.manual_seed(seed)
    m = M.Decoder(CFG)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.3)  # far from uniform attention: a wrong position or mask changes the logits
    return m.eval()


def instance(blocks: list[list[int]], query: list[int], answer: list[int]) -> Instance:
    prompt, segs = list(HEADER), [len(HEADER)]
    for b in blocks:
        prompt += b
        segs.append(len(prompt))
    return Instance(prompt + query, answer, segments=segs)


INSTS = [instance([[4, 5, 6], [7, 8], [9, 10, 11, 12]], [13, 14], [20, 21, 22]),
         instance([[7, 8], [15, 16, 17, 18, 19]], [13, 31, 14], [25, 26])]


def block_reading_logits(m: M.Decoder, insts: list[Instance]) -> torch.Tensor:
    """What icicle.reader --blocks shared computes: the whole prompt in one forward under the block layout."""
    ids, pad, gb, gt, _ = _batch(insts)
    lay = batch_layout(insts, ids.shape[1], "shared")
    return m.train_logits(ids, pad, gb, gt, OV, layout=lay)


def test_same_weights_equal_block_reading():
    frozen = decoder(0)
    cache = BlockCache(frozen, HEADER)
    with torch.no_grad():
        got, tgt = query_logits(copy.deepcopy(frozen), cache, INSTS, OV)
        want = block_reading_logits(frozen, INSTS)
        causal = frozen.train_logits(*_batch(INSTS)[:4], OV)
    assert tgt.tolist() == [20, 21, 22, 25, 26]
    # float16 keys and values in the cache: close, not equal
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert (causal - want).abs().max() > 0.5  # the layout matters here, so the comparison above can fail


def test_trained_query_side_equals_split_prefill():
    frozen, trained = decoder(0), decoder(1)
    trained.embed_tokens.weight = frozen.embed_tokens.weight
    cache = BlockCache(frozen, HEADER)
    inst = INSTS[0]
    with torch.no_grad():
        got, _ = query_logits(trained, cache, [inst], OV)
    # the evaluation's path: a prefill split at the query, then the answer's prefixes over its keys and values
    held = {"p": types.SimpleNamespace(ids=inst.prompt, segments=inst.segments)}
    lay = block_attention(inst.segments, len(inst.prompt), "shared")
    sc = CachedPromptScorer(split_step(frozen, trained, held), inst.prompt,
                            [p.numpy() for p in trained.empty_past()], lay)
    for j in range(len(inst.answer)):
        z = sc.logits(tuple(inst.answer[:j]))
        np.testing.assert_allclose(got[j].numpy(), z[OV.numpy()], atol=2e-2, rtol=2e-2)
    # and not what the trained weights give when they read the blocks themselves
    with torch.no_grad():
        own = block_reading_logits(trained, [inst])
    assert (own - got).abs().max() > 0.5


def test_instance_without_blocks_runs_causally():
    frozen = decoder(0)
    inst = Instance([5, 6, 7, 8], [20, 21])
    with torch.no_grad():
        got, _ = query_logits(frozen, BlockCache(frozen, HEADER), [inst], OV)
        want = frozen.train_logits(*_batch([inst])[:4], OV)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_batch_pads_past_and_query():
    cache = BlockCache(decoder(0), HEADER)
    ids, pos, mask, past, gb, gt, tgt = query_batch(cache, INSTS)
    assert ids.shape == (2, 4) and len(past) == 2 * CFG.layers
    assert past[0].shape[1] == 3 + 9  # the header and the first instance's three blocks
    assert pos[0, 0].item() == 3 + 4 and pos[1, 0].item() == 3 + 5  # after the header and the longest block
    assert (mask[1, :, 3 + 7: 12] < -1e8).all()  # the second instance's past is 10 long, then padding
    assert (mask[1, :, :10] == 0).all()
    assert gt.tolist() == [1, 2, 3, 2, 3] and gb.tolist() == [0, 0, 0, 1, 1]


def test_cache_persists_and_refuses_other_weights(tmp_path):
    frozen = decoder(0)
    c = BlockCache(frozen, HEADER, str(tmp_path), "w0", batch=2)
    blocks = [[4, 5, 6], [7, 8], [9, 10, 11, 12]]
    assert c.fill(blocks, log=lambda s: None) == 3
    assert c.fill(blocks, log=lambda s: None) == 0
    again = BlockCache(frozen, HEADER, str(tmp_path), "w0")
    assert len(again.kv) == 3
    for b in blocks:
        torch.testing.assert_close(again.get(b), c.get(b), atol=0, rtol=0)
    assert again.misses == 0
    with pytest.raises(SystemExit, match="other frozen weights"):
        BlockCache(frozen, HEADER, str(tmp_path), "w1")


def test_training_step_leaves_blocks_and_embedding():
    frozen = decoder(0)
    trained = copy.deepcopy(frozen)
    trained.embed_tokens.weight = frozen.embed_tokens.weight
    frozen.requires_grad_(False)
    cache = BlockCache(frozen, HEADER)
    with torch.no_grad():
        query_logits(trained, cache, INSTS, OV)  # fills the cache
    before = {k: v.clone() for k, v in cache.kv.items()}
    params = [p for n, p in trained.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.AdamW(params, lr=1e-2)
    emb = frozen.embed_tokens.weight.clone()
    logits, tgt = query_logits(trained, cache, INSTS, OV)
    torch.nn.functional.cross_entropy(logits, torch.searchsorted(OV, tgt)).backward()
    opt.step()
    assert torch.equal(frozen.embed_tokens.weight, emb)
    assert all(torch.equal(cache.kv[k], v) for k, v in before.items()) and len(cache.kv) == 4
    assert not torch.equal(trained.layers[0].mlp.up_proj.weight, frozen.layers[0].mlp.up_proj.weight)


def test_stopping_rule_counts_evaluations_without_a_gain():
    best, flat = -1.0, 0
    for pick, want in ((0.60, 0), (0.62, 0), (0.62, 1), (0.61, 2)):
        best, flat = stopping_rule(best, flat, pick)
        assert flat == want
    assert best == 0.62
    assert stopping_rule(0.62, 2, 0.63) == (0.63, 0)


def test_start_continues_an_exported_run_and_refuses_other_frozen_weights(tmp_path):
    import json

    frozen, out = tmp_path / "b7", tmp_path / "q1"
    frozen.mkdir()
    out.mkdir()
    curve = [{"instances": 0, "heldout_shuffled": {"copy_pick": 0.58}},
             {"instances": 10000, "heldout_shuffled": {"copy_pick": 0.57}}]
    rep = {"trainer": "icicle.queryside", "frozen": "../b7", "instances": 12000, "steps": 750, "seconds": 7000,
           "curve": curve}
    (out / "train_report.json").write_text(json.dumps(rep))
    a = Args(set="s", work=str(tmp_path / "w"), init=str(frozen / "delta.safetensors"), start=str(out))
    assert _start_state(a) == {"step": 750, "instances": 12000, "seconds": 7000.0, "best": 0.58, "flat": 1,
                               "evaluated": 10000}
    other = Args(set="s", work=str(tmp_path / "w"), init=str(tmp_path / "r24a" / "delta.safetensors"), start=str(out))
    with pytest.raises(SystemExit, match="not over --init"):
        _start_state(other)
    with pytest.raises(SystemExit, match="no train_report.json"):
        _start_state(Args(set="s", work="w", init=a.init, start=str(frozen)))


def test_portable_report_args_name_no_machine_path():
    import os

    from icicle import readerdata

    got = _portable({"init": os.path.join(readerdata.REPO, "models", "b7", "delta.safetensors"),
                     "set": os.path.expanduser("~/.cache/icicle/readerset/readerset.json.gz"), "batch": 16,
                     "out": "/srv/elsewhere/x"})
    assert got == {"init": "models/b7/delta.safetensors", "set": "~/.cache/icicle/readerset/readerset.json.gz",
                   "batch": 16, "out": "/srv/elsewhere/x"}


def _encode(s: str) -> list[int]:
    return [3 + ord(c) % 30 for c in s]


MAN = {"max_prompt_tokens": 200, "max_summary_tokens": 4, "prompt_format": 2,
       "template": {"header": "H:\n", "candidate": "- {summary}\nT:\n{title}\n", "candidate_title_only": "- T:\n{title}\n",
                    "query": "Q: {query}\nA:\n"}}
CASE = {"query": "who", "candidates": [{"title": "ab", "summary": "long summary"}, {"title": "c", "summary": "xy"}]}


def test_block_golden_reads_frozen_blocks_and_the_trained_query():
    from icicle.prompt import Candidate, build_prompt
    from icicle.queryside import block_golden, causal_golden

    frozen = decoder(0)
    p = build_prompt(_encode, CASE["query"], [Candidate(**c) for c in CASE["candidates"]], 200, max_summary_tokens=4,
                     template=MAN["template"], prompt_format=2, fixed_cap=True)
    with torch.no_grad():
        same = block_golden(frozen, copy.deepcopy(frozen), MAN, [CASE], _encode)[0]
        other = block_golden(frozen, decoder(1), MAN, [CASE], _encode)[0]
        n = len(p.ids)
        attend, pos = block_attention(p.segments, n, "shared")
        mask = torch.from_numpy(np.where(attend, 0.0, -1e9).astype(np.float32))[None]
        past = frozen.empty_past()
        whole = frozen.step(torch.tensor([p.ids]), torch.from_numpy(pos)[None], mask, torch.tensor([n - 1]), *past)[0][0, -1]
        causal = causal_golden(frozen, [{"input_ids": p.ids}])[0]
    assert same["input_ids"] == p.ids and same["segments"] == p.segments and p.summary_tokens == [4, 2]
    # with the trained weights equal to the frozen ones, the split read is the one-pass block reading
    for tok, val in same["last_logits_top"]:
        assert abs(float(whole[tok]) - val) < 1e-4
    assert [t for t, _ in other["last_logits_top"]] != [t for t, _ in same["last_logits_top"]]
    # and not causal reading (so the comparison above can fail)
    assert max(abs(a[1] - b[1]) for a, b in zip(causal["last_logits_top"], same["last_logits_top"])) > 1e-2
