"""Pure pieces of the issue-16 experiments: synthetic queries, the query-first prompt, the export hand-off."""
import json
import os
import random

import pytest
import torch

from icicle.model import Decoder

from icicle.lab.experiment import MODELS, PRETRAINED, Exp, main, make_builder, save_for_export, synthetic_query, visible_query
from icicle.train import retitled
from icicle.prompt import TEMPLATE_V2, Candidate, build_prompt


def test_synthetic_query_is_a_span_of_an_early_sentence():
    text = ("Alpha beta gamma delta epsilon zeta eta theta. Iota kappa lambda mu nu xi omicron pi. "
            "Rho sigma tau upsilon phi chi psi omega. Never used sentence here at all today.")
    words = set(text.replace(".", "").split()) - {"Never", "used", "sentence", "here", "at", "all", "today"}
    for seed in range(20):
        q = synthetic_query(text, random.Random(seed))
        assert q is not None and 3 <= len(q.split()) <= 16
        assert set(q.rstrip(".").replace(".", "").split()) <= words
    assert synthetic_query("Too short.", random.Random(0)) is None


def test_query_first_prompt(tok):
    cands = [Candidate("Horsehead Nebula", "A dark nebula in Orion."), Candidate("Orion", "A constellation.")]
    plain = make_builder(tok, Exp("x", prompt_format=2, budget=400))("what is it", cands)
    assert plain.ids == build_prompt(tok.encode, "what is it", cands, 400, max_summary_tokens=24, prompt_format=2).ids
    qf = make_builder(tok, Exp("x", prompt_format=2, budget=400, query_first=True))("what is it", cands)
    h, q = tok.encode(TEMPLATE_V2["header"]), tok.encode("Query: what is it\n")
    assert qf.ids[: len(h)] == h and qf.ids[len(h): len(h) + len(q)] == q
    assert qf.ids[len(h) + len(q):] == plain.ids[len(h):]  # then the same candidates and query block
    tight = make_builder(tok, Exp("x", prompt_format=2, budget=len(plain.ids), query_first=True))("what is it", cands)
    assert len(tight.ids) <= len(plain.ids)  # the extra block counts in the budget


def test_visible_query_is_a_span_of_the_shown_words():
    text = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 hidden1 hidden2 hidden3 hidden4."
    got = [visible_query(text, random.Random(seed)) for seed in range(30)]
    spans = [q for q in got if q is not None]  # None: the drops left fewer than 3 words
    assert len(spans) >= 20
    for q in spans:
        assert 3 <= len(q.split()) <= 8
        assert not any(w.startswith("hidden") for w in q.split())
    assert visible_query("one two three", random.Random(0)) is None


def test_retitled_gives_each_candidate_a_distinct_pool_title():
    pool = [f"d{i}" for i in range(50)]
    m = retitled(["a", "b", "c"], pool, random.Random(3))
    assert sorted(m) == ["a", "b", "c"] and len(set(m.values())) == 3 and set(m.values()) <= set(pool)
    assert m == retitled(["a", "b", "c"], pool, random.Random(3))


def test_save_for_export_writes_what_export_dir_reads(tmp_path):
    model = Decoder(MODELS["2x64"])
    save_for_export(model, Exp("r", model=PRETRAINED, save_work=str(tmp_path)), str(tmp_path), 7, 1.5)
    back = Decoder(MODELS["2x64"])
    back.load_state_dict(torch.load(os.path.join(tmp_path, "stage3.pt")))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values()))
    m = json.load(open(os.path.join(tmp_path, "train_metrics.json")))
    assert m["config"] == "smollm30" and m["steps"] == 7 and m["experiment"]["name"] == "r"


def test_save_work_is_refused_for_a_from_scratch_model(tmp_path, capsys):
    with pytest.raises(SystemExit) as ex:
        main(["--name", "x", "--model", "2x64", "--save-work", str(tmp_path)])
    assert ex.value.code == 2 and "--save-work" in capsys.readouterr().err
    assert not os.listdir(tmp_path)
