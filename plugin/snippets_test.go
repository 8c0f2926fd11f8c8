package plugin

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
)

// experimental.snippet_chars: the model reads each candidate's query snippet (fakeSearcher.Snippets), the results
// keep the stored summaries, the response counts the snippets; Elasticsearch failing leaves the summaries.
func TestSnippets(t *testing.T) {
	var read []inference.Candidate
	m := &fakeReranker{rank: func(ctx context.Context, q string, cands []inference.Candidate) (inference.Result, error) {
		read = cands
		return copyBeta(ctx, q, cands)
	}}
	chars := 0
	es := &fakeSearcher{searchNew: func(context.Context, string, int) ([]adapter.Hit, error) { return threeHits(), nil }}
	with := func(n int) func(*testOptions) { return func(o *testOptions) { o.SnippetChars = n } }

	t.Run("the model reads snippets, the results keep summaries", func(t *testing.T) {
		es.snippets = func(ctx context.Context, q string, hits []adapter.Hit, n int) error {
			chars = n
			dl, ok := ctx.Deadline() // the working deadline: the 1 s budget less the 0.3 reserve
			require.True(t, ok)
			require.Less(t, time.Until(dl), 750*time.Millisecond)
			for i := range hits {
				if hits[i].DocID != "Gamma" { // Gamma: no body text, its (empty) summary kept
					hits[i].Summary = "snippet of " + hits[i].DocID + " for " + q
				}
			}
			return nil
		}
		s := newTestServer(t, es, m, with(150))
		code, body, _ := do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "tall towers"))
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, 150, chars)
		require.Equal(t, []inference.Candidate{{Title: "Alpha", Summary: "snippet of Alpha for tall towers"},
			{Title: "Beta", Summary: "snippet of Beta for tall towers"}, {Title: "Gamma"}}, read)
		require.EqualValues(t, 2, body["snippets"])
		first := body["results"].([]any)[0].(map[string]any)
		require.Equal(t, "Beta", first["docid"])
		require.Equal(t, "b", first["summary"], "the shown summary is the stored one")
	})
	t.Run("off by default", func(t *testing.T) {
		es.snippets = func(context.Context, string, []adapter.Hit, int) error { panic("Snippets called with snippet_chars 0") }
		s := newTestServer(t, es, m, nil)
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "a", read[0].Summary)
		require.NotContains(t, body, "snippets")
	})
	t.Run("Elasticsearch failing leaves the stored summaries", func(t *testing.T) {
		es.snippets = func(_ context.Context, _ string, hits []adapter.Hit, _ int) error {
			hits[0].Summary = "half written"
			return errors.New("es: 503")
		}
		s := newTestServer(t, es, m, with(150))
		code, body, _ := do(t, s, "POST", "/v1/search", `{"query":"q"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "reranked", body["mode"], "the model still answers")
		require.Equal(t, "a", read[0].Summary)
		require.NotContains(t, body, "snippets")
	})
}
