"""GENRE-style baseline: Hugging Face `generate` (beam search + `prefix_allowed_tokens_fn`) on the same
weights, prompts and tries as the Go engine, for the side-by-side speed comparison (scripts/bench-hf.sh).

Pieces:
- ``load_decoder`` rebuilds a model.Decoder with a model directory's weights: from the PyTorch checkpoint
  when given and its embedding equals the ONNX one, else from model.onnx's initializers (the MatMul
  weights in graph order q, k, v, o, gate, up, down per layer, transposed back).
- ``build_hf_llama`` makes a transformers ``LlamaForCausalLM`` (same layers, hidden, heads, kv heads,
  head_dim, rope theta, rms eps, tied embeddings, vocab) holding those weights; ``logit_diff`` checks it
  against Decoder.step and the ONNX model (LOGITS_ATOL).
- ``make_allowed_fn`` is Algorithm 1 as a ``prefix_allowed_tokens_fn``: step 0 allows [COPY] (when there
  are in-context candidates) + the first tokens of the global trie; after [COPY] the context trie; otherwise
  the global trie; an empty set (off-trie prefix or a finished docid) becomes [end] alone, never [].
- ``make_cases`` writes the benchmark cases (real nq_qed dev queries, BM25 top-N candidates over the whole
  corpus, N x W grid, the manifest's max_context_tokens as budget); ``run_hf`` and ``run_ref`` decode them
  with HF generate and with the reference decoder (icicle.decode over ONNX Runtime); ``table`` prints the
  markdown comparison with the Go engine's results (inference/compare_benchmark_test.go).

    python -m icicle.lab.hf_baseline verify
    python -m icicle.lab.hf_baseline cases --out /tmp/b/cases.jsonl --queries 20
    python -m icicle.lab.hf_baseline hf    --cases /tmp/b/cases.jsonl --out /tmp/b/hf.1.jsonl
    python -m icicle.lab.hf_baseline ref   --cases /tmp/b/cases.jsonl --out /tmp/b/ref.jsonl
    python -m icicle.lab.hf_baseline table --cases /tmp/b/cases.jsonl --hf /tmp/b/hf.*.jsonl --go /tmp/b/go.*.jsonl --ref /tmp/b/ref.jsonl
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import torch

from ..decode import CachedPromptScorer, Trie, decode, ort_step
from ..model import Decoder, ModelConfig
from ..prompt import DEFAULT_MAX_SUMMARY_TOKENS, Candidate, build_prompt

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEFAULT_MODEL_DIR = os.path.join(REPO, "models", "tiny")
DEFAULT_CKPT = os.path.join(REPO, "training", "out", "tiny", "stage1.pt")
LOGITS_ATOL = 1e-4  # HF Llama vs Decoder.step vs ONNX, fp32 (same as export.FP32_ATOL)
NS = (3, 10, 20, 50, 100)
WS = (1, 4, 10)


# ---------------------------------------------------------------- model


def read_manifest(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def model_config(model_dir: str) -> ModelConfig:
    """The Decoder config of a model directory: the named training config, checked against the manifest."""
    from ..configs import get_config

    man = read_manifest(model_dir)
    c = get_config(man["config"]).model
    for k, want in (("vocab_size", c.vocab_size), ("num_layers", c.layers), ("num_kv_heads", c.kv_heads),
                    ("head_dim", c.head_dim), ("max_context_tokens", c.max_context_tokens)):
        if man[k] != want:
            raise ValueError(f"{model_dir}/manifest.json: {k}={man[k]}, config {man['config']!r} has {want}")
    return c


def _onnx_state(onnx_path: str, c: ModelConfig) -> dict:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(onnx_path)
    inits = {i.name: i for i in m.graph.initializer}
    sd = {}
    for name in ["embed_tokens.weight", "norm.weight"] + [f"layers.{l}.{n}.weight" for l in range(c.layers)
                                                          for n in ("input_layernorm", "post_attention_layernorm")]:
        sd[name] = torch.from_numpy(numpy_helper.to_array(inits[name]).copy())
    mats = []  # MatMul weight initializers in graph order (each used once; the tied lm_head is embed_tokens)
    for node in m.graph.node:
        if node.op_type == "MatMul":
            for x in node.input:
                if x in inits and x != "embed_tokens.weight" and x not in mats:
                    mats.append(x)
    names = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj"]
    if len(mats) != len(names) * c.layers:
        raise ValueError(f"{onnx_path}: {len(mats)} MatMul weights, want {len(names) * c.layers}")
    for i, x in enumerate(mats):
        sd[f"layers.{i // len(names)}.{names[i % len(names)]}.weight"] = torch.from_numpy(
            numpy_helper.to_array(inits[x]).T.copy())
    return sd


def load_decoder(model_dir: str = DEFAULT_MODEL_DIR, ckpt: str | None = DEFAULT_CKPT) -> tuple[Decoder, str]:
    """Returns (Decoder with the model directory's weights, where they came from)."""
    c = model_config(model_dir)
    onnx_sd = _onnx_state(os.path.join(model_dir, "model.onnx"), c)
    src, sd = "model.onnx initializers", onnx_sd
    if ckpt and os.path.exists(ckpt):
        ck = torch.load(ckpt, map_location="cpu", weights_only=True)
        if all(k in ck and torch.equal(ck[k], v) for k, v in onnx_sd.items()):
            src, sd = os.path.relpath(ckpt, REPO), ck
        else:
            src += f" ({os.path.relpath(ckpt, REPO)} differs from model.onnx; not used)"
    m = Decoder(c)
    m.load_state_dict(sd, strict=True)
    m.eval()
    return m, src


def build_hf_llama(dec: Decoder, attn_implementation: str = "sdpa"):
    """A transformers LlamaForCausalLM with dec's config and weights (tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = dec.c
    cfg = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden, intermediate_size=c.intermediate,
        num_hidden_layers=c.layers, num_attention_heads=c.heads, num_key_value_heads=c.kv_heads,
        head_dim=c.head_dim, hidden_act="silu", max_position_embeddings=max(c.max_context_tokens, 4096),
        rms_norm_eps=c.rms_eps, rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, use_cache=True,
    )
    hf = LlamaForCausalLM(cfg)
    sd = {"model." + k: v for k, v in dec.state_dict().items()}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" and "rotary_emb" not in k]
    if missing or unexpected:
        raise ValueError(f"HF Llama load: missing={missing} unexpected={unexpected}")
    hf.tie_weights()
    if hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr():
        hf.lm_head.weight = hf.model.embed_tokens.weight
    hf.config._attn_implementation = attn_implementation
    hf.eval()
    return hf


def logit_diff(hf, dec: Decoder, ids: list[int], session=None) -> dict:
    """Max |logit diff| over every position: HF vs Decoder.step; last position: HF vs ONNX (if session)."""
    n = len(ids)
    x = torch.tensor([ids])
    with torch.no_grad():
        a = hf(input_ids=x).logits[0]
        from ..model import causal_mask

        b = dec.step(x, torch.arange(n)[None], causal_mask(0, n), torch.arange(n), *dec.empty_past())[0][0]
    out = {"hf_vs_torch": float((a - b).abs().max())}
    if session is not None:
        c = dec.c
        empty = [np.zeros((1, 0, c.kv_heads, c.head_dim), np.float32)] * (2 * c.layers)
        z = CachedPromptScorer(ort_step(session, c.layers), ids, empty).logits(())
        out["hf_vs_onnx"] = float(np.abs(a[-1].numpy() - z).max())
    return out


# ---------------------------------------------------------------- Algorithm 1 as prefix_allowed_tokens_fn


def trie_depth(t: Trie) -> int:
    best, stack = 0, [(t.root, 0)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        stack.extend((ch, d + 1) for ch in n.children.values())
    return best


def make_allowed_fn(prompt_len: int, global_trie: Trie, ctx_trie: Trie, copy_id: int, end_id: int):
    """Returns fn(batch_id, input_ids) -> allowed next ids (never empty) for HF generate."""
    step0 = ([copy_id] if ctx_trie.root.children else []) + sorted(global_trie.root.children)
    if not step0:
        step0 = [end_id]
    memo: dict[tuple[int, ...], list[int]] = {(): step0}

    def allowed(gen: tuple[int, ...]) -> list[int]:
        if gen[0] == copy_id and ctx_trie.root.children:
            node, rest = ctx_trie.root, gen[1:]
        else:
            node, rest = global_trie.root, gen
        for t in rest:
            node = node.children.get(t)
            if node is None:
                return [end_id]
        return sorted(node.children) or [end_id]

    def fn(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        gen = tuple(input_ids[prompt_len:].tolist())
        r = memo.get(gen)
        if r is None:
            r = memo[gen] = allowed(gen)
        return r

    return fn


def parse_answer(gen: list[int], global_trie: Trie, ctx_trie: Trie, copy_id: int, end_id: int) -> tuple[str | None, str]:
    """Maps generated ids to (docid or None if not a complete docid, route)."""
    route = "parametric"
    node = global_trie.root
    if gen and gen[0] == copy_id:
        route, node, gen = "copy", ctx_trie.root, gen[1:]
    for t in gen:
        node = node.children.get(t)
        if node is None:
            return None, route
        if t == end_id:
            return node.docid, route
    return None, route


# ---------------------------------------------------------------- cases


def _words(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


class BM25:
    """Plain BM25 (k1 0.9, b 0.4, Lucene idf) over title + text; ties by docid."""

    def __init__(self, docs: dict, k1: float = 0.9, b: float = 0.4) -> None:
        self.ids = sorted(docs)
        self.post: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lens = []
        for i, d in enumerate(self.ids):
            w = _words(docs[d].title + " " + docs[d].text)
            lens.append(len(w))
            for t, c in Counter(w).items():
                self.post[t].append((i, c))
        self.lens, self.avg, self.k1, self.b = lens, sum(lens) / len(lens), k1, b
        n = len(self.ids)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.post.items()}

    def top(self, query: str, k: int) -> list[str]:
        s: dict[int, float] = defaultdict(float)
        for t in set(_words(query)):
            for i, c in self.post.get(t, ()):
                s[i] += self.idf[t] * c * (self.k1 + 1) / (c + self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg))
        best = sorted(s.items(), key=lambda x: (-x[1], self.ids[x[0]]))[:k]
        return [self.ids[i] for i, _ in best]


def make_cases(model_dir: str, queries: int, seed: int = 0) -> list[dict]:
    """`queries` dev queries (seeded shuffle), each with its BM25 top-N candidates, for every (N, W)."""
    from ..data import make_split

    split = make_split()
    man = read_manifest(model_dir)
    qs = list(split.dev)
    random.Random(seed).shuffle(qs)
    qs = qs[:queries]
    bm = BM25(split.docs)
    seen = set(split.d_train)
    cases = []
    for q in qs:
        top = bm.top(q.query, max(NS))
        for n in NS:
            for w in WS:
                cases.append({
                    "id": f"{q.qid}/n{n}/w{w}", "qid": q.qid, "query": q.query, "n": n,
                    "candidates": [{"title": split.docs[d].title, "summary": split.docs[d].text} for d in top[:n]],
                    "beam_width": w, "max_prompt_tokens": man["max_context_tokens"],
                    "max_summary_tokens": DEFAULT_MAX_SUMMARY_TOKENS,
                    "gold": split.docs[q.docid].title, "gold_seen": q.docid in seen,
                    "gold_rank": top.index(q.docid) + 1 if q.docid in top[:n] else 0,
                })
    return cases


# ---------------------------------------------------------------- runs


class Env:
    """Tokenizer, seen corpus, global trie and manifest facts of a model directory."""

    def __init__(self, model_dir: str) -> None:
        from tokenizers import Tokenizer

        self.man = read_manifest(model_dir)
        self.tk = Tokenizer.from_file(os.path.join(model_dir, self.man["tokenizer"]))
        self.copy_id, self.end_id = self.man["copy_token_id"], self.man["end_token_id"]
        with open(os.path.join(model_dir, self.man["seen_docids"]), encoding="utf-8") as f:
            self.seen = [l.rstrip("\n") for l in f if l.strip()]
        self.gtrie = Trie.build(self.seen, self.encode, self.end_id)
        self.gdepth = trie_depth(self.gtrie)

    def encode(self, text: str) -> list[int]:  # not memoised: timed runs pay tokenisation like Go does
        return self.tk.encode(text, add_special_tokens=False).ids


def prompt_and_ctx(env: Env, case: dict):
    cands = [Candidate(c["title"], c["summary"]) for c in case["candidates"]]
    p = build_prompt(env.encode, case["query"], cands, case["max_prompt_tokens"],
                     max_summary_tokens=case.get("max_summary_tokens", DEFAULT_MAX_SUMMARY_TOKENS),
                     template=env.man.get("template"), prompt_format=int(env.man.get("prompt_format") or 1))
    ctx = Trie.build([c.title for c in cands[: p.included]], env.encode, env.end_id)
    return p, ctx


def hf_rank(hf, env: Env, case: dict) -> dict:
    """One GENRE-style query: prompt, context trie, generate; returns top-1 and timings (ms)."""
    t0 = time.perf_counter()
    p, ctx = prompt_and_ctx(env, case)
    w = case["beam_width"]
    fn = make_allowed_fn(len(p.ids), env.gtrie, ctx, env.copy_id, env.end_id)
    x = torch.tensor([p.ids])
    t1 = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(
            input_ids=x, attention_mask=torch.ones_like(x), num_beams=w, num_return_sequences=w,
            max_new_tokens=max(env.gdepth, trie_depth(ctx)) + 1, prefix_allowed_tokens_fn=fn, do_sample=False,
            early_stopping=True, eos_token_id=env.end_id, pad_token_id=env.end_id, length_penalty=1.0,
        )
    t2 = time.perf_counter()
    gen = out[0, len(p.ids):].tolist()
    docid, route = parse_answer(gen, env.gtrie, ctx, env.copy_id, env.end_id)
    return {"id": case["id"], "top1": docid, "route": route, "ms": (time.perf_counter() - t0) * 1e3,
            "ms_generate": (t2 - t1) * 1e3, "prompt_tokens": len(p.ids), "included": p.included,
            "answer_ids": gen}


def run_hf(cases_path: str, out_path: str, model_dir: str, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    dec, src = load_decoder(model_dir)
    hf = build_hf_llama(dec)
    env = Env(model_dir)
    cases = read_jsonl(cases_path)
    hf_rank(hf, env, cases[-1])  # warm-up
    with open(out_path, "w", encoding="utf-8") as f:
        for c in cases:
            rs = [hf_rank(hf, env, c) for _ in range(repeats)]
            r = rs[0]
            r["ms"] = statistics.median(x["ms"] for x in rs)
            r["ms_generate"] = statistics.median(x["ms_generate"] for x in rs)
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"hf: {len(cases)} cases -> {out_path} (weights: {src}, torch threads {torch.get_num_threads()})",
          file=sys.stderr)


def run_ref(cases_path: str, out_path: str, model_dir: str) -> None:
    """The Python reference decoder (icicle.decode over fp32 ONNX Runtime, what Go runs) on every case."""
    from ..export import ort_session

    env = Env(model_dir)
    sess = ort_session(os.path.join(model_dir, env.man["onnx"]))
    L, kvh, hd = env.man["num_layers"], env.man["num_kv_heads"], env.man["head_dim"]
    step, empty = ort_step(sess, L), [np.zeros((1, 0, kvh, hd), np.float32)] * (2 * L)
    with open(out_path, "w", encoding="utf-8") as f:
        for c in read_jsonl(cases_path):
            p, ctx = prompt_and_ctx(env, c)
            res = decode(CachedPromptScorer(step, p.ids, empty), env.gtrie, ctx, env.copy_id, env.end_id,
                         c["beam_width"])
            b = res.beams[0]
            f.write(json.dumps({"id": c["id"], "top1": b.docid, "route": b.route, "score": b.score,
                                "p_copy": res.p_copy, "beams": [[x.docid, x.route, x.score] for x in res.beams]},
                               ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- report


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def _rounds(paths: list[str]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = defaultdict(list)
    for p in paths:
        for r in read_jsonl(p):
            by[r["id"]].append(r)
    return by


def hf_answer_logp(hf, env: Env, case: dict, answer: list[int]) -> tuple[float, int]:
    """(sum of full-vocab log p of answer after the prompt, its length): HF beam search's objective."""
    p, _ = prompt_and_ctx(env, case)
    x = torch.tensor([p.ids + answer])
    with torch.no_grad():
        lp = torch.log_softmax(hf(input_ids=x).logits[0, len(p.ids) - 1:-1].double(), -1)
    return float(lp[torch.arange(len(answer)), torch.tensor(answer)].sum()), len(answer)


def docid_answer(env: Env, docid: str, route: str) -> list[int]:
    return ([env.copy_id] if route == "copy" else []) + env.encode(docid) + [env.end_id]


def table(cases_path: str, hf_paths: list[str], go_paths: list[str], ref_path: str | None, model_dir: str,
          explain: int) -> str:
    cases = read_jsonl(cases_path)
    hf, go = _rounds(hf_paths), _rounds(go_paths)
    ref = {r["id"]: r for r in read_jsonl(ref_path)} if ref_path else {}
    cells: dict[tuple[int, int], list[dict]] = defaultdict(list)
    rows = []
    for c in cases:
        h, g = hf.get(c["id"]), go.get(c["id"])
        if not h or not g:
            continue
        row = {"case": c, "hf_ms": statistics.median(x["ms"] for x in h),
               "hf_gen_ms": statistics.median(x["ms_generate"] for x in h),
               "go_ms": statistics.median(x["ms"] for x in g), "hf": h[0], "go": g[0], "ref": ref.get(c["id"])}
        cells[(c["n"], c["beam_width"])].append(row)
        rows.append(row)
    lines = [
        f"HF result files: {len(hf_paths)}, Go result files: {len(go_paths)} (rounds x N slices); latency per "
        "query = median over rounds, cell value = median over queries; ms include prompt building.",
        "",
        "| N | W | in ctx | prompt tok | queries | HF ms (generate) | Go ms | HF/Go | top-1 HF=Go | top-1 Go=ref | "
        "Go runs/query | gold@1 HF | gold@1 Go |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    med = statistics.median
    for (n, w), rs in sorted(cells.items()):
        agree = sum(r["hf"]["top1"] == r["go"]["top1"] for r in rs)
        refd = [r for r in rs if r["ref"]]
        ragree = sum(r["ref"]["top1"] == r["go"]["top1"] for r in refd)
        hm, gm = med(r["hf_ms"] for r in rs), med(r["go_ms"] for r in rs)
        lines.append(
            f"| {n} | {w} | {med(r['go']['included'] for r in rs):g} | {med(r['go']['prompt_tokens'] for r in rs):g} "
            f"| {len(rs)} | {hm:.1f} ({med(r['hf_gen_ms'] for r in rs):.1f}) | {gm:.2f} | {hm / gm:.1f}x "
            f"| {agree}/{len(rs)} | {ragree}/{len(refd)} | {med(r['go']['runs'] for r in rs):g} "
            f"| {sum(r['hf']['top1'] == r['case']['gold'] for r in rs)} | {sum(r['go']['top1'] == r['case']['gold'] for r in rs)} |")
    hm, gm = med(r["hf_ms"] for r in rows), med(r["go_ms"] for r in rows)
    ratios = [r["hf_ms"] / r["go_ms"] for r in rows]
    agree = sum(r["hf"]["top1"] == r["go"]["top1"] for r in rows)
    refd = [r for r in rows if r["ref"]]
    lines += ["", f"Overall ({len(rows)} query-cells): HF median {hm:.1f} ms, Go median {gm:.2f} ms, ratio of medians "
              f"{hm / gm:.1f}x, median per-query ratio {med(ratios):.1f}x (min {min(ratios):.1f}x); "
              f"top-1 HF=Go {agree}/{len(rows)} ({100 * agree / len(rows):.0f}%); "
              f"top-1 Go=ref {sum(r['ref']['top1'] == r['go']['top1'] for r in refd)}/{len(refd)}."]
    # Disagreements, classified.
    dis = [r for r in rows if r["hf"]["top1"] != r["go"]["top1"]]
    kinds = Counter()
    for r in dis:
        kinds[(r["hf"]["route"], r["go"]["route"], r["hf"]["top1"] is None)] += 1
    lines += ["", f"HF != Go: {len(dis)} cases; by (HF route, Go route, HF unfinished): "
              + ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items(), key=lambda x: -x[1]))]
    if explain and dis:
        torch.set_num_threads(2)
        dec, _ = load_decoder(model_dir)
        hfm, env = build_hf_llama(dec), Env(model_dir)
        why = Counter()
        for r in dis[:explain] if explain > 0 else dis:
            c = r["case"]
            ga = docid_answer(env, r["go"]["top1"], r["go"]["route"])
            g_lp, g_len = hf_answer_logp(hfm, env, c, ga)
            if r["hf"]["top1"] is None:
                why["HF returned no complete docid"] += 1
                continue
            h_lp, h_len = hf_answer_logp(hfm, env, c, r["hf"]["answer_ids"])
            if h_lp / h_len > g_lp / g_len and h_lp > g_lp:
                why["objective (no renormalisation): HF's answer has the higher full-vocab log p, summed and "
                    "per token; Go's has the higher sum renormalised over the trie's allowed tokens"] += 1
            elif h_lp / h_len > g_lp / g_len:
                why["objective (length penalty): only the division by length makes HF prefer its answer"] += 1
            else:
                why["search: HF's own objective prefers Go's answer; its beam pruned it"] += 1
        lines += ["", f"Why (first {sum(why.values())} disagreements, HF objective recomputed by teacher forcing):"]
        lines += [f"- {k}: {v}" for k, v in why.most_common()]
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def verify(model_dir: str) -> dict:
    from ..data import make_split
    from ..export import ort_session

    torch.set_num_threads(2)
    dec, src = load_decoder(model_dir)
    hf = build_hf_llama(dec)
    env = Env(model_dir)
    sess = ort_session(os.path.join(model_dir, env.man["onnx"]))
    split = make_split()
    docs = split.docs
    worst = {"hf_vs_torch": 0.0, "hf_vs_onnx": 0.0}
    prompts = 0
    for q in split.dev[:4]:
        cands = [Candidate(docs[d].title, docs[d].text) for d in sorted(docs)[:5]]
        p = build_prompt(env.encode, q.query, cands, env.man["max_context_tokens"],
                         template=env.man.get("template"), prompt_format=int(env.man.get("prompt_format") or 1))
        for k, v in logit_diff(hf, dec, p.ids, sess).items():
            worst[k] = max(worst[k], v)
        prompts += 1
    out = {"weights": src, "prompts": prompts, **worst, "atol": LOGITS_ATOL,
           "ok": max(worst.values()) <= LOGITS_ATOL}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.hf_baseline")
    ap.add_argument("--model-dir", default=DEFAULT_MODEL_DIR)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify")
    s = sub.add_parser("cases")
    s.add_argument("--out", required=True)
    s.add_argument("--queries", type=int, default=20)
    s.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("hf")
    s.add_argument("--cases", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--repeats", type=int, default=1)
    s.add_argument("--threads", type=int, default=2)
    s = sub.add_parser("ref")
    s.add_argument("--cases", required=True)
    s.add_argument("--out", required=True)
    s = sub.add_parser("table")
    s.add_argument("--cases", required=True)
    s.add_argument("--hf", nargs="+", required=True)
    s.add_argument("--go", nargs="+", required=True)
    s.add_argument("--ref")
    s.add_argument("--explain", type=int, default=-1, help="disagreements to analyse (-1 all, 0 none)")
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        r = verify(a.model_dir)
        print(json.dumps(r))
        if not r["ok"]:
            sys.exit(1)
    elif a.cmd == "cases":
        cs = make_cases(a.model_dir, a.queries, a.seed)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as f:
            for c in cs:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        print(f"cases: {len(cs)} -> {a.out}", file=sys.stderr)
    elif a.cmd == "hf":
        run_hf(a.cases, a.out, a.model_dir, a.repeats, a.threads)
    elif a.cmd == "ref":
        run_ref(a.cases, a.out, a.model_dir)
    elif a.cmd == "table":
        expand = lambda ps: sorted(x for p in ps for x in (glob.glob(p) or [p]))  # noqa: E731
        print(table(a.cases, expand(a.hf), expand(a.go), a.ref, a.model_dir, a.explain))


if __name__ == "__main__":
    main()
