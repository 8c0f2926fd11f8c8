"""Reference routed, trie-constrained decoding (the algorithm the Go engine implements; golden vectors).

Scores are log-probabilities renormalised over the allowed set at each step (MODEL_FORMAT.md), computed
here in float64 from the model's float32 logits.

Step 0 (logits z0 after the prompt): A0 = {[COPY]} (only if there is at least one context docid) + the
first tokens of the global (seen-corpus) trie. logp0(t) = z0[t] - logsumexp(z0[A0]); p_copy =
exp(logp0([COPY])) (0 without candidates). An empty A0 raises EmptyAllowedSetError.

Copy route (exact): every context docid d scores logp0([COPY]) + sum over its tokens of
z_node[t] - logsumexp(z_node[children(node)]), z_node = logits after feeding [COPY] + the prefix up to node.
A node with one child contributes exactly 0 and is not run.

Parametric route, beam width W:
    live = top-W tokens of A0 \\ {[COPY]} by (logp0 desc, token id asc), each a beam (tokens, score)
    finished = []
    loop:
        for each live beam: while its trie node has exactly one child: append it at cost 0; if that child
            is [end] the beam moves to finished
        if no live beams: stop
        if len(finished) >= W and max(live scores) <= the W-th best finished score: stop
        pool = every live beam extended by every child c of its node, score + z[c] - logsumexp(z[children])
        sort pool by (score desc, token-id tuple asc); keep the first W
        those ending in [end] -> finished; the rest are the new live beams
Final: union of the copy-route docids and the finished parametric beams; a docid in both keeps the higher
score and its route (copy on an exact tie); sort by (score desc, docid utf-8 bytes asc); first W.

Scoring "vocab" (the sidecar's experimental.scoring: vocab): every step after step 0 is normalised over the whole
vocabulary instead of the allowed set, z[t] - logsumexp(z), and a node with one child is scored (and run) like any
other, so every token of a title costs the model's own log-probability (a seen title the trie completes where the
model was heading for another costs what the model gives it). The parametric route still takes a forced chain
whole at the start of an iteration, now charging each of its tokens. Step 0 is as above.

Prompt budget: decoding starts from prompt_for_decoding, which raises ContextFullError when the header and
query block alone exceed max_prompt_tokens (the Go engine's inference.ErrContextFull): there is no prompt
to decode, not a prompt without candidates (MODEL_FORMAT.md, "Prompt budget").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from .prompt import Candidate, Prompt, build_prompt

ROUTE_COPY = "copy"
ROUTE_PARAMETRIC = "parametric"


class EmptyAllowedSetError(ValueError):
    """Raised when the step-0 allowed set is empty (no seen corpus and no candidates)."""


class ContextFullError(ValueError):
    """Raised when the header and query block alone exceed the prompt budget (Go: inference.ErrContextFull)."""


def prompt_for_decoding(
    encode: Callable[[str], list[int]],
    query: str,
    candidates: Sequence[Candidate],
    max_prompt_tokens: int,
    **kw,
) -> Prompt:
    """Builds the prompt to decode, as build_prompt does, but raises ContextFullError where build_prompt
    returns a prompt over max_prompt_tokens (header + query block alone longer than the budget, so no
    candidate fits either). The model was never trained past its budget, and a parametric-only answer
    from such a prompt would look like a real one; the sidecar answers BM25 with context_full instead."""
    p = build_prompt(encode, query, candidates, max_prompt_tokens, **kw)
    if len(p.ids) > max_prompt_tokens:
        raise ContextFullError(
            f"prompt of header and query is {len(p.ids)} tokens, budget {max_prompt_tokens}: context full")
    return p


@dataclass
class TrieNode:
    children: dict[int, "TrieNode"] = field(default_factory=dict)
    docid: str | None = None  # set on the node reached by a docid's final [end] token


class Trie:
    """A trie over token ids; each docid is inserted as encode(title) + [end]."""

    def __init__(self) -> None:
        self.root = TrieNode()
        self.size = 0

    def add(self, tokens: Sequence[int], docid: str) -> None:
        n = self.root
        for t in tokens:
            n = n.children.setdefault(t, TrieNode())
        if n.docid is None:  # the first docid with this token sequence wins
            n.docid = docid
            self.size += 1

    @classmethod
    def build(cls, docids: Iterable[str], encode: Callable[[str], list[int]], end_token_id: int) -> "Trie":
        t = cls()
        for d in docids:
            t.add(encode(d) + [end_token_id], d)
        return t


class Scorer(Protocol):
    def logits(self, answer_prefix: tuple[int, ...]) -> np.ndarray:
        """Returns the float32 [V] logits after the prompt followed by answer_prefix."""


@dataclass(frozen=True)
class Beam:
    docid: str
    route: str
    score: float


@dataclass
class Result:
    p_copy: float
    beams: list[Beam]
    copy: list[Beam] = field(default_factory=list)  # every copy-route docid, best first (before the top-W cut)


def _lse(x: np.ndarray) -> float:
    m = float(x.max())
    return m + math.log(float(np.exp(x - m).sum()))


SCORINGS = ("trie", "vocab")


def _renorm(z: np.ndarray, allowed: list[int], scoring: str = "trie") -> dict[int, float]:
    v = z[allowed].astype(np.float64)
    l = _lse(z.astype(np.float64) if scoring == "vocab" else v)
    return {t: float(x) - l for t, x in zip(allowed, v)}


def decode(
    scorer: Scorer,
    global_trie: Trie,
    context_trie: Trie,
    copy_token_id: int,
    end_token_id: int,
    beam_width: int,
    scoring: str = "trie",
) -> Result:
    """Runs the routed constrained beam search described in the module doc."""
    if beam_width < 1:
        raise ValueError("beam_width must be >= 1")
    if scoring not in SCORINGS:
        raise ValueError(f"scoring {scoring!r}: want one of {SCORINGS}")
    has_ctx = bool(context_trie.root.children)
    first = sorted(global_trie.root.children)
    allowed0 = ([copy_token_id] if has_ctx else []) + first
    if not allowed0:
        raise EmptyAllowedSetError("step-0 allowed set is empty: no seen corpus and no candidates")
    logp0 = _renorm(scorer.logits(()), allowed0)
    p_copy = math.exp(logp0[copy_token_id]) if has_ctx else 0.0

    results: dict[str, Beam] = {}
    if has_ctx:
        _copy_route(scorer, context_trie.root, (copy_token_id,), logp0[copy_token_id], results, scoring)
    _copy_only = list(results.values())
    key = lambda b: (-b.score, b.docid.encode("utf-8"))  # noqa: E731
    copy_all = sorted(_copy_only, key=key)
    for docid, score in _parametric(scorer, global_trie, logp0, first, end_token_id, beam_width, scoring):
        old = results.get(docid)
        if old is None or score > old.score:
            results[docid] = Beam(docid, ROUTE_PARAMETRIC, score)
    beams = sorted(results.values(), key=key)
    return Result(p_copy, beams[:beam_width], copy_all)


def _copy_route(scorer: Scorer, node: TrieNode, prefix: tuple[int, ...], score: float, out: dict,
                scoring: str = "trie") -> None:
    # Iterative DFS; a node with several children (any child, scored by the vocabulary) costs one forward.
    stack = [(node, prefix, score)]
    while stack:
        n, p, s = stack.pop()
        if n.docid is not None and not n.children:
            out[n.docid] = Beam(n.docid, ROUTE_COPY, s)
            continue
        if len(n.children) == 1 and scoring == "trie":
            (t, child), = n.children.items()
            stack.append((child, p + (t,), s))
            continue
        lp = _renorm(scorer.logits(p), sorted(n.children), scoring)
        for t, child in n.children.items():
            stack.append((child, p + (t,), s + lp[t]))


def _parametric(scorer, trie: Trie, logp0: dict, first: list[int], end: int, w: int,
                scoring: str = "trie") -> list[tuple[str, float]]:
    if not first:
        return []
    init = sorted(((logp0[t], (t,)) for t in first), key=lambda x: (-x[0], x[1]))[:w]
    live = [(s, toks, trie.root.children[toks[0]]) for s, toks in init]
    finished: list[tuple[float, tuple[int, ...], TrieNode]] = []
    # an initial token may itself be [end] only for an empty title; handle uniformly
    live2 = []
    for s, toks, n in live:
        (finished if toks[-1] == end else live2).append((s, toks, n))
    live = live2
    while True:
        nxt = []
        for s, toks, n in live:
            done = False
            while len(n.children) == 1:
                (t, child), = n.children.items()
                if scoring == "vocab":  # a forced token is charged as it is taken (Go: in the next Run)
                    s += _renorm(scorer.logits(toks), [t], scoring)[t]
                n, toks = child, toks + (t,)
                if t == end:
                    finished.append((s, toks, n))
                    done = True
                    break
            if not done:
                nxt.append((s, toks, n))
        live = nxt
        if not live:
            break
        if len(finished) >= w:
            kth = sorted((f[0] for f in finished), reverse=True)[w - 1]
            if max(b[0] for b in live) <= kth:
                break
        pool = []
        for s, toks, n in live:
            lp = _renorm(scorer.logits(toks), sorted(n.children), scoring)
            for t, child in n.children.items():
                pool.append((s + lp[t], toks + (t,), child))
        pool.sort(key=lambda x: (-x[0], x[1]))
        live = []
        for b in pool[:w]:
            (finished if b[1][-1] == end else live).append(b)
    return [(n.docid, s) for s, _, n in finished if n.docid is not None]


class CachedPromptScorer:
    """A Scorer over any contract step function: prefills the prompt once, then runs each answer prefix
    as one chunk on top of the cached prompt KV (a full forward per node; simple, not fast).

    step(input_ids, position_ids, attention_mask, logits_index, past) -> (logits [1,m,V], presents list),
    all numpy; past / presents are [k0, v0, k1, v1, ...] in layout [1, len, kv_heads, head_dim]."""

    def __init__(self, step, prompt_ids: Sequence[int], empty_past: list[np.ndarray], layout=None) -> None:
        """layout: block reading's (attend [p,p] bool, positions [p]) of the prompt (model.block_attention); the
        answer then follows the prompt's last position. None: causal, at positions 0..p-1."""
        self._step = step
        p = len(prompt_ids)
        ids = np.asarray([prompt_ids], dtype=np.int64)
        if layout is None:
            pos, mask = np.arange(p, dtype=np.int64)[None], causal_mask_np(0, p)
        else:
            attend, positions = (np.asarray(x) for x in layout)
            pos = positions.astype(np.int64)[None]
            mask = np.where(attend, 0.0, -1e9).astype(np.float32)[None]
        logits, self._past = step(ids, pos, mask, np.asarray([p - 1], np.int64), empty_past)
        self._p = p
        self._pos0 = int(pos[0, -1]) + 1
        self._cache: dict[tuple[int, ...], np.ndarray] = {(): logits[0, -1]}

    def logits(self, answer_prefix: tuple[int, ...]) -> np.ndarray:
        z = self._cache.get(answer_prefix)
        if z is None:
            k = len(answer_prefix)
            ids = np.asarray([answer_prefix], dtype=np.int64)
            pos = np.arange(self._pos0, self._pos0 + k, dtype=np.int64)[None]
            out, _ = self._step(ids, pos, causal_mask_np(self._p, k), np.asarray([k - 1], np.int64), self._past)
            z = out[0, -1]
            self._cache[answer_prefix] = z
        return z


