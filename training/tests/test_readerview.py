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
