package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/plugin"
	"github.com/icicle-search/sidecar/rank"
)

// The answers fakeGateSidecar gives.
const (
	fakeGated = "gated" // the gate's report with the model's answer
	fakeFused = "fused" // another policy: no gate section
	fakeIdle  = "idle"  // a gate that never promotes, the model not run
)

// fakeGateSidecar stands in for a sidecar with policy gate: on "good N" queries the model's top is the
// relevant document with strong evidence, on "bad N" queries BM25's top is and the model's evidence is weak.
func fakeGateSidecar(t *testing.T, answer string, asked *sync.Map) *httptest.Server {
	strong := gate.Compute(0.95, []gate.Beam{{DocID: "x", Copy: true, Score: -0.05}, {DocID: "y", Copy: true, Score: -4}}, []string{"b", "c", "x"}, []float64{10, 9.9, 9}, nil)
	weak := gate.Compute(0.4, []gate.Beam{{DocID: "x", Copy: true, Score: -2.5}, {DocID: "y", Copy: true, Score: -2.6}}, []string{"b", "c"}, []float64{10, 3}, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/model" {
			_ = json.NewEncoder(w).Encode(plugin.ModelInfo{Name: "fake-model", Serving: &plugin.Settings{"experimental.scoring": "vocab"}})
			return
		}
		var req plugin.SearchRequest
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &req))
		asked.Store(req.Query, true)
		resp := plugin.Response{Response: rank.Response{Mode: plugin.ModeGated}}
		var n int
		good := strings.HasPrefix(req.Query, "good")
		_, _ = fmt.Sscanf(req.Query[strings.LastIndex(req.Query, " ")+1:], "%d", &n)
		rel := fmt.Sprintf("D%d", n)
		switch answer {
		case fakeGated:
			resp.Gate = &plugin.GateReport{Decision: plugin.GateKeep, ModelTop: "other", FirstStageTop: rel, Features: weak}
			if good {
				resp.Gate.ModelTop, resp.Gate.FirstStageTop, resp.Gate.Features = rel, "other", strong
			}
		case fakeFused:
			resp.Mode = plugin.ModeFused
		case fakeIdle:
			resp.Gate = &plugin.GateReport{Decision: plugin.GateKeep, Reason: plugin.ReasonGateIdle, Never: true, FirstStageTop: rel}
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(hs.Close)
	return hs
}

func TestCalibrate(t *testing.T) {
	dir := t.TempDir()
	var queries, qrels strings.Builder
	qrels.WriteString("qid\tdocid\trelevance\n")
	for i := range 40 {
		kind := map[bool]string{true: "good", false: "bad"}[i%2 == 0]
		fmt.Fprintf(&queries, `{"qid": "t%d", "query": "%s train %d", "split": "train"}`+"\n", i, kind, i)
		fmt.Fprintf(&queries, `{"qid": "d%d", "query": "%s dev %d", "split": "dev"}`+"\n", i, kind, i)
		fmt.Fprintf(&qrels, "t%d\tD%d\t1\nd%d\tD%d\t1\n", i, i, i, i)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	f := calibrateFlags{labelledFlags: labelledFlags{queries: write("queries.jsonl", queries.String()),
		qrels: write("qrels.tsv", qrels.String()), modelDir: dir, split: "train", n: 100},
		subsets: "new,seen", folds: 5, concurrency: 2, timeout: 5e9}
	write("seen_docids.txt", "S1\n")

	t.Run("fits and writes gate.json from the sidecar's gate reports", func(t *testing.T) {
		var asked sync.Map
		f := f
		f.sidecar = fakeGateSidecar(t, fakeGated, &asked).URL
		f.outDir, f.samplesOut = filepath.Join(dir, "out"), filepath.Join(dir, "samples.jsonl")
		var out strings.Builder
		require.NoError(t, runCalibrate(context.Background(), f, &out, io.Discard))
		g, err := gate.Load(f.outDir)
		require.NoError(t, err, out.String())
		require.False(t, g.Never, out.String())
		require.Equal(t, 40, g.Fit.N)
		require.Equal(t, 20, g.Fit.Positives)
		require.Equal(t, "fake-model", g.Fit.Model)
		require.Equal(t, map[string]string{"experimental.scoring": "vocab"}, g.Fit.Serving, "the settings the answers came under")
		require.Contains(t, g.Fit.Data, `split "train"`)
		require.Greater(t, g.Fit.CVGain, 0)
		asked.Range(func(q, _ any) bool {
			require.NotContains(t, q, "dev", "a query of another split was sent")
			return true
		})

		// Refit from the samples, without the sidecar: the same gate.
		f.sidecar, f.samplesIn, f.outDir = "http://127.0.0.1:1", f.samplesOut, filepath.Join(dir, "refit")
		require.NoError(t, runCalibrate(context.Background(), f, io.Discard, io.Discard))
		again, err := gate.Load(f.outDir)
		require.NoError(t, err)
		require.Equal(t, g.Threshold, again.Threshold)
		require.Equal(t, g.Weights, again.Weights)
		require.True(t, strings.HasPrefix(again.Fit.Data, g.Fit.Data+"; refitted from "+filepath.Base(f.samplesOut)+" "), "the refit names the run and the file, not its path: %q", again.Fit.Data)
		require.Equal(t, g.Fit.Serving, again.Fit.Serving)

		// Samples answered under two settings are not fitted together; nothing is written.
		b, err := os.ReadFile(f.samplesOut)
		require.NoError(t, err)
		lines := strings.SplitAfter(strings.TrimSpace(string(b)), "\n")
		lines[3] = strings.Replace(lines[3], `"experimental.scoring":"vocab"`, `"experimental.scoring":"trie"`, 1)
		f.samplesIn, f.outDir = write("mixed.jsonl", strings.Join(lines, "")), filepath.Join(dir, "mixed")
		require.ErrorContains(t, runCalibrate(context.Background(), f, io.Discard, io.Discard), "line 4 was answered under other settings")
		_, statErr := os.Stat(filepath.Join(f.outDir, gate.FileName))
		require.True(t, os.IsNotExist(statErr), "nothing written")
	})
	for _, tt := range []struct{ name, answer, want string }{
		{"a sidecar not in policy gate is an error naming the policy", fakeFused, "policy.mode gate"},
		{"a sidecar that did not run the model (its gate never promotes) is an error naming the setting", fakeIdle, "experimental.run_model_when_gate_never true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked sync.Map
			f := f
			f.sidecar, f.outDir = fakeGateSidecar(t, tt.answer, &asked).URL, filepath.Join(dir, tt.answer)
			err := runCalibrate(context.Background(), f, io.Discard, io.Discard)
			require.ErrorContains(t, err, tt.want)
			_, statErr := os.Stat(filepath.Join(f.outDir, gate.FileName))
			require.True(t, os.IsNotExist(statErr), "nothing written")
		})
	}
	t.Run("too few queries for the folds", func(t *testing.T) {
		f := f
		f.split = "none"
		require.ErrorContains(t, runCalibrate(context.Background(), f, io.Discard, io.Discard), "-folds")
	})
}

func TestCalibrateRejectsANegativeShrink(t *testing.T) {
	err := calibrate(t.Context(), []string{"-first-stage", "x.json", "-shrink", "-1"}, io.Discard)
	require.ErrorContains(t, err, "-shrink -1: want a number of standard errors, 0 or more")
}
