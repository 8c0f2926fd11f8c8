"""The ICICLE prompt builder, exactly per inference/MODEL_FORMAT.md, with the shared token-budget rule.

The prompt is the concatenation of separately encoded segments (add_special_tokens=False): the header, each
candidate block in the given (BM25) order, the query block. A candidate with a summary is encoded as three
pieces, "[{i}] " + summary + "\\n    Title: {title}\\n", and only the summary ids are ever cut; a candidate
without a summary (or every candidate in title-only mode) is one piece, template["candidate_title_only"].

Budget rule (the Go engine implements the same; golden vectors check it), B = max_prompt_tokens:
1. fixed = len(header ids) + len(query-block ids).
2. Walk candidates in order (i is 1-based); overhead_i = len(ids("[{i}] ")) + len(ids("\\n    Title: {t}\\n"))
   if it has a (non-empty) summary and mode is not title-only, else len(ids(candidate_title_only block)).
   Include candidate i while fixed + sum(overhead) <= B; stop at the first that does not fit (later ones
   are dropped even if they would fit).
3. R = B - fixed - sum(overhead of included). Summary cap c = the largest integer <= max_summary_tokens
   with sum_i min(len(summary_i ids), c) <= R (over included candidates that have a summary); each summary
   is cut to its first min(len, c) ids. If fixed alone exceeds B, no candidate is included and the prompt is
   header + query block (longer than B); it is not an error.
"""
from __future__ import annotations

from dataclasses import dataclass
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


def _fill(t: str, **kw: object) -> str:
    # str.format would choke on braces inside titles/summaries; substitute verbatim instead.
    for k, v in kw.items():
        t = t.replace("{" + k + "}", str(v))
    return t


def _split_candidate(template: dict) -> tuple[str, str]:
    pre, _, post = template["candidate"].partition("{summary}")
    return pre, post


def build_prompt(
    encode: Encode,
    query: str,
    candidates: Sequence[Candidate],
    max_prompt_tokens: int,
    *,
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS,
    title_only: bool = False,
    template: dict = TEMPLATE,
) -> Prompt:
    """Builds the prompt ids for query and candidates under the budget rule in the module doc."""
    header = encode(template["header"])
    qblock = encode(_fill(template["query"], query=query))
    fixed = len(header) + len(qblock)
    pre_t, post_t = _split_candidate(template)
    blocks: list[tuple[list[int], list[int] | None, list[int]]] = []  # (pre, summary or None, post)
    used = fixed
    for n, c in enumerate(candidates, start=1):
        if c.summary and not title_only:
            pre = encode(_fill(pre_t, i=n))
            post = encode(_fill(post_t, i=n, title=c.title))
            summ: list[int] | None = encode(c.summary)
        else:
            pre = encode(_fill(template["candidate_title_only"], i=n, title=c.title))
            post, summ = [], None
        cost = len(pre) + len(post)
        if used + cost > max_prompt_tokens:
            break
        used += cost
        blocks.append((pre, summ, post))
    remaining = max_prompt_tokens - used
    lens = [len(s) for _, s, _ in blocks if s is not None]
    cap = summary_cap(lens, remaining, max_summary_tokens)
    ids = list(header)
    kept: list[int] = []
    for pre, summ, post in blocks:
        k = 0 if summ is None else min(len(summ), cap)
        ids += pre + ([] if summ is None else summ[:k]) + post
        kept.append(k)
    ids += qblock
    return Prompt(ids, len(blocks), kept)


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
