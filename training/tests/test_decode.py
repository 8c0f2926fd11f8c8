"""Trie + routed decoding on a scripted fake model (no weights): exact scores countable by hand."""
import json
import math
import os

import numpy as np
import pytest

from icicle.decode import ContextFullError, EmptyAllowedSetError, Trie, decode, prompt_for_decoding
from icicle.prompt import TEMPLATE, Candidate

V, END, COPY = 16, 0, 15


class Fake:
    """Logits by answer prefix: table[prefix] = {token: logit}; unspecified tokens get 0."""

    def __init__(self, table):
        self.table = table
        self.calls = []

    def logits(self, prefix):
        self.calls.append(prefix)
        z = np.zeros(V, np.float32)
        for t, v in self.table.get(prefix, {}).items():
            z[t] = v
        return z


def trie(*seqs):
    t = Trie()
    for name, toks in seqs:
        t.add(list(toks) + [END], name)
    return t


def lsm(vals, i):
    m = max(vals)
    return vals[i] - (m + math.log(sum(math.exp(v - m) for v in vals)))


def test_copy_route_exact_and_forced_chains_cost_nothing():
    ctx = trie(("a", [1, 2, 3]), ("b", [1, 4]), ("c", [5]))
    g = trie(("g", [7, 8]))
    f = Fake({(): {COPY: 2.0, 7: 1.0}, (COPY,): {1: 1.0, 5: 0.0}, (COPY, 1): {2: 0.5, 4: 1.5}})
    r = decode(f, g, ctx, COPY, END, beam_width=10)
    lc = lsm([2.0, 1.0], 0)
    assert r.p_copy == pytest.approx(math.exp(lc))
    got = {b.docid: (b.route, b.score) for b in r.beams}
    assert got["a"] == ("copy", pytest.approx(lc + lsm([1, 0], 0) + lsm([0.5, 1.5], 0)))
    assert got["b"] == ("copy", pytest.approx(lc + lsm([1, 0], 0) + lsm([0.5, 1.5], 1)))
    assert got["c"] == ("copy", pytest.approx(lc + lsm([1, 0], 1)))  # [5] -> [end] is forced
    assert got["g"] == ("parametric", pytest.approx(lsm([2.0, 1.0], 1)))  # 7 -> 8 -> end forced
    # forced nodes are never run: only the root, the two copy branch points
    assert sorted(f.calls) == sorted([(), (COPY,), (COPY, 1)])


def test_vocab_scoring_pays_every_token_over_the_whole_vocabulary():
    # The same tries and logits as above, scored by the vocabulary: each step's log-softmax over all V tokens,
    # forced tokens (and the end token) included, so a title the trie completes where the model was heading
    # elsewhere costs what the model gives it.
    ctx = trie(("a", [1, 2, 3]), ("b", [1, 4]), ("c", [5]))
    g = trie(("g", [7, 8]))
    table = {(): {COPY: 2.0, 7: 1.0}, (COPY,): {1: 1.0, 5: 0.0}, (COPY, 1): {2: 0.5, 4: 1.5},
             (COPY, 1, 2): {3: -1.0, 9: 3.0}, (7,): {8: -2.0, 6: 2.0}}
    f = Fake(table)
    r = decode(f, g, ctx, COPY, END, beam_width=10, scoring="vocab")

    def full(prefix, t):
        z = [table.get(prefix, {}).get(i, 0.0) for i in range(V)]
        return lsm(z, t)

    lc = lsm([2.0, 1.0], 0)  # step 0 is renormalised over its allowed set, as with trie scoring
    assert r.p_copy == pytest.approx(math.exp(lc))
    got = {b.docid: (b.route, b.score) for b in r.beams}
    a = lc + full((COPY,), 1) + full((COPY, 1), 2) + full((COPY, 1, 2), 3) + full((COPY, 1, 2, 3), END)
    assert got["a"] == ("copy", pytest.approx(a))
    assert got["b"] == ("copy", pytest.approx(lc + full((COPY,), 1) + full((COPY, 1), 4) + full((COPY, 1, 4), END)))
    assert got["c"] == ("copy", pytest.approx(lc + full((COPY,), 5) + full((COPY, 5), END)))
    assert got["g"] == ("parametric", pytest.approx(lsm([2.0, 1.0], 1) + full((7,), 8) + full((7, 8), END)))
    # the forced 7 -> 8 the model scores at -2 against 6 at +2 now costs about 4 nats, not 0
    assert got["g"][1] < lsm([2.0, 1.0], 1) - 4
    with pytest.raises(ValueError, match="scoring"):
        decode(f, g, ctx, COPY, END, beam_width=10, scoring="softmax")


def test_parametric_beam_and_stop():
    g = trie(("x", [1, 2]), ("y", [1, 3]), ("z", [4]))
    f = Fake({(): {1: 1.0, 4: 0.0}, (1,): {2: 0.0, 3: 2.0}})
    r = decode(f, g, Trie(), COPY, END, beam_width=1)
    assert r.p_copy == 0.0
    assert [(b.docid, b.route) for b in r.beams] == [("y", "parametric")]
    assert r.beams[0].score == pytest.approx(lsm([1, 0], 0) + lsm([0, 2], 1))
    r = decode(f, g, Trie(), COPY, END, beam_width=3)
    assert [b.docid for b in r.beams] == ["y", "z", "x"]
    for b, want in zip(r.beams, [lsm([1, 0], 0) + lsm([0, 2], 1), lsm([1, 0], 1), lsm([1, 0], 0) + lsm([0, 2], 0)]):
        assert b.score == pytest.approx(want)


