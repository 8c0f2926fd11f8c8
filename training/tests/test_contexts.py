"""BM25 contexts (contexts.py) and the instances built from them: BM25 order, the gold's place, the budget."""
import random
from dataclasses import replace

import pytest
import torch

from icicle.configs import get_config
from icicle.contexts import BM25Contexts, ElasticsearchContexts, ShuffledContexts
from icicle.data import Doc, Query
from icicle.model import Decoder, ModelConfig
from icicle.prompt import build_prompt
from icicle.train import icl_instance

DOCS = {
    "Oslo": Doc("Oslo", "Oslo", "Oslo is the capital of Norway, on the Oslofjord."),
    "Bergen": Doc("Bergen", "Bergen", "Bergen is a city on the west coast of Norway, known for rain."),
    "Norway": Doc("Norway", "Norway", "Norway is a Nordic country whose capital is Oslo."),
    "Paris": Doc("Paris", "Paris", "Paris is the capital of France."),
    "Rome": Doc("Rome", "Rome", "Rome is the capital of Italy."),
    "Tea": Doc("Tea", "Tea", "Tea is a drink made from leaves."),
}


def test_ranked_is_bm25_order_and_context_places_the_gold():
    c = BM25Contexts(sorted(DOCS), DOCS)
    top = c.ranked("capital of Norway Oslofjord")
    assert top[0] == "Oslo" and set(top[:2]) == {"Oslo", "Norway"}
    q = Query("q1", "capital of Norway Oslofjord", "Oslo", "train")
    assert c.context(q, 3, with_gold=True)[0] == "Oslo"  # at its BM25 rank
    assert "Oslo" not in c.context(q, 3, with_gold=False)  # removed, the rest keeps BM25 order
    assert c.context(q, 3, with_gold=False) == [d for d in top if d != "Oslo"][:3]
    far = Query("q2", "capital of Norway Oslofjord", "Tea", "train")  # BM25 misses the gold in the top 2
    assert c.context(far, 2, with_gold=True) == [top[0], "Tea"]
    with pytest.raises(ValueError, match="context size n"):
        c.context(q, 0, with_gold=True)
    with pytest.raises(ValueError, match="non-empty pool"):
        BM25Contexts([], DOCS)


def test_shuffled_contexts_permute_the_top_n_only_and_stably_per_query():
    c = BM25Contexts(sorted(DOCS), DOCS)
    s = ShuffledContexts(c, n=3)
    for q in ("capital of Norway Oslofjord", "capital city", "rain Norway Bergen coast"):
        plain, shuffled = c.ranked(q), s.ranked(q)
        assert sorted(shuffled[:3]) == sorted(plain[:3]) and shuffled[3:] == plain[3:]
        assert s.ranked(q) == shuffled  # fixed by the query text
    qs = [f"capital of Norway {i}" for i in range(12)]
    assert any(s.ranked(q)[:3] != c.ranked(q)[:3] for q in qs)  # some order does change


def test_elasticsearch_contexts_send_the_sidecars_query():
    """The body adapter.searchBody sends for SearchNew (best_fields over title, text; seen=false)."""
    b = ElasticsearchContexts("http://127.0.0.1:9200/", depth=10).body("who sang it")
    mm = b["query"]["bool"]["must"]["multi_match"]
    assert mm == {"query": "who sang it", "type": "best_fields", "fields": ["title", "text"],
                  "tie_breaker": 0.5}
    assert b["query"]["bool"]["filter"] == [{"term": {"seen": False}}] and b["size"] == 10


def test_bm25_instance_keeps_the_gold_inside_the_budget(tok):
    cfg = replace(get_config("small"), context_n=(6,), max_summary_tokens=8)
    c = BM25Contexts(sorted(DOCS), DOCS)
    q = Query("q", "drink made from leaves", "Tea", "train")
    inst, titles = icl_instance(tok, cfg, q, DOCS, c, random.Random(0), True)
    assert titles[0] == "Tea" and inst.answer[0] == tok.copy_id
    # a budget that fits two candidates: when BM25 put the gold lower, it takes the last place that fits
    q2 = Query("q", "capital of Norway", "Tea", "train")
    fixed = len(build_prompt(tok.encode, q2.query, [], 10**6).ids)
    short = replace(cfg, max_prompt_tokens=fixed + 25)  # room for about two candidate blocks
    inst2, titles2 = icl_instance(tok, short, q2, DOCS, c, random.Random(0), True)
    assert 1 <= len(titles2) < len(DOCS) and titles2[-1] == "Tea" and inst2.answer[0] == tok.copy_id
    assert len(inst2.prompt) <= short.max_prompt_tokens
    noise, titles3 = icl_instance(tok, cfg, q, DOCS, c, random.Random(0), False)
    assert "Tea" not in titles3 and noise.answer[0] != tok.copy_id


def test_swap_titles_shows_pool_titles_over_the_same_summaries(tok):
    """TrainConfig.swap_titles: a retitled context-dependent instance shows pool titles above the candidates' own
    summaries, and its answer is [COPY] + the title shown above the gold's summary."""
    docs = dict(DOCS)
    for i in range(8):
        docs[f"Pool {i}"] = Doc(f"Pool {i}", f"Pool {i}", f"Unrelated pool text number {i}.")
    pool = [f"Pool {i}" for i in range(8)]
    cfg = replace(get_config("small"), context_n=(3,), swap_titles=1.0)
    c = BM25Contexts(sorted(DOCS), DOCS)
    q = Query("q", "drink made from leaves", "Tea", "train")
    inst, shown = icl_instance(tok, cfg, q, docs, c, random.Random(0), True, title_pool=pool)
    assert set(shown) <= set(pool) and len(set(shown)) == len(shown) == 3
    plain, real = icl_instance(tok, replace(cfg, swap_titles=0.0), q, docs, c, random.Random(0), True, title_pool=pool)
    gold_shown = shown[real.index("Tea")]
    assert inst.answer == [tok.copy_id] + tok.docid(gold_shown)
    text = tok.tk.decode(inst.prompt)
    assert "Tea is a drink" in text and "Title:\nTea\n" not in text and f"Title:\n{gold_shown}\n" in text
    # no pool, or a query-irrelevant instance: nothing is retitled
    assert icl_instance(tok, cfg, q, docs, c, random.Random(0), True)[1] == real
    noise, titles = icl_instance(tok, cfg, q, docs, c, random.Random(0), False, title_pool=pool)
    assert not set(titles) & set(pool)


def test_train_logits_fused_causal_equals_masked_step():
    """train_logits runs the fused causal kernel on a right-padded batch; each row must equal the contract
    step() (explicit additive mask) on that sequence alone."""
    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=50, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=40))
    seqs = [torch.randint(0, 50, (n,)) for n in (9, 5)]
    ids = torch.zeros(2, 9, dtype=torch.long)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
        pad[b, : len(s)] = True
    gb = torch.tensor([0, 0, 1])
    gt = torch.tensor([3, 8, 4])
    got = m.train_logits(ids, pad, gb, gt)
    from icicle.model import causal_mask

    for j, (b, t) in enumerate(zip(gb.tolist(), gt.tolist())):
        s = seqs[b][: t + 1].unsqueeze(0)
        want = m.step(s, torch.arange(t + 1).unsqueeze(0), causal_mask(0, t + 1), torch.tensor([t]), *m.empty_past())[0]
        assert torch.allclose(got[j], want[0, 0], atol=1e-5)
    left = pad.flip(1)
    with pytest.raises(ValueError, match="right padding"):
        m.train_logits(ids, left, gb, gt)
