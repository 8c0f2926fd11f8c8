"""Pure pieces of the issue-16 experiments: synthetic queries and the query-first prompt."""
import random

from icicle.experiment import Exp, make_builder, synthetic_query
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