def test_parametric_equals_exhaustive_when_beam_covers_all():
    rng = np.random.default_rng(0)
    seqs = [("d%d" % i, list(rng.integers(1, 6, size=rng.integers(1, 4)))) for i in range(12)]
    g = trie(*seqs)
    table = {}

    def fill(node, prefix):
        if len(node.children) > 1:
            table[prefix] = {t: float(rng.normal()) for t in node.children}
        for t, ch in node.children.items():
            fill(ch, prefix + (t,))

    fill(g.root, ())
    r = decode(Fake(table), g, Trie(), COPY, END, beam_width=64)

    def exact(toks):
        node, s, p = g.root, 0.0, ()
        for t in toks + [END]:
            if len(node.children) > 1:
                ch = sorted(node.children)
                s += lsm([table[p].get(c, 0.0) for c in ch], ch.index(t))
            node, p = node.children[t], p + (t,)
        return node.docid, s

    want = dict(exact(t) for _, t in seqs)
    assert {b.docid: b.score for b in r.beams} == pytest.approx(want)


def test_ties_break_by_token_ids_then_docid_bytes():
    g = trie(("B", [2]), ("A", [3]), ("C", [1]))
    r = decode(Fake({}), g, Trie(), COPY, END, beam_width=2)  # all equal: tokens 1, 2 kept (asc)
    assert [b.docid for b in r.beams] == ["B", "C"]  # final order by docid bytes among equal scores
    r = decode(Fake({}), g, Trie(), COPY, END, beam_width=3)
    assert [b.docid for b in r.beams] == ["A", "B", "C"]


def test_docid_in_both_routes_keeps_higher_score():
    ctx = trie(("same", [1]))
    g = trie(("same", [1]), ("other", [2]))
    r = decode(Fake({(): {COPY: -5.0}}), g, ctx, COPY, END, beam_width=4)
    same = [b for b in r.beams if b.docid == "same"]
    assert len(same) == 1 and same[0].route == "parametric"
    r = decode(Fake({(): {COPY: 5.0}}), g, ctx, COPY, END, beam_width=4)
    assert [b for b in r.beams if b.docid == "same"][0].route == "copy"


def test_empty_context_has_no_copy_and_empty_allowed_set_errors():
    g = trie(("g", [1]))
    f = Fake({(): {COPY: 100.0}})
    r = decode(f, g, Trie(), COPY, END, beam_width=2)
    assert r.p_copy == 0.0 and [b.docid for b in r.beams] == ["g"] and r.beams[0].score == pytest.approx(0.0)
    with pytest.raises(EmptyAllowedSetError):
        decode(f, Trie(), Trie(), COPY, END, beam_width=2)
    r = decode(f, Trie(), trie(("c", [3])), COPY, END, beam_width=2)  # only copy allowed: p_copy 1
    assert r.p_copy == pytest.approx(1.0) and r.beams[0].route == "copy"


def test_beam_width_must_be_positive():
    with pytest.raises(ValueError):
        decode(Fake({}), trie(("g", [1])), Trie(), COPY, END, beam_width=0)


# The over-budget prompt: no prompt to decode (ContextFullError, the Go engine's ErrContextFull), never a
# prompt longer than the budget. One id per character, so the sizes are countable.
H = len(TEMPLATE["header"])
Q = len("Query: q\nOutput:\n")


def chars(s):
    return [ord(c) for c in s]


@pytest.mark.parametrize("cands", [[], [Candidate("A", "sum")]])
def test_over_budget_prompt_is_context_full(cands):
    with pytest.raises(ContextFullError, match=f"is {H + Q} tokens, budget {H + Q - 1}"):
        prompt_for_decoding(chars, "q", cands, H + Q - 1)
    p = prompt_for_decoding(chars, "q", cands, H + Q)  # exactly the budget: a prompt without candidates
    assert p.included == 0 and len(p.ids) == H + Q


def test_context_full_cases_shared_with_go(tok):
    """inference/testdata/context_full.jsonl, which inference/context_full_test.go checks too."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "inference", "testdata", "context_full.jsonl")
    with open(path, encoding="utf-8") as f:
        cases = [json.loads(line) for line in f]
    assert cases
    for c in cases:
        cands = [Candidate(x["title"], x["summary"]) for x in c["candidates"]]
        if c["context_full"]:
            with pytest.raises(ContextFullError):
                prompt_for_decoding(tok.encode, c["query"], cands, c["max_prompt_tokens"])
            continue
        p = prompt_for_decoding(tok.encode, c["query"], cands, c["max_prompt_tokens"])
        assert len(p.ids) <= c["max_prompt_tokens"], c["name"]
        assert p.included == c["included"], c["name"]
        if "prompt_tokens" in c:
            assert len(p.ids) == c["prompt_tokens"], c["name"]
