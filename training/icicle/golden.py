"""Golden parity vectors for the Go engine (MODEL_FORMAT.md "golden/"), computed with the fp32 ONNX model
through ONNX Runtime (what Go runs) and cross-checked against PyTorch.

decode.jsonl lines carry, besides the contract fields, "max_summary_tokens" (256, the default, or the
manifest's max_summary_tokens where it states a smaller one: the Go engine applies that cap),
"included" (candidates that fit) and "summary_tokens" (summary ids kept per included candidate).
"""
from __future__ import annotations

import json
import os
import random

import numpy as np

from .data import Split
from .decode import CachedPromptScorer, Trie, decode, ort_session, ort_step, torch_step
from .prompt import DEFAULT_MAX_SUMMARY_TOKENS, TEMPLATE, TEMPLATE_V2, Candidate, build_prompt
from .tokenizer import Tok

DECODE_ATOL = 1e-3
TOKENIZE_EXTRA = [
    "", " ", "  leading and trailing  ", "\n", "tab\tseparated", "line\nbreaks\n\n", "[COPY]",
    "[COPY] Wild card (sports)", "text with [COPY] inside it", "[COPY][COPY]", "[copy] lower case", "[COPY ]",
    "<|endoftext|>", "Title: <|endoftext|> in text", "numbers 1234567890 and 3.14159 and 1,000,000",
    "Ünïcödé façade — naïve café", "東京 (Tokyo) 日本", "Привет, мир", "emoji 🎉🚀 test", "Zoë Saldaña",
    "Pokémon: Let's Go, Pikachu!", "São Paulo FC", "Ångström", "Øresund Bridge", "C++ & C# <tags>",
    "URL https://en.wikipedia.org/wiki/Natural_Questions?x=1", "quotes \"double\" 'single' `back`",
    TEMPLATE["header"], "Query: who wrote the song\nOutput:\n", "[1] ", "\n    Title: Foo Bar\n",
    "[12] Title: The Beatles\n",
    "\nTitle:\n", "[12] Title:\n", "\nTitle:\nHorsehead Nebula\n", TEMPLATE_V2["candidate"],
]


def tokenize_cases(tok: Tok, split: Split, seen: list[str]) -> list[dict]:
    rng = random.Random(7)
    texts = list(TOKENIZE_EXTRA)
    uni = [d for d in sorted(split.docs) if any(ord(ch) > 127 for ch in d)]
    texts += uni[:6] + rng.sample(seen, 6) + [q.query for q in split.dev[:4]]
    return [{"text": t, "ids": tok.encode(t)} for t in texts]


def logits_cases(tok: Tok, split: Split, session, num_layers: int, kv_heads: int, head_dim: int,
                 prompt_format: int = 1) -> list[dict]:
    step = ort_step(session, num_layers)
    empty = [np.zeros((1, 0, kv_heads, head_dim), np.float32)] * (2 * num_layers)
    inputs = [tok.encode("Hello world"), tok.encode(TEMPLATE["header"])]
    for q in split.dev[:3]:
        inputs.append(build_prompt(tok.encode, q.query, [], 512, prompt_format=prompt_format).ids)
    out = []
    for ids in inputs:
        sc = CachedPromptScorer(step, ids, empty)
        z = sc.logits(())
        top = np.argsort(-z, kind="stable")[:20]
        out.append({"input_ids": ids, "last_logits_top": [[int(i), float(z[i])] for i in top]})
    return out


