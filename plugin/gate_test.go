package plugin

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/gate"
)

// fixedGate is a crafted gate whose probability is sigmoid(bias) whatever the features.
func fixedGate(bias, threshold float64) *gate.Gate {
	n := len(gate.FeatureNames)
	ones := make([]float64, n)
	for i := range ones {
		ones[i] = 1
	}
	return &gate.Gate{Version: gate.Version, Features: gate.FeatureNames, Mean: make([]float64, n), Scale: ones,
		Weights: make([]float64, n), Bias: bias, Threshold: threshold, Source: "crafted"}
}

func docids(body map[string]any) []string {
	var out []string
	for _, r := range results(body) {
		out = append(out, r["docid"].(string))
	}
	return out
}

func TestGatePolicy(t *testing.T) {
	// BM25 over all documents (the baseline): Seen Doc, Alpha, Old One, Old Two. The model (copyBeta)
	// answers Beta by the copy route, which BM25 over all documents does not hold.
	tests := []struct {
		name     string
		gate     *gate.Gate
		decision string
		want     []string
		top      string // provenance of the first result
	}{
		{"no gate: BM25 over all documents kept", nil, GateKeep, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, "bm25"},
		{"weak evidence: BM25 kept", fixedGate(-3, 0.5), GateKeep, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, "bm25"},
		{"strong evidence: the model's top promoted, the rest in BM25 order", fixedGate(3, 0.5), GatePromote, []string{"Beta", "Seen Doc", "Alpha", "Old One"}, "copy"},
		{"a never gate keeps BM25 even when p is high", func() *gate.Gate { g := fixedGate(3, 0.5); g.Never = true; return g }(), GateKeep,
			[]string{"Seen Doc", "Alpha", "Old One", "Old Two"}, "bm25"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var newCalls, allCalls atomic.Int64
			s := newTestServer(t, abSearcher(&newCalls, &allCalls), &fakeReranker{rank: copyBeta}, func(o *testOptions) {
				o.Policy, o.Gate, o.RunModelWhenGateNever = "gate", tt.gate, true // never gates too: TestGateIdle
			})
			code, body := search(t, s, "", "", `{"query":"q","size":4}`)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, "gated", body["mode"])
			require.Equal(t, tt.want, docids(body))
			require.Equal(t, tt.top, results(body)[0]["provenance"])
			g := body["gate"].(map[string]any)
			require.Equal(t, tt.decision, g["decision"])
			require.Equal(t, "Beta", g["model_top"])
			require.Equal(t, "Seen Doc", g["first_stage_top"])
			require.NotEmpty(t, g["reason"])
			require.Contains(t, g["features"], "p_copy")
			require.EqualValues(t, 1, newCalls.Load(), "the copy context is BM25 over new documents")
			require.EqualValues(t, 1, allCalls.Load(), "the baseline is BM25 over all documents")
			if tt.decision == GatePromote {
				require.NotContains(t, results(body)[0], "bm25_rank", "Beta is not in BM25 over all documents")
				require.EqualValues(t, 1, results(body)[1]["bm25_rank"])
			}
			metrics := scrape(t, s)
			require.Contains(t, metrics, `icicle_gate_decisions_total{decision="`+tt.decision+`"} 1`)
			other := map[string]string{GateKeep: GatePromote, GatePromote: GateKeep}[tt.decision]
			require.Contains(t, metrics, `icicle_gate_decisions_total{decision="`+other+`"} 0`)
		})
	}
}

