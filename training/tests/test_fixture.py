"""The committed models/tiny directory keeps the MODEL_FORMAT.md contract, and its golden vectors reproduce."""
import json
import os

import numpy as np
import pytest

from icicle.decode import CachedPromptScorer, Trie, decode, ort_step
from icicle.export import ort_session
from icicle.prompt import Candidate, build_prompt

FIELDS = {"format_version": int, "name": str, "config": str, "backbone": str, "model_version": str,
          "data_version": str, "onnx": str, "tokenizer": str, "seen_docids": str, "vocab_size": int,
          "num_layers": int, "num_kv_heads": int, "head_dim": int, "kv_dtype": str, "max_context_tokens": int,
          "copy_token_id": int, "end_token_id": int, "template": dict}


@pytest.fixture(scope="module")
def manifest(fixture_dir):
    with open(os.path.join(fixture_dir, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _jsonl(fixture_dir, name):
    with open(os.path.join(fixture_dir, "golden", name), encoding="utf-8") as f:
        return [json.loads(l) for l in f]


def test_manifest_fields_and_files(fixture_dir, manifest, tok):
    for k, t in FIELDS.items():
        assert isinstance(manifest.get(k), t), k
    assert manifest["format_version"] == 1 and manifest["kv_dtype"] == "float32"
    for k in ("onnx", "onnx_quantized", "tokenizer", "seen_docids"):
        assert os.path.isfile(os.path.join(fixture_dir, manifest[k])), k
    assert set(manifest["template"]) == {"header", "candidate", "candidate_title_only", "query"}
    from icicle.prompt import TEMPLATE_V2

    # issue 16: the fixture is trained in prompt format 2 (each title its own segment) and says so
    assert manifest["prompt_format"] == 2 and manifest["template"] == TEMPLATE_V2
    assert manifest["copy_token_id"] == tok.copy_id < manifest["vocab_size"]
    assert manifest["end_token_id"] == tok.end_id < manifest["vocab_size"]
    assert manifest["vocab_size"] == tok.vocab_size


def test_onnx_shapes_match_manifest(fixture_dir, manifest):
    s = ort_session(os.path.join(fixture_dir, manifest["onnx"]))
    ins = {i.name: i for i in s.get_inputs()}
    for l in range(manifest["num_layers"]):
        shape = ins[f"past_key_values.{l}.key"].shape
        assert shape[2:] == [manifest["num_kv_heads"], manifest["head_dim"]]
    assert s.get_outputs()[0].shape[2] == manifest["vocab_size"]


def test_seen_docids(fixture_dir, manifest):
    with open(os.path.join(fixture_dir, manifest["seen_docids"]), encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "" and all(lines[:-1]) and len(set(lines[:-1])) == len(lines) - 1


def test_golden_tokenize_reproduces(fixture_dir, tok):
    rows = _jsonl(fixture_dir, "tokenize.jsonl")
    assert len(rows) >= 40
    for r in rows:
        assert tok.encode(r["text"]) == r["ids"], r["text"]
    assert any(tok.copy_id in r["ids"] and len(r["ids"]) > 1 for r in rows)


def test_golden_logits_reproduce(fixture_dir, manifest):
    s = ort_session(os.path.join(fixture_dir, manifest["onnx"]))
    step = ort_step(s, manifest["num_layers"])
    empty = [np.zeros((1, 0, manifest["num_kv_heads"], manifest["head_dim"]), np.float32)] * (2 * manifest["num_layers"])
    for r in _jsonl(fixture_dir, "logits.jsonl"):
        z = CachedPromptScorer(step, r["input_ids"], empty).logits(())
        top = r["last_logits_top"]
        assert len(top) == 20 and int(np.argmax(z)) == top[0][0]
        for i, v in top:
            assert abs(float(z[i]) - v) <= 1e-4


def test_golden_decode_reproduces(fixture_dir, manifest, tok):
    rows = _jsonl(fixture_dir, "decode.jsonl")
    assert len(rows) >= 18 and any(not r["candidates"] for r in rows)
    assert any(r["included"] < len(r["candidates"]) for r in rows)  # dropping exercised
    assert {r["beam_width"] for r in rows} >= {1, 4, 10}
    with open(os.path.join(fixture_dir, manifest["seen_docids"]), encoding="utf-8") as f:
        seen = f.read().splitlines()
    g = Trie.build(seen, tok.encode, tok.end_id)
    s = ort_session(os.path.join(fixture_dir, manifest["onnx"]))
    step = ort_step(s, manifest["num_layers"])
    empty = [np.zeros((1, 0, manifest["num_kv_heads"], manifest["head_dim"]), np.float32)] * (2 * manifest["num_layers"])
    for r in rows[::4]:  # a sample keeps the suite fast; the pipeline checked all of them
        cands = [Candidate(c["title"], c["summary"]) for c in r["candidates"]]
        p = build_prompt(tok.encode, r["query"], cands, r["max_prompt_tokens"],
                         max_summary_tokens=r["max_summary_tokens"], template=manifest["template"],
                         prompt_format=int(manifest.get("prompt_format") or 1))
        assert p.ids == r["prompt_ids"] and p.included == r["included"]
        ctx = Trie.build([c.title for c in cands[: p.included]], tok.encode, tok.end_id)
        res = decode(CachedPromptScorer(step, p.ids, empty), g, ctx, tok.copy_id, tok.end_id, r["beam_width"])
        assert res.p_copy == pytest.approx(r["p_copy"], abs=1e-3)
        assert [(b.docid, b.route) for b in res.beams] == [(b["docid"], b["route"]) for b in r["beams"]]
        assert [b.score for b in res.beams] == pytest.approx([b["score"] for b in r["beams"]], abs=1e-3)
