"""BM25 Hits@1 on Cranfield with each shard's own term statistics (query_then_fetch, Elasticsearch's
default) and with the index's global ones (dfs_query_then_fetch), in the sidecar's layout and in the team
layout of team_index.py: how much of the difference between the two is shard statistics.

    python3 data/cranfield/shard_stats.py http://127.0.0.1:9200 icicle-cranfield-v team-cranfield

Standard library only; the query is the sidecar's (multi_match, best_fields, tie_breaker 0.5).
"""
import collections
import gzip
import json
import sys
import urllib.request

here = sys.path[0]


def load():
    with gzip.open(f"{here}/queries.jsonl.gz", "rt") as f:
        queries = [json.loads(line) for line in f]
    rel = collections.defaultdict(set)
    with open(f"{here}/qrels.tsv") as f:
        next(f)
        for line in f:
            qid, docid, grade = line.rstrip("\n").split("\t")
            if int(grade) > 0:
                rel[qid].add(docid)
    return [q for q in queries if q["qid"] in rel], rel


def top1(es, index, fields, docid, text, dfs):
    body = {"size": 1, "query": {"multi_match": {"query": text, "fields": fields, "type": "best_fields", "tie_breaker": 0.5}},
            "_source": [docid] if docid != "_id" else False}
    url = f"{es}/{index}/_search" + ("?search_type=dfs_query_then_fetch" if dfs else "")
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        hits = json.load(r)["hits"]["hits"]
    if not hits:
        return None
    return hits[0]["_id"] if docid == "_id" else hits[0]["_source"][docid]


def main(es, own, team):
    queries, rel = load()
    layouts = [(own, ["title", "summary", "text"], "docid"), (team, ["name", "icicle_summary", "body"], "_id")]
    for index, fields, docid in layouts:
        for dfs in (False, True):
            right = sum(top1(es, index, fields, docid, q["query"], dfs) in rel[q["qid"]] for q in queries)
            mode = "dfs_query_then_fetch" if dfs else "query_then_fetch"
            print(f"{index}\t{mode}\tHits@1 {right / len(queries):.3f} ({right}/{len(queries)})")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