def decode_cases(tok: Tok, split: Split, seen: list[str], session, model, num_layers: int, kv_heads: int,
                 head_dim: int, max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS,
                 prompt_format: int = 1, template: dict | None = None, recall: list[str] | None = None,
                 long_budget: int = 0) -> list[dict]:
    """~20 cases: real dev queries, 3/10/20 candidates mixing D_new and seen docs, beams 1/4/10, a few small
    budgets (truncation and dropping), one case without candidates. Checks ORT vs PyTorch on each.

    template: the manifest's (default: the format's own). recall: the titles the parametric route may name
    (default: seen; [] for a copy-only model, whose engine offers [COPY] alone, so the case without candidates is
    left out). long_budget: one more case of 60 candidates under that budget (a graph whose attention scales with
    the positions a row sees, attention_length_ref, changes only past about that many positions)."""
    rng = random.Random(11)
    o_step, t_step = ort_step(session, num_layers), torch_step(model)
    empty = [np.zeros((1, 0, kv_heads, head_dim), np.float32)] * (2 * num_layers)
    recall = seen if recall is None else recall
    gtrie = Trie.build(recall, tok.encode, tok.end_id)
    queries = list(split.dev)
    rng.shuffle(queries)
    specs = []
    for i, (k, w) in enumerate([(3, 1), (3, 4), (3, 10), (10, 1), (10, 4), (10, 10), (20, 1), (20, 4), (20, 10),
                                (3, 4), (10, 10), (20, 4), (3, 10), (10, 4), (20, 10)]):
        specs.append((k, w, 512))
    specs += [(10, 4, 300), (20, 10, 200), (3, 4, 120), (20, 4, 400), (10, 10, 90)]  # truncation / dropping
    if recall:
        specs += [(0, 4, 512)]
    if long_budget:
        specs += [(60, 4, long_budget)]
    seen_set = set(seen)
    cases = []
    for ci, (k, w, budget) in enumerate(specs):
        q = queries[ci]
        pool_new = [d for d in split.d_new if d != q.docid]
        titles = rng.sample(pool_new, k - k // 3) + rng.sample([s for s in seen if s != q.docid], k // 3) if k else []
        if k and ci % 2 == 0:  # gold present in half of the cases
            titles[rng.randrange(k)] = q.docid
        cands = [Candidate(split.docs[t].title, split.docs[t].text) for t in titles]
        if k and ci % 5 == 3:
            cands[1] = Candidate(cands[1].title, "")  # a candidate without a summary
        p = build_prompt(tok.encode, q.query, cands, budget, max_summary_tokens=max_summary_tokens,
                         prompt_format=prompt_format, template=template)
        ctx = Trie.build([c.title for c in cands[: p.included]], tok.encode, tok.end_id)
        res = decode(CachedPromptScorer(o_step, p.ids, empty), gtrie, ctx, tok.copy_id, tok.end_id, w)
        ref = decode(CachedPromptScorer(t_step, p.ids, empty), gtrie, ctx, tok.copy_id, tok.end_id, w)
        assert [b.docid for b in res.beams][:1] == [b.docid for b in ref.beams][:1], f"case {ci}: top-1 differs"
        for a, b in zip(res.beams, ref.beams):
            if a.docid == b.docid:
                assert abs(a.score - b.score) <= DECODE_ATOL, f"case {ci}: {a} vs {b}"
        cases.append({
            "query": q.query,
            "candidates": [{"title": c.title, "summary": c.summary} for c in cands],
            "beam_width": w,
            "max_prompt_tokens": budget,
            "max_summary_tokens": max_summary_tokens,
            "prompt_ids": p.ids,
            "included": p.included,
            "summary_tokens": p.summary_tokens,
            "p_copy": res.p_copy,
            "beams": [{"docid": b.docid, "route": b.route, "score": b.score} for b in res.beams],
            "gold": q.docid, "gold_seen": q.docid in seen_set,
        })
    return cases


def int8_agreement(tok: Tok, seen: list[str], cases: list[dict], session_q, c) -> dict:
    """Re-decodes the golden cases with the int8 model: top-1 docid agreement and max |score diff| of top-1."""
    step = ort_step(session_q, c.layers)
    empty = [np.zeros((1, 0, c.kv_heads, c.head_dim), np.float32)] * (2 * c.layers)
    gtrie = Trie.build(seen, tok.encode, tok.end_id)
    agree, diff = 0, 0.0
    for r in cases:
        ctx = Trie.build([x["title"] for x in r["candidates"][: r["included"]]], tok.encode, tok.end_id)
        res = decode(CachedPromptScorer(step, r["prompt_ids"], empty), gtrie, ctx, tok.copy_id, tok.end_id,
                     r["beam_width"])
        same = res.beams[0].docid == r["beams"][0]["docid"]
        agree += int(same)
        if same:
            diff = max(diff, abs(res.beams[0].score - r["beams"][0]["score"]))
    return {"int8_decode_top1_agreement": agree / len(cases), "int8_top1_score_max_abs": diff}


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_golden(out_dir: str, tok: Tok, split: Split, seen: list[str], session, model,
                 max_summary_tokens: int = 0, prompt_format: int = 1, **decode_kw) -> dict:
    """Writes golden/ into out_dir; max_summary_tokens: the manifest's (0 = not stated, the default 256);
    prompt_format: the manifest's (decode cases are built in it; Go builds the same ids from the manifest);
    decode_kw: decode_cases' template, recall and long_budget."""
    g = os.path.join(out_dir, "golden")
    os.makedirs(g, exist_ok=True)
    c = model.c
    t = tokenize_cases(tok, split, seen)
    lg = logits_cases(tok, split, session, c.layers, c.kv_heads, c.head_dim, prompt_format)
    cap = min(DEFAULT_MAX_SUMMARY_TOKENS, max_summary_tokens) if max_summary_tokens > 0 else DEFAULT_MAX_SUMMARY_TOKENS
    dc = decode_cases(tok, split, seen, session, model, c.layers, c.kv_heads, c.head_dim, cap, prompt_format,
                      **decode_kw)
    write_jsonl(os.path.join(g, "tokenize.jsonl"), t)
    write_jsonl(os.path.join(g, "logits.jsonl"), lg)
    write_jsonl(os.path.join(g, "decode.jsonl"), dc)
    out = {"tokenize": len(t), "logits": len(lg), "decode": len(dc)}
    q = os.path.join(out_dir, "model.int8.onnx")
    if os.path.exists(q):
        out.update(int8_agreement(tok, seen, dc, ort_session(q), c))
    return out