func TestBaselineIsBM25OverAllDocuments(t *testing.T) {
	failing := &fakeReranker{rank: func(context.Context, string, []inference.Candidate) (inference.Result, error) {
		return inference.Result{}, errors.New("model broke")
	}}
	tests := []struct {
		name     string
		policy   string
		model    *fakeReranker
		mode     string
		newCalls int64
	}{
		{"policy first_stage (bm25, its former name) never searches new documents", "bm25", &fakeReranker{rank: copyBeta}, "first_stage", 0},
		{"a fallback answers BM25 over all documents (gate)", "gate", failing, "first_stage_fallback", 1},
		{"a fallback answers BM25 over all documents (model)", "model", failing, "first_stage_fallback", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var newCalls, allCalls atomic.Int64
			s := newTestServer(t, abSearcher(&newCalls, &allCalls), tt.model, func(o *testOptions) { o.Policy, o.Gate = tt.policy, fixedGate(-3, 0.5) })
			code, body := search(t, s, "", "", `{"query":"q","size":4}`)
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, tt.mode, body["mode"])
			require.Equal(t, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, docids(body))
			require.Equal(t, tt.newCalls, newCalls.Load())
			require.EqualValues(t, 1, allCalls.Load())
		})
	}
	t.Run("the context search failing falls back to the baseline", func(t *testing.T) {
		var allCalls atomic.Int64
		es := abSearcher(new(atomic.Int64), &allCalls)
		es.searchNew = func(context.Context, string, int) ([]adapter.Hit, error) { return nil, errors.New("shard down") }
		s := newTestServer(t, es, &fakeReranker{rank: copyBeta}, func(o *testOptions) { o.Policy, o.Gate = "gate", fixedGate(-3, 0.5) })
		code, body := search(t, s, "", "", `{"query":"q","size":4}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "first_stage_fallback", body["mode"])
		require.Equal(t, "context_unavailable", body["fallback_reason"])
		require.Equal(t, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, docids(body))
	})
}

// TestGateTravelsWithTheModel: a swap brings the new model's gate; a model without one keeps BM25.
func TestGateTravelsWithTheModel(t *testing.T) {
	sw := NewSwapper(LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: ModelInfo{Name: "first"}, Gate: fixedGate(3, 0.5)},
		func(dir string) (LoadedModel, error) {
			return LoadedModel{Reader: icicle(&fakeReranker{rank: copyBeta}), Info: ModelInfo{Name: "second", Dir: dir}}, nil
		}, nil)
	t.Cleanup(func() { _ = sw.Close() })
	var newCalls, allCalls atomic.Int64
	s := newServer(abSearcher(&newCalls, &allCalls), sw, testOptions{Options: Options{MaxBodyBytes: 1 << 20, RequestTimeout: 1e9, MaxQueryChars: 100, MaxHits: 100},
		ESBudgetFraction: 0.3, MinTopScore: -1e9, Policy: "gate", Gate: fixedGate(-3, 0.5)})
	_, body := search(t, s, "", "", `{"query":"q"}`)
	require.Equal(t, GatePromote, body["gate"].(map[string]any)["decision"], "the Swapper's gate, not Options.Gate")
	_, err := s.SwapModel("/models/second")
	require.NoError(t, err)
	_, body = search(t, s, "", "", `{"query":"q"}`)
	require.Equal(t, GateKeep, body["gate"].(map[string]any)["decision"])
	require.Equal(t, true, body["gate"].(map[string]any)["never"])
}

// TestGateIdle: under policy gate with a gate that never promotes (none, or gate.json's never), the model
// is not run and the new documents are not searched: the request costs what policy bm25 costs, and says
// why. Policy model per request, and experimental.run_model_when_gate_never, still run it.
func TestGateIdle(t *testing.T) {
	never := fixedGate(3, 0.5)
	never.Never = true
	for _, g := range []*gate.Gate{nil, never} {
		var newCalls, allCalls, ranks atomic.Int64
		model := &fakeReranker{rank: func(ctx context.Context, q string, c []inference.Candidate) (inference.Result, error) {
			ranks.Add(1)
			return copyBeta(ctx, q, c)
		}}
		s := newTestServer(t, abSearcher(&newCalls, &allCalls), model, func(o *testOptions) { o.Policy, o.Gate = "gate", g })
		code, body := search(t, s, "", "", `{"query":"q","size":4}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "gated", body["mode"])
		require.Equal(t, []string{"Seen Doc", "Alpha", "Old One", "Old Two"}, docids(body))
		rep := body["gate"].(map[string]any)
		require.Equal(t, GateKeep, rep["decision"])
		require.Equal(t, ReasonGateIdle, rep["reason"])
		require.Equal(t, true, rep["never"])
		require.Equal(t, "Seen Doc", rep["first_stage_top"])
		require.NotContains(t, rep, "model_top", "the model was not run")
		require.NotContains(t, rep, "features")
		require.NotContains(t, body, "router_prob")
		require.EqualValues(t, 0, ranks.Load(), "the model is not run")
		require.EqualValues(t, 0, newCalls.Load(), "no context is searched for a model that is not run")
		require.Contains(t, scrape(t, s), `icicle_gate_decisions_total{decision="`+GateKeep+`"} 1`)

		code, body, _ = do(t, s, "POST", "/v1/rerank", rerankBody(threeHits(), "q"))
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "gated", body["mode"], "/v1/rerank too")
		require.Equal(t, ReasonGateIdle, body["gate"].(map[string]any)["reason"])
		require.Equal(t, []string{"Alpha", "Beta", "Gamma"}, docids(body))
		require.EqualValues(t, 0, ranks.Load())

		_, body = search(t, s, "", "", `{"query":"q","size":4,"policy":"model"}`)
		require.Equal(t, "reranked", body["mode"])
		require.EqualValues(t, 1, ranks.Load(), "policy model runs it")

		s = newTestServer(t, abSearcher(&newCalls, &allCalls), model, func(o *testOptions) {
			o.Policy, o.Gate, o.RunModelWhenGateNever = "gate", g, true
		})
		_, body = search(t, s, "", "", `{"query":"q","size":4}`)
		require.Equal(t, "gated", body["mode"])
		require.Equal(t, "Beta", body["gate"].(map[string]any)["model_top"])
		require.Contains(t, body["gate"].(map[string]any), "features")
		require.EqualValues(t, 2, ranks.Load(), "run_model_when_gate_never runs it")
	}
}
