"""The prompt budget rule on a one-id-per-character encoder, so every expected number is countable by hand."""
import pytest

from icicle.prompt import TEMPLATE, Candidate, build_prompt, summary_cap


def enc(s: str) -> list[int]:
    return [ord(c) for c in s]


H = len(TEMPLATE["header"])
Q = len("Query: q\nOutput:\n")


def ov(i: int, title: str) -> int:  # overhead of a candidate with a summary
    return len(f"[{i}] ") + len(f"\n    Title: {title}\n")


def ov_t(i: int, title: str) -> int:  # title-only block
    return len(f"[{i}] Title: {title}\n")


@pytest.mark.parametrize("lens,remaining,cap,want", [
    ([10, 10, 10], 30, 256, 256),  # the cap may exceed every length
    ([10, 10, 10], 29, 256, 9),
    ([100, 5, 5], 40, 256, 30),
    ([100, 5, 5], 40, 20, 20),
    ([3], 0, 256, 0),
    ([], 10, 256, 256),
    ([7, 7], 1, 256, 0),
])
def test_summary_cap(lens, remaining, cap, want):
    assert summary_cap(lens, remaining, cap) == want


def test_everything_fits_is_exact_concatenation():
    cands = [Candidate("A", "s" * 10), Candidate("Bb", "t" * 5)]
    p = build_prompt(enc, "q", cands, 10_000)
    want = (TEMPLATE["header"] + "[1] " + "s" * 10 + "\n    Title: A\n" + "[2] " + "t" * 5 + "\n    Title: Bb\n"
            + "Query: q\nOutput:\n")
    assert p.ids == enc(want)
    assert (p.included, p.summary_tokens) == (2, [10, 5])


def test_summaries_cut_to_common_cap():
    cands = [Candidate("A", "s" * 50), Candidate("B", "t" * 4), Candidate("C", "u" * 50)]
    fixed = H + Q + ov(1, "A") + ov(2, "B") + ov(3, "C")
    p = build_prompt(enc, "q", cands, fixed + 4 + 2 * 13)  # R = 30: c = 13 -> 13 + 4 + 13 = 30
    assert p.included == 3
    assert p.summary_tokens == [13, 4, 13]
    assert len(p.ids) == fixed + 30


def test_max_summary_tokens_caps():
    p = build_prompt(enc, "q", [Candidate("A", "s" * 50)], 10_000, max_summary_tokens=7)
    assert p.summary_tokens == [7]


def test_drop_stops_at_first_misfit():
    cands = [Candidate("A", "x"), Candidate("Long title " * 5, "y"), Candidate("C", "z")]
    b = H + Q + ov(1, "A") + ov(3, "C")  # candidate 3 alone would fit, but 2 does not: stop at 2
    p = build_prompt(enc, "q", cands, b)
    assert p.included == 1
    assert p.summary_tokens == [min(1, b - H - Q - ov(1, "A"))]


def test_overhead_exactly_fills_budget_gives_empty_summaries():
    cands = [Candidate("A", "xyz"), Candidate("B", "uvw")]
    b = H + Q + ov(1, "A") + ov(2, "B")
    p = build_prompt(enc, "q", cands, b)
    assert (p.included, p.summary_tokens, len(p.ids)) == (2, [0, 0], b)


def test_title_only_mode_and_missing_summary():
    cands = [Candidate("A", "sum"), Candidate("B", "")]
    p = build_prompt(enc, "q", cands, 10_000, title_only=True)
    assert p.ids == enc(TEMPLATE["header"] + "[1] Title: A\n[2] Title: B\n" + "Query: q\nOutput:\n")
    assert p.summary_tokens == [0, 0]
    p = build_prompt(enc, "q", cands, 10_000)
    assert p.ids == enc(TEMPLATE["header"] + "[1] sum\n    Title: A\n[2] Title: B\n" + "Query: q\nOutput:\n")
    assert p.summary_tokens == [3, 0]
    b = H + Q + ov(1, "A") + ov_t(2, "B")
    assert build_prompt(enc, "q", cands, b).summary_tokens == [0, 0]
    assert build_prompt(enc, "q", cands, b + 2).summary_tokens == [2, 0]


def test_fixed_over_budget_includes_nothing():
    p = build_prompt(enc, "q", [Candidate("A", "s")], H + Q - 1)
    assert p.included == 0 and p.ids == enc(TEMPLATE["header"] + "Query: q\nOutput:\n")


def test_braces_in_text_are_verbatim():
    p = build_prompt(enc, "{i} {title}", [Candidate("{summary}", "{query}")], 10_000)
    assert p.ids == enc(TEMPLATE["header"] + "[1] {query}\n    Title: {summary}\n" + "Query: {i} {title}\nOutput:\n")


def test_segments_are_encoded_separately():
    calls = []

    def rec(s):
        calls.append(s)
        return enc(s)

    build_prompt(rec, "q", [Candidate("A", "sum")], 10_000)
    assert calls == [TEMPLATE["header"], "Query: q\nOutput:\n", "[1] ", "\n    Title: A\n", "sum"]
