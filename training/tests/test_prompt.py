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


# --- prompt format 2: the title is a segment of its own (literal copying, issue 16) ---

from icicle.prompt import TEMPLATE_V2, check_format, contains_run, title_span  # noqa: E402


def ov2(i: int, title: str) -> int:  # format 2 overhead of a candidate with a summary
    return len(f"[{i}] ") + len("\nTitle:\n") + len(title) + len("\n")


def test_v2_exact_concatenation_and_segments():
    calls = []

    def rec(s):
        calls.append(s)
        return enc(s)

    cands = [Candidate("A", "sum"), Candidate("Bb", "")]
    p = build_prompt(rec, "q", cands, 10_000, prompt_format=2)
    want = TEMPLATE_V2["header"] + "[1] sum\nTitle:\nA\n" + "[2] Title:\nBb\n" + "Query: q\nOutput:\n"
    assert p.ids == enc(want)
    assert (p.included, p.summary_tokens) == (2, [3, 0])
    # every title is encoded alone, never joined to the text around it
    assert calls == [TEMPLATE_V2["header"], "Query: q\nOutput:\n", "[1] ", "\nTitle:\n", "A", "\n", "sum",
                     "[2] Title:\n", "Bb", "\n"]


def test_v2_budget_counts_title_pieces():
    cands = [Candidate("A", "s" * 50), Candidate("B", "t" * 4), Candidate("C", "u" * 50)]
    fixed = H + Q + ov2(1, "A") + ov2(2, "B") + ov2(3, "C")
    p = build_prompt(enc, "q", cands, fixed + 4 + 2 * 13, prompt_format=2)
    assert (p.included, p.summary_tokens, len(p.ids)) == (3, [13, 4, 13], fixed + 30)
    p = build_prompt(enc, "q", cands, fixed - 1, prompt_format=2)  # candidate 3's overhead no longer fits
    assert p.included == 2


def test_v2_braces_in_title_are_verbatim():
    p = build_prompt(enc, "{i}", [Candidate("{summary} {i}", "{title}")], 10_000, prompt_format=2)
    assert p.ids == enc(TEMPLATE_V2["header"] + "[1] {title}\nTitle:\n{summary} {i}\n" + "Query: {i}\nOutput:\n")


@pytest.mark.parametrize("fmt,template,msg", [
    (3, None, "known formats"),
    (2, {**TEMPLATE_V2, "candidate": "[{i}] {title} {summary}\n"}, "{summary} then {title}"),
    (2, {**TEMPLATE_V2, "candidate_title_only": "[{i}] {title} {title}\n"}, "candidate_title_only"),
])
def test_bad_format_names_the_problem(fmt, template, msg):
    with pytest.raises(ValueError, match=msg.replace("{", r"\{").replace("}", r"\}")):
        check_format(fmt, template or TEMPLATE_V2)


def test_v1_unchanged_by_default():
    p = build_prompt(enc, "q", [Candidate("A", "s")], 10_000)
    assert p.ids == enc(TEMPLATE["header"] + "[1] s\n    Title: A\n" + "Query: q\nOutput:\n")


def _corpus_titles() -> list[str]:
    import gzip
    import json
    import os

    from conftest import REPO

    with gzip.open(os.path.join(REPO, "data", "nq_qed", "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line)["title"] for line in f]


def test_v2_token_identity_every_corpus_title(tok):
    """Format 2: for EVERY nq_qed title, under the real SmolLM2 tokenizer, the candidate block (with a summary
    and title-only) holds the docid tokens (without [end]) as one contiguous run, right after "Title:\\n";
    format 1 does not (the issue's finding: the leading space changes the first token)."""
    titles = _corpus_titles()
    assert len(titles) > 7000
    lead = tok.encode("\nTitle:\n")
    lead_t = tok.encode("[3] Title:\n")
    v1_same = 0
    for t in titles:
        doc = tok.docid(t)[:-1]
        assert doc == tok.encode(t) and doc, t
        block, _ = title_span(tok.encode, t, 2, i=3, summary="Some summary text.")
        k = len(block) - len(doc) - 1
        assert block[k - len(lead): k] == lead and block[k: k + len(doc)] == doc and block[-1] == tok.encode("\n")[0], t
        p = build_prompt(tok.encode, "q", [Candidate("X", "s"), Candidate(t, "")], 1 << 20, prompt_format=2)
        assert contains_run(p.ids, lead_t[-len(lead) + 1:] + doc), t
        v1, _ = title_span(tok.encode, t, 1, i=3, summary="Some summary text.")
        v1_same += int(contains_run(v1, tok.encode("Title:") + doc))
    assert v1_same < len(titles) // 10  # format 1 spells nearly every title differently
