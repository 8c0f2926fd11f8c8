"""Load the Cranfield corpus into an index laid out as a team's own would be, for the "A team's own index"
measurement (docs/evaluation.md): three shards, a custom analyzer, the title in `name`, the text in `body`,
the docid as the `_id`, and two fields the sidecar never reads. Nothing of the sidecar's layout is in it.

    python3 data/cranfield/team_index.py http://127.0.0.1:9200 team-cranfield data/cranfield/corpus.jsonl.gz

The index is deleted first. Standard library only.
"""
import gzip
import json
import sys
import urllib.error
import urllib.request


def call(es, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(es + path, data=body, method=method, headers={"content-type": ctype})
    try:
        with urllib.request.urlopen(req) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def main(es, index, corpus):
    call(es, "DELETE", "/" + index)
    text = {"type": "text", "analyzer": "team_text"}
    created = call(es, "PUT", "/" + index, json.dumps({
        "settings": {"number_of_shards": 3, "analysis": {"analyzer": {
            "team_text": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}},
        "mappings": {"properties": {"name": text, "body": text,
                                    "source": {"type": "keyword"}, "loaded": {"type": "date"}}},
    }).encode())
    if not created.get("acknowledged"):
        sys.exit(f"creating {index}: {created}")
    with gzip.open(corpus, "rt") as f:
        docs = [json.loads(line) for line in f]
    lines = []
    for d in docs:
        lines.append(json.dumps({"index": {"_id": d["docid"]}}))
        lines.append(json.dumps({"name": d["title"], "body": d["text"], "source": "cranfield", "loaded": "2026-11-25"}))
    for i in range(0, len(lines), 1000):
        r = call(es, "POST", f"/{index}/_bulk?refresh=true", ("\n".join(lines[i:i + 1000]) + "\n").encode(), "application/x-ndjson")
        if r.get("errors"):
            sys.exit(f"bulk into {index}: {json.dumps(r)[:500]}")
    print(f"{index}: {len(docs)} documents")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