BLOCK_LAYOUTS = ("contiguous", "shared")


def block_attention(segments: Sequence[int], length: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Block reading's attention and positions (issue 26) over a sequence of `length` tokens whose prompt has the
    given segments (prompt.Prompt.segments: the ends of the header and of each candidate block; the query and the
    answer follow). Returns (attend [length, length] bool, True = may attend; positions [length] int64):
    - contiguous (Block-Attention): a candidate block sees itself only, every token at its index;
    - shared (BlockRank): a block sees the header and itself, every block starts right after the header, and the
      query and the answer follow the longest block.
    The header, the query and the answer are causal over everything before them. It is what the Go engine
    computes with stored blocks (inference/blocks.go), as one mask; training feeds it to Decoder.train_logits."""
    if layout not in BLOCK_LAYOUTS:
        raise ValueError(f"block layout {layout!r}: want one of {BLOCK_LAYOUTS}")
    attend = np.tril(np.ones((length, length), dtype=bool))
    pos = np.arange(length, dtype=np.int64)
    h, q = segments[0], segments[-1]
    longest = 0
    for start, end in zip(segments[:-1], segments[1:]):
        attend[start:end, (0 if layout == "contiguous" else h):start] = False
        longest = max(longest, end - start)
        if layout == "shared":
            pos[start:end] = np.arange(h, h + end - start)
    if layout == "shared":
        pos[q:] = np.arange(h + longest, h + longest + length - q)
    return attend, pos


def causal_mask_np(past: int, n: int) -> np.ndarray:
    """Returns the additive float32 [1,n,past+n] mask of a causal chunk after `past` cached tokens."""
    m = np.zeros((1, n, past + n), dtype=np.float32)
    m[0, :, past:] = np.triu(np.full((n, n), -1e9, dtype=np.float32), 1)
    return m


def torch_step(model, resident: bool | None = None):
    """Adapts a model.Decoder to the numpy step signature of CachedPromptScorer, running on the model's device.

    resident (default: True when the model is not on the CPU): the presents are returned as torch tensors on
    that device and accepted back as past, so a prompt's KV cache stays on the device between steps (only the
    logits come back to the host); False returns numpy presents (the ONNX-compatible signature)."""
    import torch

    dev = next(model.parameters()).device
    keep = dev.type != "cpu" if resident is None else resident

    def as_t(x):
        return x.to(dev) if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x)).to(dev)

    def step(ids, pos, mask, idx, past):
        with torch.no_grad():
            out = model.step(as_t(ids), as_t(pos), as_t(mask), as_t(idx), *[as_t(p) for p in past])
        logits = out[0].float().cpu().numpy()
        if keep:
            return logits, list(out[1:])
        return logits, [o.cpu().numpy() for o in out[1:]]

    return step


def ort_session(path: str):
    """An ONNX Runtime CPU session of the graph at path (2 threads), for ort_step."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_step(session, num_layers: int):
    """Adapts an onnxruntime InferenceSession of model.onnx to the numpy step signature."""

    names = ["logits"] + [f"present.{l}.{kv}" for l in range(num_layers) for kv in ("key", "value")]

    def step(ids, pos, mask, idx, past):
        feed = {"input_ids": ids, "position_ids": pos, "attention_mask": mask, "logits_index": idx}
        for l in range(num_layers):
            feed[f"past_key_values.{l}.key"] = past[2 * l]
            feed[f"past_key_values.{l}.value"] = past[2 * l + 1]
        out = session.run(names, feed)
        return out[0], out[1:]

    return step
