"""icicle.lab.readerview: the dense encoder on the reader's view of each candidate against the whole passage (real
bge-small and the reader's real tokenizer)."""
import os

import pytest
from tokenizers import Tokenizer

from icicle import encoder as E
from icicle.lab import readerview as RV

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "models")


def test_a_cut_summary_hides_what_the_whole_passage_shows():
    enc_dir = os.path.join(MODELS, "bge-small-en-v15-q")
    if not os.path.exists(os.path.join(enc_dir, "model.onnx")):
        pytest.fail(f"{enc_dir}/model.onnx missing: run scripts/encoder.sh {enc_dir}")
    filler = "The county hosts a market every week and its roads connect several villages in the valley. " * 3
    docs = {
        # the answer is past the first 24 reader tokens of the gold's summary, in both titles' shared topic
        "Millbrook": {"docid": "Millbrook", "title": "Millbrook",
                      "text": filler + "The Millbrook lighthouse was designed by the engineer Ada Penrose in 1871."},
        "Eastbrook": {"docid": "Eastbrook", "title": "Eastbrook",
                      "text": "Eastbrook is a town whose lighthouse engineers and designers are famous in the region. "
                              + filler},
        "Seen doc": {"docid": "Seen doc", "title": "Seen doc", "text": "Ada Penrose designed the Millbrook lighthouse."},
        # a corpus of some size, so that the query's rarer words weigh (IDF) in the query window
        **{f"Other {i}": {"docid": f"Other {i}", "title": f"Other {i}", "text": f"Who knows the river number {i}?"}
           for i in range(10)},
    }
    samples = [{"qid": "q1", "relevant": ["Millbrook"], "lp": {"Eastbrook": -0.5, "Millbrook": -2.0},
                "first": [["Seen doc", 9.0], ["Eastbrook", 1.0], ["Millbrook", 0.9]]},
               {"qid": "q2", "relevant": ["Nowhere"], "lp": {}, "first": [["Eastbrook", 1.0]]}]  # gold not in context
    res = RV.measure(samples, docs, {"q1": "who designed the millbrook lighthouse"}, {"Seen doc"}, E.load(enc_dir),
                     Tokenizer.from_file(os.path.join(MODELS, "reader135", "tokenizer.json")), [24], candidates=10)
    assert res["queries"] == 1  # q2 has no gold among its candidates; the seen document never enters the context
    assert res["right"]["first_stage"] == 0 and res["right"]["reader"] == 0
    assert res["right"]["full"] == 1 and res["right"]["summary"] == 1
    assert res["right"]["summary_24_tokens"] == 0  # the cut leaves the gold's title and its filler
    assert res["right"]["query_window_24_tokens"] == 1  # the query's window finds the designer's sentence
    # the reader picked Eastbrook (wrong): the whole-passage encoder is right alone, the 24-token view picks as it does
    assert res["against_reader"]["full"] == {"same_top": 0, "only_it_right": 1, "only_reader_right": 0}
    assert res["against_reader"]["summary_24_tokens"]["same_top"] == 1
    assert res["against_reader"]["first_stage"] == {"same_top": 1, "only_it_right": 0, "only_reader_right": 0}
    # the first stage's first (Eastbrook) was wrong: no misreading to count
    assert res["misreadings"]["queries"] == 0 and res["misreadings"]["place"] == {}


def test_a_misreading_is_counted_with_its_place_and_what_the_encoder_found():
    enc_dir = os.path.join(MODELS, "bge-small-en-v15-q")
    docs = {"Millbrook lighthouse": {"docid": "Millbrook lighthouse", "title": "Millbrook lighthouse",
                                     "text": "The Millbrook lighthouse was designed by the engineer Ada Penrose."},
            "Millbrook bakery": {"docid": "Millbrook bakery", "title": "Millbrook bakery",
                                 "text": "The Millbrook bakery sells bread and cakes every morning."}}
    samples = [{"qid": "q1", "relevant": ["Millbrook lighthouse"],
                "lp": {"Millbrook lighthouse": -3.0, "Millbrook bakery": -0.1},
                "first": [["Millbrook lighthouse", 2.0], ["Millbrook bakery", 1.0]]}]
    res = RV.measure(samples, docs, {"q1": "who designed the millbrook lighthouse"}, set(), E.load(enc_dir),
                     Tokenizer.from_file(os.path.join(MODELS, "reader135", "tokenizer.json")), [24], candidates=10)
    m = res["misreadings"]
    assert m["queries"] == 1 and m["place"] == {2: 1}  # the reader took the first stage's second
    assert m["encoder_right"]["full"] == 1  # the encoder finds the lighthouse from the passage
    assert m["shares_first_title_token"] == 1  # both titles begin "Mill..."
