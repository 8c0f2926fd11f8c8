"""Drive the official Python Elasticsearch client against a URL and print what it saw, as one JSON object.

Usage: python check.py <base url> <index> <other index> <query> [big]
With "big", it also sends a 10 MB search body (the issue's last row; slow on the node itself).
integration/clients_test.go runs it against the sidecar and against Elasticsearch and compares; the
assertions live there. Any exception other than the ones probed here makes the run fail (non-zero exit).
"""
import json
import sys
import time

from elasticsearch import ApiError, AuthorizationException, Elasticsearch, __versionstr__

url, index, other, query = sys.argv[1:5]
es = Elasticsearch(url, request_timeout=60)
out = {"client": "python elasticsearch " + __versionstr__}

info = es.info()
out["info"] = {"status": info.meta.status, "version": info["version"]["number"],
               "product": info.meta.headers.get("x-elastic-product")}
out["ping"] = es.ping()
out["count"] = es.count(index=index)["count"]
match = {"match": {"text": query}}


def hits(resp):
    return [{"id": h["_id"], "source_keys": sorted((h.get("_source") or {}).keys()),
             "provenance": (h.get("_icicle") or {}).get("provenance"), "score": h.get("_score")}
            for h in resp["hits"]["hits"]]


t0 = time.monotonic()
resp = es.search(index=index, query=match, size=10)
out["search"] = {"hits": hits(resp), "took": resp["took"], "client_ms": (time.monotonic() - t0) * 1000,
                 "mode": (resp.body.get("icicle") or {}).get("mode"),
                 "total_ms": ((resp.body.get("icicle") or {}).get("timings") or {}).get("total_ms"),
                 "content_type": resp.meta.headers.get("content-type")}
resp = es.search(query=match, size=10)
out["search_no_index"] = {"hits": hits(resp), "indices": sorted({h["_index"] for h in resp["hits"]["hits"]}),
                          "mode": (resp.body.get("icicle") or {}).get("mode")}
resp = es.search(index=index, query=match, size=10, source=["title"])
out["source_filter"] = {"hits": hits(resp), "mode": (resp.body.get("icicle") or {}).get("mode")}
out["pages"] = [hits(es.search(index=index, query=match, size=5, from_=f)) for f in (0, 5, 10)]
resp = es.search(index=index, size=0, aggs={"seen": {"terms": {"field": "seen"}}})
out["aggs"] = resp["aggregations"]

for name, target in (("other_index", other), ("wildcard", "*")):
    try:
        es.search(index=target, query=match)
        out[name] = {"status": 200, "error": None}
    except AuthorizationException as e:
        out[name] = {"status": e.meta.status, "error": type(e).__name__, "type": e.error}

if sys.argv[5:] == ["big"]:
    try:
        es.search(index=index, query={"match": {"text": "x " * (5 << 20)}}, size=1)
        out["big_body"] = {"status": 200, "error": None}
    except ApiError as e:
        out["big_body"] = {"status": e.meta.status, "error": type(e).__name__, "type": e.error}

json.dump(out, sys.stdout)
