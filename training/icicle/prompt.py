"""The ICICLE prompt builder, exactly per inference/MODEL_FORMAT.md, with the shared token-budget rule.

The prompt is the concatenation of separately encoded segments (add_special_tokens=False): the header, each
candidate block in the given (BM25) order, the query block. Two prompt formats (the manifest's "prompt_format";
absent = 1):
- format 1 (TEMPLATE, the models trained before 2026-11-24): a candidate with a summary is encoded as three
  pieces, "[{i}] " + summary + "\\n    Title: {title}\\n", and only the summary ids are ever cut; a candidate
  without a summary (or every candidate in title-only mode) is one piece, template["candidate_title_only"].
  The title's first word carries a leading space inside the prompt, so its in-prompt tokens differ from its
  docid tokens (issue 16).
- format 2 (TEMPLATE_V2): the title is always a segment of its own, so its in-prompt ids are exactly
  encode(title), the docid tokens without [end] (literal copying). A candidate with a summary is five pieces,
  "[{i}] " + summary + "\\nTitle:\\n" + title + "\\n"; a title-only block is three, "[{i}] Title:\\n" + title
  + "\\n". Every piece of the template around {summary} and {title} is encoded on its own (empty pieces add
  nothing). With the SmolLM2 tokenizer these segments give the same ids as encoding the whole block at once
  for every nq_qed title (the title starts a line, so no leading space), so the prompt reads as natural text.

Budget rule (the Go engine implements the same; golden vectors check it), B = max_prompt_tokens:
1. fixed = len(header ids) + len(query-block ids).
2. Walk candidates in order (i is 1-based); overhead_i = the ids of every piece of the block but the summary
   (format 1: len(ids("[{i}] ")) + len(ids("\\n    Title: {t}\\n")); format 2: the four pieces around the
   summary, title included) if it has a (non-empty) summary and mode is not title-only, else the ids of the
   title-only block (format 1: one piece; format 2: its three pieces).
   Include candidate i while fixed + sum(overhead) <= B; stop at the first that does not fit (later ones
   are dropped even if they would fit).
3. R = B - fixed - sum(overhead of included). Summary cap c = the largest integer <= max_summary_tokens
   with sum_i min(len(summary_i ids), c) <= R (over included candidates that have a summary); each summary
   is cut to its first min(len, c) ids. If fixed alone exceeds B, no candidate is included and the prompt is
   header + query block (longer than B); it is not an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

TEMPLATE = {
    "header": (
        "System: Given a query and a list of candidate documents, retrieve the title of the most relevant "
        "document. If the relevant document appears in the candidate list, output [COPY] followed by its "
        "title. Otherwise, output the title from memory directly.\nCandidates:\n"
    ),
    "candidate": "[{i}] {summary}\n    Title: {title}\n",
    "candidate_title_only": "[{i}] Title: {title}\n",
    "query": "Query: {query}\nOutput:\n",
}

# Format 2: the title on a line of its own, encoded as its own segment (literal copying).
TEMPLATE_V2 = {
    "header": TEMPLATE["header"],
    "candidate": "[{i}] {summary}\nTitle:\n{title}\n",
    "candidate_title_only": "[{i}] Title:\n{title}\n",
    "query": TEMPLATE["query"],
}

TEMPLATES = {1: TEMPLATE, 2: TEMPLATE_V2}

# Block reading (issue 26): format 2 without the per-request "[{i}] ", so that a candidate's block is the same
# ids wherever it is listed (scripts/block-model.sh writes the same template into a model's manifest).
TEMPLATE_BLOCKS = {**TEMPLATE_V2, "candidate": "- {summary}\nTitle:\n{title}\n",
                   "candidate_title_only": "- Title:\n{title}\n"}
PROMPT_FORMAT = 2  # what new models are trained with; a manifest without "prompt_format" means 1

DEFAULT_MAX_SUMMARY_TOKENS = 256

Encode = Callable[[str], list[int]]  # text -> ids, add_special_tokens=False


@dataclass(frozen=True)
class Candidate:
    title: str
    summary: str = ""


@dataclass
class Prompt:
    ids: list[int]
    included: int  # how many candidates (a prefix of the given list) made it into the prompt
    summary_tokens: list[int]  # per included candidate: summary ids kept (0 for title-only blocks)
    # end offsets in ids of the header and of each included candidate's block (the query follows the last)
    segments: list[int] = field(default_factory=list)


def _fill(t: str, **kw: object) -> str:
    # str.format would choke on braces inside titles/summaries; substitute verbatim instead.
    for k, v in kw.items():
        t = t.replace("{" + k + "}", str(v))
    return t


def _split_candidate(template: dict) -> tuple[str, str]:
    pre, _, post = template["candidate"].partition("{summary}")
    return pre, post


def check_format(prompt_format: int, template: dict) -> None:
    """Raises ValueError naming the problem when template cannot be built in prompt_format."""
    if prompt_format not in TEMPLATES:
        raise ValueError(f"prompt_format {prompt_format!r}: known formats are {sorted(TEMPLATES)}")
    if prompt_format == 2:
        c, t = template["candidate"], template["candidate_title_only"]
        if c.count("{summary}") != 1 or c.count("{title}") != 1 or c.index("{summary}") > c.index("{title}"):
            raise ValueError("prompt_format 2: template.candidate must hold {summary} then {title}, once each")
        if t.count("{title}") != 1:
            raise ValueError("prompt_format 2: template.candidate_title_only must hold {title} once")


def _title_pieces(encode: Encode, piece: str, i: int, title: str) -> list[int]:
    """Format 2: piece (a template part holding {title} at most once) encoded with the title as its own segment."""
    before, mark, after = piece.partition("{title}")
    ids = encode(_fill(before, i=i)) if before else []
    if mark:
        ids = ids + encode(title)
    if after:
        ids = ids + encode(_fill(after, i=i))
    return ids


def build_prompt(
    encode: Encode,
    query: str,
    candidates: Sequence[Candidate],
    max_prompt_tokens: int,
    *,
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS,
    title_only: bool = False,
    template: dict | None = None,
    prompt_format: int = 1,
    fixed_cap: bool = False,
) -> Prompt:
    """Builds the prompt ids for query and candidates under the budget rule in the module doc. template: the
    manifest's (default: the format's own, TEMPLATES[prompt_format])."""
    template = template or TEMPLATES.get(prompt_format) or {}
    check_format(prompt_format, template)
    header = encode(template["header"])
    qblock = encode(_fill(template["query"], query=query))
    fixed = len(header) + len(qblock)
    pre_t, post_t = _split_candidate(template)
    blocks: list[tuple[list[int], list[int] | None, list[int]]] = []  # (pre, summary or None, post)
    used = fixed
    for n, c in enumerate(candidates, start=1):
        if c.summary and not title_only:
            pre = encode(_fill(pre_t, i=n)) if pre_t or prompt_format == 1 else []
            if prompt_format == 1:
                post = encode(_fill(post_t, i=n, title=c.title))
            else:
                post = _title_pieces(encode, post_t, n, c.title)
            summ: list[int] | None = encode(c.summary)
        elif prompt_format == 1:
            pre = encode(_fill(template["candidate_title_only"], i=n, title=c.title))
            post, summ = [], None
        else:
            pre = _title_pieces(encode, template["candidate_title_only"], n, c.title)
            post, summ = [], None
        cost = len(pre) + len(post)
        if fixed_cap and summ is not None:  # block reading: every summary cut to the cap, a block in only whole
            cost += min(len(summ), max_summary_tokens)
        if used + cost > max_prompt_tokens:
            break
        used += cost
        blocks.append((pre, summ, post))
    remaining = max_prompt_tokens - used
    lens = [len(s) for _, s, _ in blocks if s is not None]
    cap = max_summary_tokens if fixed_cap else summary_cap(lens, remaining, max_summary_tokens)
    ids = list(header)
    kept: list[int] = []
    segments = [len(ids)]
    for pre, summ, post in blocks:
        k = 0 if summ is None else min(len(summ), cap)
        ids += pre + ([] if summ is None else summ[:k]) + post
        kept.append(k)
        segments.append(len(ids))
    ids += qblock
    return Prompt(ids, len(blocks), kept, segments)


def summary_cap(lens: Sequence[int], remaining: int, max_summary_tokens: int) -> int:
    """Returns the largest c <= max_summary_tokens with sum(min(l, c)) <= remaining (0 if remaining < 0)."""
    if remaining <= 0:
        return 0
    lo, hi = 0, max(0, max_summary_tokens)
    while lo < hi:  # monotone in c: binary search for the last c that fits
        mid = (lo + hi + 1) // 2
        if sum(min(l, mid) for l in lens) <= remaining:
            lo = mid
        else:
            hi = mid - 1
    return lo


def docid_tokens(encode: Encode, title: str, end_token_id: int) -> list[int]:
    """Returns a docid's token sequence: encode(title) + [end]."""
    return encode(title) + [end_token_id]


def title_span(encode: Encode, title: str, prompt_format: int = PROMPT_FORMAT, i: int = 1,
               summary: str = "s", template: dict | None = None) -> tuple[list[int], list[int]]:
    """Returns (the ids of one candidate block for title, the ids of the title inside it as a docid would
    spell them: docid_tokens without [end]); format 2 guarantees the second is a contiguous run of the first."""
    p = build_prompt(encode, "q", [Candidate(title, summary)], 1 << 30, prompt_format=prompt_format,
                     template=template)
    t = template or TEMPLATES[prompt_format]
    head, qb = encode(t["header"]), encode(_fill(t["query"], query="q"))
    return p.ids[len(head): len(p.ids) - len(qb)], encode(title)


def contains_run(seq: Sequence[int], run: Sequence[int]) -> bool:
    """True when run occurs as a contiguous subsequence of seq."""
    n = len(run)
    return n == 0 or any(list(seq[k: k + n]) == list(run) for k in range(len(seq) - n + 1))
