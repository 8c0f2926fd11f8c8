//go:build integration && ort && tokenizers

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/internal/dataset"
)

// TestCalibrateFirstStageRefuses runs `icicle calibrate -first-stage` against the real node with the real encoder:
// 150 nq_qed documents with their stored vectors and the labelled queries whose answer is among them. A forced,
// unshrunk (-shrink 0) fit against BM25's order is written; fitting again against that fit (now the current setting, scored on the queries it was fitted
// on) cannot be better held out, so it is refused: exit status 1, the reason printed, and the file already at the
// output path left as it was.
func TestCalibrateFirstStageRefuses(t *testing.T) {
	bin, esURL, lib := realServeParts(t)
	enc := encoderDir(t)
	dir := t.TempDir()
	corpus, queries, qrels := filepath.Join(dir, "corpus.jsonl"), filepath.Join(dir, "queries.jsonl"), filepath.Join(dir, "qrels.tsv")
	n := writeLabelledSubset(t, 150, corpus, queries, qrels)
	require.GreaterOrEqual(t, n, 20, "labelled queries answered within the subset")

	index := fmt.Sprintf("icicle-calfirst-%d", time.Now().UnixNano())
	t.Cleanup(func() { _, _ = http.DefaultClient.Do(mustReq(t, http.MethodDelete, esURL+"/"+index)) })
	env := append(os.Environ(), "ICICLE_ELASTICSEARCH_ADDRESSES="+esURL, "ICICLE_ELASTICSEARCH_INDEX="+index,
		"ICICLE_ORT_LIB="+lib, "ICICLE_FIRST_STAGE_ENCODER_DIR="+enc)
	run := func(extraEnv []string, args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(env, extraEnv...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(nil, "ingest", "-corpus", corpus, "-vectors", filepath.Join("..", "data", "nq_qed", "vectors.bge-small-en-v1.5-q.gz"))
	require.NoError(t, err, out)
	require.Contains(t, out, "indexed 150")

	fit := filepath.Join(dir, "fit.json")
	calibrate := []string{"calibrate", "-queries", queries, "-qrels", qrels, "-split", "", "-n", "1000"}
	// The current setting of the first fit is BM25's order (linear, w 0), so that the fit's held-out first results
	// differ from the current's on some queries and the gain's interval has a width (against the default, which
	// the grid holds, a fit on these queries can rank every query as the default does: an interval of [0, 0]).
	bm25Order := []string{"ICICLE_FIRST_STAGE_DENSE_WEIGHT=0", "ICICLE_FIRST_STAGE_DENSE_WEIGHT_SPREAD=0"}
	out, err = run(bm25Order, append(calibrate, "-first-stage", fit, "-force", "-shrink", "0")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "current setting (the configuration): method linear, dense_weight 0,")
	require.Contains(t, out, "Hits@1 held out less the current, query by query: ")
	var written struct {
		Method string `json:"method"`
		Fit    struct {
			Queries int `json:"queries"`
			Result  struct {
				Current *struct {
					N int `json:"queries"`
				} `json:"current"`
				Gain *struct{ Low, High float64 } `json:"held_out_gain"`
			} `json:"result"`
		} `json:"fit"`
	}
	b, err := os.ReadFile(fit)
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal(b, &written))
	require.NotEmpty(t, written.Method)
	require.Equal(t, n, written.Fit.Queries)
	require.NotNil(t, written.Fit.Result.Current, "the record keeps the current setting's score")
	require.Equal(t, n, written.Fit.Result.Current.N)
	require.NotNil(t, written.Fit.Result.Gain, "and the held-out gain's interval")
	require.Less(t, written.Fit.Result.Gain.Low, written.Fit.Result.Gain.High)

	// Against the fit itself: its in-sample score is the best of the grid on these queries, which the held-out
	// score does not beat.
	again := filepath.Join(dir, "again.json")
	require.NoError(t, os.WriteFile(again, []byte("kept\n"), 0o644))
	out, err = run([]string{"ICICLE_FIRST_STAGE_PARAMS_FILE=" + fit}, append(calibrate, "-first-stage", again)...)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.Equal(t, 1, exit.ExitCode(), out)
	require.Contains(t, out, "current setting ("+fit+")")
	require.Contains(t, out, again+" not written: the fit is not better held out than the current setting")
	require.Contains(t, out, "-force writes it anyway")
	b, err = os.ReadFile(again)
	require.NoError(t, err)
	require.Equal(t, "kept\n", string(b), "a refused fit leaves the file at its path as it was")

}

// writeLabelledSubset writes the first docs documents of nq_qed to corpus, and the queries whose every relevant
// document is among them to queries and qrels (the formats `icicle calibrate` reads); it returns how many.
func writeLabelledSubset(t *testing.T, docs int, corpus, queries, qrels string) int {
	t.Helper()
	data := filepath.Join("..", "data", "nq_qed")
	type line struct {
		DocID string `json:"docid"`
		QID   string `json:"qid"`
		raw   json.RawMessage
	}
	read := func(path string, n int) []line {
		raws, err := dataset.ReadJSONL[json.RawMessage](path, n)
		require.NoError(t, err)
		out := make([]line, len(raws))
		for i, r := range raws {
			require.NoError(t, json.Unmarshal(r, &out[i]), "%s:%d", path, i+1)
			out[i].raw = r
		}
		return out
	}
	in := map[string]bool{}
	var cw, qw, rw strings.Builder
	for _, d := range read(filepath.Join(data, "corpus.jsonl.gz"), docs) {
		in[d.DocID] = true
		cw.WriteString(string(d.raw) + "\n")
	}
	rel, err := dataset.ReadQrels(filepath.Join(data, "qrels.tsv"))
	require.NoError(t, err)
	rw.WriteString("qid\tdocid\trelevance\n")
	n := 0
	for _, q := range read(filepath.Join(data, "queries.jsonl.gz"), 0) {
		ds := rel[q.QID]
		all := len(ds) > 0
		for d := range ds {
			all = all && in[d]
		}
		if !all {
			continue
		}
		n++
		qw.WriteString(string(q.raw) + "\n")
		for d := range ds {
			rw.WriteString(q.QID + "\t" + d + "\t1\n")
		}
	}
	require.NoError(t, os.WriteFile(corpus, []byte(cw.String()), 0o644))
	require.NoError(t, os.WriteFile(queries, []byte(qw.String()), 0o644))
	require.NoError(t, os.WriteFile(qrels, []byte(rw.String()), 0o644))
	return n
}
