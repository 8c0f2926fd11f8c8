package dropin

import (
	"cmp"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlanSearch(t *testing.T) {
	tests := []struct {
		name, params, body  string
		query, from, reason string
		forwarded           string // the body sent on; empty means the request's own
		errField            string
		page                [4]int // pageFrom, pageSize, window, fetch when reranking; zero: 0, 10, 10, 10
	}{
		{name: "match, string", body: `{"query":{"match":{"title":"who sang"}}}`, query: "who sang", from: "query.match.title"},
		{name: "match, options", body: `{"query":{"match":{"text":{"query":"who sang","operator":"and"}}},"size":20}`, query: "who sang", from: "query.match.text", page: [4]int{0, 20, 20, 20}},
		{name: "match_phrase", body: `{"query":{"match_phrase":{"title":"the office"}}}`, query: "the office", from: "query.match_phrase.title"},
		{name: "multi_match", body: `{"query":{"multi_match":{"query":"fed chair","fields":["title","text"]}}}`, query: "fed chair", from: "query.multi_match"},
		{name: "bool with one must and a filter", body: `{"query":{"bool":{"must":[{"match":{"text":"fed chair"}}],"filter":[{"term":{"seen":false}}]}}}`,
			query: "fed chair", from: "query.bool.must.match.text"},
		{name: "bool must as an object", body: `{"query":{"bool":{"must":{"multi_match":{"query":"q"}},"must_not":{"term":{"x":1}}}}}`, query: "q", from: "query.bool.must.multi_match"},
		{name: "score sort is no sort", body: `{"query":{"match":{"title":"q"}},"sort":["_score",{"_score":{"order":"desc"}}]}`, query: "q", from: "query.match.title"},
		{name: "ext.icicle.query wins and is stripped", body: `{"query":{"match_all":{}},"ext":{"icicle":{"query":"fed chair"}}}`,
			query: "fed chair", from: "ext.icicle.query", forwarded: `{"query":{"match_all":{}},"from":0,"size":10}`},
		{name: "other ext sections stay", body: `{"query":{"match":{"title":"x"}},"ext":{"icicle":{"query":"y"},"other":{"a":1}}}`,
			query: "y", from: "ext.icicle.query", forwarded: `{"ext":{"other":{"a":1}},"query":{"match":{"title":"x"}},"from":0,"size":10}`},
		{name: "ext.icicle not a string", body: `{"ext":{"icicle":{"query":5}}}`, errField: "ext.icicle.query"},
		{name: "ext.icicle unknown key", body: `{"ext":{"icicle":{"querry":"x"}}}`, errField: "ext.icicle"},
		{name: "ext.icicle empty query", body: `{"ext":{"icicle":{"query":" "}}}`, errField: "ext.icicle.query"},
		{name: "scroll", params: "scroll=1m", body: `{"query":{"match":{"title":"q"}}}`, reason: ReasonScroll},
		{name: "from in the body: page 2 of the same window", body: `{"query":{"match":{"title":"q"}},"from":10}`, query: "q", from: "query.match.title",
			forwarded: `{"query":{"match":{"title":"q"}},"from":0,"size":20}`, page: [4]int{10, 10, 10, 20}},
		{name: "from in the query string wins", params: "from=5&size=5", body: `{"query":{"match":{"title":"q"}},"from":1}`, query: "q", from: "query.match.title",
			forwarded: `{"query":{"match":{"title":"q"}},"from":0,"size":10}`, page: [4]int{5, 5, 10, 10}},
		{name: "from zero is the first page", body: `{"query":{"match":{"title":"q"}},"from":0}`, query: "q", from: "query.match.title",
			forwarded: `{"query":{"match":{"title":"q"}},"from":0,"size":10}`, page: [4]int{0, 10, 10, 10}},
		{name: "size over the window widens it", body: `{"query":{"match":{"title":"q"}},"size":25,"from":25}`, query: "q", from: "query.match.title",
			forwarded: `{"query":{"match":{"title":"q"}},"from":0,"size":50}`, page: [4]int{25, 25, 25, 50}},
		{name: "ext.icicle.rank_window_size", body: `{"query":{"match":{"title":"q"}},"size":5,"ext":{"icicle":{"rank_window_size":40}}}`, query: "q", from: "query.match.title",
			forwarded: `{"query":{"match":{"title":"q"}},"from":0,"size":40}`, page: [4]int{0, 5, 40, 40}},
		{name: "rank window smaller than size", body: `{"query":{"match":{"title":"q"}},"size":50,"ext":{"icicle":{"rank_window_size":40}}}`, errField: "ext.icicle.rank_window_size"},
		{name: "rank window out of range", body: `{"query":{"match":{"title":"q"}},"ext":{"icicle":{"rank_window_size":0}}}`, errField: "ext.icicle.rank_window_size"},
		{name: "negative from passes through", body: `{"query":{"match":{"title":"q"}},"from":-1}`, reason: ReasonPaginated},
		{name: "search_after", body: `{"query":{"match":{"title":"q"}},"search_after":[1]}`, reason: ReasonPaginated},
		{name: "field sort", body: `{"query":{"match":{"title":"q"}},"sort":[{"ingested_at":"desc"}]}`, reason: ReasonSorted},
		{name: "ascending score", body: `{"query":{"match":{"title":"q"}},"sort":{"_score":"asc"}}`, reason: ReasonSorted},
		{name: "sort parameter", params: "sort=title.keyword:asc", body: `{"query":{"match":{"title":"q"}}}`, reason: ReasonSorted},
		{name: "aggregations only", body: `{"size":0,"aggs":{"seen":{"terms":{"field":"seen"}}}}`, reason: ReasonAggregationsOnly},
		{name: "size zero", params: "size=0", body: `{"query":{"match":{"title":"q"}}}`, reason: ReasonSizeZero},
		{name: "no body", params: "q=title:alpha", reason: ReasonNoQueryText},
		{name: "match_all", body: `{"query":{"match_all":{}}}`, reason: ReasonNoQueryText},
		{name: "bool with should", body: `{"query":{"bool":{"must":{"match":{"title":"q"}},"should":{"match":{"text":"r"}}}}}`, reason: ReasonNoQueryText},
		{name: "bool with two musts", body: `{"query":{"bool":{"must":[{"match":{"title":"q"}},{"match":{"text":"r"}}]}}}`, reason: ReasonNoQueryText},
		{name: "match on two fields", body: `{"query":{"match":{"title":"q","text":"r"}}}`, reason: ReasonNoQueryText},
		{name: "numeric match", body: `{"query":{"match":{"year":2024}}}`, reason: ReasonNoQueryText},
		{name: "query_string", body: `{"query":{"query_string":{"query":"title:q"}}}`, reason: ReasonNoQueryText},
		{name: "not JSON", body: `{"query":`, reason: ReasonNoQueryText},
		{name: "too long", body: `{"query":{"match":{"title":"` + strings.Repeat("x", 101) + `"}}}`, from: "query.match.title", reason: ReasonQueryTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params, err := url.ParseQuery(tt.params)
			require.NoError(t, err)
			p, err := planSearch(params, []byte(tt.body), 100, 10)
			if tt.errField != "" {
				var in *InputError
				require.ErrorAs(t, err, &in)
				require.Equal(t, tt.errField, in.Field)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.reason, p.reason)
			require.Equal(t, tt.query, p.query)
			require.Equal(t, tt.from, p.from)
			if p.reason == "" {
				want := cmp.Or(tt.page, [4]int{0, 10, 10, 10})
				require.Equal(t, want, [4]int{p.pageFrom, p.pageSize, p.window, p.fetch}, "page and window")
				require.False(t, p.params.Has("from") || p.params.Has("size"), "the window's from and size are in the body")
				if tt.forwarded == "" {
					var m map[string]any
					require.NoError(t, json.Unmarshal([]byte(tt.body), &m))
					m["from"], m["size"] = 0, p.fetch
					tt.forwarded = string(mustJSON(m))
				}
			}
			if tt.forwarded == "" {
				require.Equal(t, tt.body, string(p.body), "forwarded byte for byte")
			} else {
				require.JSONEq(t, tt.forwarded, string(p.body))
			}
		})
	}
}
