"""Converts a shared SMART-format collection (../shared/data/<name>: cranfield, cacm) into the project's
BEIR layout where the title is the docid, as data/nq_qed is: the docid becomes `unique_title` (the title, or
`title [number]` where titles are shared or empty), qrels are re-keyed from the numeric ids to those titles,
and judgements with a relevance code <= 0 (Cranfield's -1) are dropped. Deterministic; standard library only.

    python3 data/cranfield/convert.py ../shared/data/cranfield data/cranfield
    python3 data/cranfield/convert.py ../shared/data/cacm data/cacm
"""

import gzip
import json
import sys


def main(src: str, dst: str) -> None:
    title = {}
    with gzip.open(f"{src}/corpus.jsonl.gz", "rt", encoding="utf-8") as f, \
            gzip.open(f"{dst}/corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as out:
        for line in f:
            d = json.loads(line)
            t = d["unique_title"].strip()
            if t in title.values():
                raise SystemExit(f"duplicate unique_title {t!r}")
            title[d["docid"]] = t
            out.write(json.dumps({"docid": t, "title": t, "text": d.get("text") or t}, ensure_ascii=False) + "\n")
    judged = set()
    with open(f"{src}/qrels.tsv", encoding="utf-8") as f, open(f"{dst}/qrels.tsv", "w", encoding="utf-8") as out:
        out.write("qid\tdocid\trelevance\n")
        for i, line in enumerate(f):
            qid, docid, rel = line.rstrip("\n").split("\t")
            if i == 0 and qid == "qid":
                continue
            if int(rel) <= 0:
                continue
            out.write(f"{qid}\t{title[docid]}\t1\n")
            judged.add(qid)
    with gzip.open(f"{src}/queries.jsonl.gz", "rt", encoding="utf-8") as f, \
            gzip.open(f"{dst}/queries.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as out:
        for line in f:
            q = json.loads(line)
            if q["qid"] in judged:
                out.write(json.dumps({"qid": q["qid"], "query": q["query"].strip()}, ensure_ascii=False) + "\n")
    print(f"{dst}: {len(title)} documents, {len(judged)} judged queries", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
