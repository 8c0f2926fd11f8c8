"""lab.querylikelihood: the query's log-probability against a plain per-token forward, the fusion and its
cross-validation on crafted queries, and the query selection on files."""
import gzip
import json

import torch

from icicle.data import is_new_doc
from icicle.lab.querylikelihood import as_question, cross_validate, fused_top, hits1, prompt, query_logprobs, select
from icicle.model import Decoder, ModelConfig


class FakeCharTok:
    """A fake tokenizer for a unit test: one id per character (mod the vocabulary)."""

    def encode(self, text):
        return [ord(c) % 50 for c in text]


def test_query_logprobs_match_a_forward_per_prompt():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=40)
    m = Decoder(cfg).eval()
    tok = FakeCharTok()
    prompts, query = ["a short one", "a rather longer prompt than that"], "why?"
    got = query_logprobs(m, tok, prompts, query)
    for p, g in zip(prompts, got):
        ids = tok.encode(p) + tok.encode(query)
        n, k = len(ids), len(tok.encode(query))
        with torch.no_grad():
            logits = m.train_logits(torch.tensor([ids]), torch.ones(1, n, dtype=torch.bool),
                                    torch.zeros(n - 1, dtype=torch.long), torch.arange(n - 1))
        lp = torch.log_softmax(logits, -1)[torch.arange(n - 1), torch.tensor(ids[1:])]
        want = float(lp[-k:].sum())  # the last k predictions are of the query's tokens
        assert abs(g - want) < 1e-4, (p, g, want)
    assert got[0] != got[1]


def test_prompt_and_question():
    assert prompt("T", "one two three", 2) == ("<|im_start|>user\nPassage: T. one two\nWrite a question that this "
                                               "passage answers.<|im_end|>\n<|im_start|>assistant\n")
    assert "Passage: one two three\n" in prompt(None, "one two three", 5)
    assert as_question(" who sang it? ") == "who sang it?" and as_question("who sang it") == "who sang it?"


def q(subset, gold, first, ql):
    return {"subset": subset, "relevant": {gold}, "first": first, "ql": {d: [v, 3] for d, v in ql.items()}}


def test_fusion_and_cross_validation():
    one = q("new", "b", [("a", 0.90), ("b", 0.88), ("c", 0.5)], {"a": -30.0, "b": -20.0, "c": -1.0})
    assert fused_top(one, 0, 5) == "a" and fused_top(one, 0.005, 5) == "b" and fused_top(one, 1, 5) == "c"
    assert fused_top(one, 1, 2) == "b", "depth 2: c is not scored"
    # The likelihood settles every close call: a w > 0 is chosen on each fold and wins held out.
    qs = [q("new", "b", [("a", 0.9), ("b", 0.89)], {"a": -30.0, "b": -20.0}) for _ in range(10)]
    qs += [q("new", "a", [("a", 0.9), ("b", 0.5)], {"a": -25.0, "b": -20.0}) for _ in range(10)]
    assert hits1(qs, 0, 5) == 0.5 and hits1(qs, 0.005, 5) == 1.0
    assert cross_validate(qs, 5, seed=0)["new"] == [20, 10, 20, 10, 0]
    # Where it only misleads, w stays 0.
    bad = [q("new", "a", [("a", 0.9), ("b", 0.89)], {"a": -30.0, "b": -20.0}) for _ in range(10)]
    assert cross_validate(bad, 5, seed=0)["new"] == [10, 10, 10, 0, 0]


def test_select(tmp_path):
    new_a = [d for d in (f"Doc {i}" for i in range(200)) if is_new_doc(d)][0]
    with gzip.open(tmp_path / "queries.jsonl.gz", "wt") as f:
        for qid, split in [("1", "train"), ("2", "train"), ("3", "dev"), ("4", "train")]:
            f.write(json.dumps({"qid": qid, "query": f"text {qid}", "split": split}) + "\n")
    (tmp_path / "qrels.tsv").write_text(f"qid\tdocid\trelevance\n1\t{new_a}\t1\n1\tOther\t1\n2\tSeen S\t1\n"
                                        f"3\t{new_a}\t1\n4\t{new_a}\t0\n")
    (tmp_path / "seen.txt").write_text("Seen S\n")
    got = select(str(tmp_path), "train", str(tmp_path / "seen.txt"))
    assert got == [("1", "text 1", "new", [new_a, "Other"]), ("2", "text 2", "seen", ["Seen S"])]
    assert [r[0] for r in select(str(tmp_path), "", None)] == ["1", "2", "3"], "no split: every judged query"
    assert [r[0] for r in select(str(tmp_path), "train", str(tmp_path / "seen.txt"), new_every=2)] == ["1", "2"]
    assert [r[0] for r in select(str(tmp_path), "train", str(tmp_path / "seen.txt"), seen_n=0)] == ["1"]
