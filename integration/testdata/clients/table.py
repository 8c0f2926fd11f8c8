"""Print the issue's table (issue 13) from check.py / check.js reports: sidecar vs Elasticsearch.

Usage: python table.py <client> <sidecar report>... -- <elasticsearch report>...
(one report per query, in the same order on both sides; the first pair also gives info, ping, count).
"""
import json
import statistics
import sys

client = sys.argv[1]
cut = sys.argv.index("--")
sc = [json.load(open(p)) for p in sys.argv[2:cut]]
es = [json.load(open(p)) for p in sys.argv[cut + 1:]]


def ids(hits):
    return [h["id"] for h in hits]


s0, e0 = sc[0], es[0]
rows = [
    ("info() (GET /)", f'{s0["info"]["status"]}, version {s0["info"]["version"]}, X-Elastic-Product {s0["info"]["product"]}',
     f'{e0["info"]["status"]}, version {e0["info"]["version"]}, X-Elastic-Product {e0["info"]["product"]}'),
    ("ping() (HEAD /)", str(s0["ping"]), str(e0["ping"])),
    ("count()", str(s0["count"]), str(e0["count"])),
    ("search() without an index", f'{len(s0["search_no_index"]["hits"])} hits from {s0["search_no_index"]["indices"]}, mode {s0["search_no_index"]["mode"]}',
     f'{len(e0["search_no_index"]["hits"])} hits from {e0["search_no_index"]["indices"]}'),
]
keys_s = sorted({tuple(h["source_keys"]) for r in sc for h in r["source_filter"]["hits"]})
keys_e = sorted({tuple(h["source_keys"]) for r in es for h in r["source_filter"]["hits"]})
recalled = sum(1 for r in sc for h in r["source_filter"]["hits"] if h["provenance"] == "parametric" and h["score"] is None)
rows.append(('search(..., source=["title"])', f'_source keys {keys_s} on every hit ({recalled} recalled hits over {len(sc)} queries)',
             f'_source keys {keys_e}'))
missing12, missing123, dups, consistent = [], [], [], 0
for s, e in zip(sc, es):
    top10 = ids(e["pages"][0]) + ids(e["pages"][1])
    p12 = ids(s["pages"][0]) + ids(s["pages"][1])
    p123 = p12 + ids(s["pages"][2])
    missing12.append(len(set(top10) - set(p12)))
    missing123.append(len(set(top10) - set(p123)))
    dups.append(len(p123) - len(set(p123)))
    consistent += p12 == ids(s["search"]["hits"])
rows.append(("page 1 then from=5 (size 5)",
             f'pages 1+2 == first 10 of the ranked window on {consistent}/{len(sc)} queries; duplicates over 3 pages {dups}; '
             f'ES top-10 docs not on pages 1-2 {missing12} (pushed down by recalled docs), not on pages 1-3 {missing123}',
             "consistent paging"))
took = [r["search"]["took"] for r in sc]
cms = [r["search"]["client_ms"] for r in sc]
etook = [r["search"]["took"] for r in es]
ecms = [r["search"]["client_ms"] for r in es]
rows.append(("took", f'median took {statistics.median(took)} ms, client measured median {statistics.median(cms):.0f} ms',
             f'median took {statistics.median(etook)} ms, client measured median {statistics.median(ecms):.0f} ms'))
rows.append(("aggregations", "equal to Elasticsearch's" if all(s["aggs"] == e["aggs"] for s, e in zip(sc, es)) else "DIFFER", "-"))
rows.append(("index outside the allow-list / `*`", f'{s0["other_index"]["status"]} {s0["other_index"]["error"]} {s0["other_index"]["type"]} / '
             f'{s0["wildcard"]["status"]} {s0["wildcard"]["error"]} {s0["wildcard"]["type"]}',
             f'{e0["other_index"]["status"]} / {e0["wildcard"]["status"]}'))
if "big_body" in s0:
    b, eb = s0["big_body"], e0.get("big_body", {})
    rows.append(("10 MB body", f'{b["status"]} {b["error"]} {b.get("type")}', f'{eb.get("status")} {eb.get("error")} {eb.get("type")}'))

print(f"\n{client}\n| call | sidecar | Elasticsearch |\n|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
