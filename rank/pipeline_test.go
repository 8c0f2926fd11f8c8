package rank

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/retrieve"
)

// fakeFirstStage ranks every query the same: all over the index (Seen Doc first), new documents apart.
type fakeFirstStage struct {
	all, new []adapter.Hit
	newErr   error
	searched atomic.Int64 // new-document searches asked for (NewK > 0)
}

func (f *fakeFirstStage) Search(_ context.Context, req retrieve.Request) (retrieve.Lists, error) {
	l := retrieve.Lists{All: f.all, Info: retrieve.Info{Baseline: retrieve.BaselineHybrid, Encoder: "fake"}}
	if req.NewK > 0 {
		f.searched.Add(1)
		if f.newErr != nil {
			return l, &retrieve.NewSearchError{Err: f.newErr}
		}
		l.New = f.new[:min(req.NewK, len(f.new))]
	}
	return l, nil
}

func (f *fakeFirstStage) Rescore(_ context.Context, _ string, hits []adapter.Hit) ([]adapter.Hit, retrieve.Info, error) {
	return hits, retrieve.Info{Baseline: retrieve.BaselineHybrid, Encoder: "fake"}, nil
}

func (*fakeFirstStage) Params() retrieve.Params { return retrieve.DefaultParams }
func (*fakeFirstStage) Encoder() string         { return "fake" }

func testFirstStage() *fakeFirstStage {
	return &fakeFirstStage{
		all: []adapter.Hit{{DocID: "Seen Doc", Title: "Seen Doc", Score: 0.9, BM25Rank: 2}, {DocID: "Alpha", Title: "Alpha", Score: 0.8, BM25Rank: 1},
			{DocID: "Beta", Title: "Beta", Score: 0.5}},
		new: []adapter.Hit{{DocID: "Alpha", Title: "Alpha", Summary: "a"}, {DocID: "Beta", Title: "Beta", Summary: "b"}},
	}
}

// fakeReader answers with read (counting its calls); a Source with gate g.
type fakeReader struct {
	read  func(Query) (Reading, error)
	calls atomic.Int64
	g     *gate.Gate
}

func (f *fakeReader) Read(_ context.Context, q Query) (Reading, error) {
	f.calls.Add(1)
	if q.Admit != nil {
		if err := q.Admit(10); err != nil {
			return Reading{}, err
		}
	}
	return f.read(q)
}
func (f *fakeReader) Gate() *gate.Gate { return f.g }
func (*fakeReader) Name() string       { return "fake" }

// pickBeta picks Beta among the candidates, and names Seen Doc beyond them.
func pickBeta(q Query) (Reading, error) {
	return Reading{InContext: len(q.Candidates), Confidence: map[string]float64{ConfidenceCopy: 0.9}, Scored: []Scored{
		{DocID: "Beta", Route: RouteCopy, Score: -0.1, Candidate: 1},
		{DocID: "Seen Doc", Route: RouteParametric, Score: -2.5, Candidate: -1},
	}}, nil
}

// alwaysPromotes is a gate that promotes whatever it reads; neverGate one that never does.
func alwaysPromotes() *gate.Gate {
	n := len(gate.FeatureNames)
	return &gate.Gate{Version: gate.Version, Features: gate.FeatureNames, Mean: make([]float64, n),
		Scale: onesOf(n), Weights: make([]float64, n), Bias: 10, Threshold: 0.5}
}

func onesOf(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func docids(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.DocID
	}
	return out
}

// TestPipelinePolicies: each policy's answer and how it says why, without HTTP.
func TestPipelinePolicies(t *testing.T) {
	never := gate.Default()
	tests := []struct {
		name      string
		noReader  bool
		policy    string
		gate      *gate.Gate
		mode      Mode
		skipped   string
		order     []string
		reads     bool
		gateKeeps bool
	}{
		{name: "no reader: the first stage, saying none is configured", noReader: true, policy: PolicyModel,
			mode: ModeFirstStage, skipped: SkipNoModel, order: []string{"Seen Doc", "Alpha", "Beta"}},
		{name: "first_stage never reads", policy: PolicyFirstStage, gate: alwaysPromotes(),
			mode: ModeFirstStage, skipped: SkipPolicy, order: []string{"Seen Doc", "Alpha", "Beta"}},
		{name: "bm25 is first_stage's former name", policy: "bm25",
			mode: ModeFirstStage, skipped: SkipPolicy, order: []string{"Seen Doc", "Alpha", "Beta"}},
		{name: "a gate that never promotes does not read", policy: PolicyGate, gate: never,
			mode: ModeGated, skipped: SkipGateNever, order: []string{"Seen Doc", "Alpha", "Beta"}, gateKeeps: true},
		{name: "a reader without a gate is a gate that never promotes", policy: PolicyGate,
			mode: ModeGated, skipped: SkipGateNever, order: []string{"Seen Doc", "Alpha", "Beta"}, gateKeeps: true},
		{name: "a gate that promotes moves the reader's top first", policy: PolicyGate, gate: alwaysPromotes(),
			mode: ModeGated, order: []string{"Beta", "Seen Doc", "Alpha"}, reads: true},
		{name: "model: the reader's ranking", policy: PolicyModel,
			mode: ModeReranked, order: []string{"Beta", "Seen Doc"}, reads: true},
		{name: "fusion: reciprocal rank fusion with the first stage", policy: PolicyFusion,
			mode: ModeFused, order: []string{"Seen Doc", "Beta", "Alpha"}, reads: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := testFirstStage()
			r := &fakeReader{read: pickBeta, g: tt.gate}
			var src Source = r
			if tt.noReader {
				src = nil
			}
			p, err := New(first, nil, src, nil, nil, Options{Policy: PolicyGate, MinTopScore: -1e9})
			require.NoError(t, err)
			resp, err := p.Run(t.Context(), Request{Query: "q", Size: 3, Policy: tt.policy})
			require.NoError(t, err)
			require.Equal(t, tt.mode, resp.Mode)
			require.Equal(t, tt.skipped, resp.ModelSkipped)
			require.Empty(t, resp.FallbackReason)
			require.Equal(t, tt.order, docids(resp.Results))
			require.Equal(t, tt.reads, r.calls.Load() == 1, "the reader ran")
			require.Equal(t, tt.reads, first.searched.Load() == 1, "new documents are searched only for a reader")
			if tt.gateKeeps {
				require.Equal(t, GateKeep, resp.Gate.Decision)
				require.Equal(t, ReasonGateIdle, resp.Gate.Reason)
				require.Equal(t, "Seen Doc", resp.Gate.FirstStageTop)
			}
			if tt.reads {
				require.Equal(t, []string{"Alpha", "Beta"}, resp.Context)
				require.NotNil(t, resp.RouterProb)
			}
		})
	}
}

// TestPipelineFallbacks: a reader that cannot answer leaves the first stage's order, with the reason.
func TestPipelineFallbacks(t *testing.T) {
	tests := []struct {
		name   string
		read   func(Query) (Reading, error)
		opts   Options
		newErr error
		reason string
	}{
		{name: "the reader fails", read: func(Query) (Reading, error) { return Reading{}, errors.New("onnx") }, reason: ReasonModelError},
		{name: "the query does not fit", read: func(Query) (Reading, error) { return Reading{}, ErrContextFull }, reason: ReasonContextFull},
		{name: "doubted", read: pickBeta, opts: Options{MinCopyProb: 0.95}, reason: ReasonLowConfidence},
		{name: "the candidates' search fails", read: pickBeta, newErr: errors.New("shard down"), reason: ReasonContextUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := testFirstStage()
			first.newErr = tt.newErr
			tt.opts.Policy, tt.opts.MinTopScore = PolicyModel, -1e9
			p, err := New(first, nil, &fakeReader{read: tt.read}, nil, nil, tt.opts)
			require.NoError(t, err)
			resp, err := p.Run(t.Context(), Request{Query: "q", Size: 3})
			require.NoError(t, err)
			require.Equal(t, ModeFirstStageFallback, resp.Mode)
			require.Equal(t, tt.reason, resp.FallbackReason)
			require.Equal(t, []string{"Seen Doc", "Alpha", "Beta"}, docids(resp.Results))
		})
	}
}

// TestPipelineRanksARepeatedDocidOnce: a caller's hits may name a docid twice; every answer that is the first
// stage's order (no reader, a fallback, the first_stage policy) ranks it once, at its first occurrence, and
// states its position among the hits.
func TestPipelineRanksARepeatedDocidOnce(t *testing.T) {
	hits := []adapter.Hit{{DocID: "A", Title: "A"}, {DocID: "B", Title: "B"}, {DocID: "A", Title: "A"},
		{DocID: "C", Title: "C"}, {DocID: "B", Title: "B"}}
	failing := &fakeReader{read: func(Query) (Reading, error) { return Reading{}, errors.New("onnx") }}
	for _, tt := range []struct {
		name   string
		source Source
		policy string
		mode   Mode
	}{
		{"no reader", nil, PolicyModel, ModeFirstStage},
		{"the reader fails", failing, PolicyModel, ModeFirstStageFallback},
		{"first_stage policy", failing, PolicyFirstStage, ModeFirstStage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(testFirstStage(), nil, tt.source, nil, nil, Options{Policy: tt.policy, MinTopScore: -1e9})
			require.NoError(t, err)
			resp, err := p.Run(t.Context(), Request{Query: "q", Hits: hits, Size: 10})
			require.NoError(t, err)
			require.Equal(t, tt.mode, resp.Mode)
			require.Equal(t, 5, resp.HitsReceived)
			require.Equal(t, []string{"A", "B", "C"}, docids(resp.Results))
			for i, r := range resp.Results {
				require.Equal(t, i+1, r.Rank)
				require.Equal(t, []int{1, 2, 4}[i], *r.FirstStageRank, "%s is at its first occurrence", r.DocID)
			}
			resp, err = p.Run(t.Context(), Request{Query: "q", Hits: hits, Size: 2})
			require.NoError(t, err)
			require.Equal(t, []string{"A", "B"}, docids(resp.Results), "size counts distinct documents")
		})
	}
}

// TestPipelineReadsWhatTheFirstStageFound: the reader reads the first stage's top new documents in its
// order, at most MaxCandidates, and with MemoryFromFirstStage may name only what the first stage listed; the
// caller's hits are re-scored and read the same way.
func TestPipelineReadsWhatTheFirstStageFound(t *testing.T) {
	var got Query
	r := &fakeReader{read: func(q Query) (Reading, error) { got = q; return pickBeta(q) }}
	p, err := New(testFirstStage(), nil, r, nil, nil, Options{Policy: PolicyModel, MaxCandidates: 1, MemoryFromFirstStage: true,
		MinTopScore: -1e9})
	require.NoError(t, err)
	_, err = p.Run(t.Context(), Request{Query: "q"})
	require.NoError(t, err)
	require.Equal(t, []Candidate{{DocID: "Alpha", Title: "Alpha", Summary: "a"}}, got.Candidates)
	require.Equal(t, []string{"Seen Doc", "Alpha", "Beta"}, got.Scope)

	hits := []adapter.Hit{{DocID: "X", Title: "X", Summary: "x"}, {DocID: "Y", Title: "Y"}}
	resp, err := p.Run(t.Context(), Request{Query: "q", Hits: hits})
	require.NoError(t, err)
	require.True(t, resp.CandidatesTruncated, "the caller's hits beyond max_candidates were not read")
	require.Equal(t, []Candidate{{DocID: "X", Title: "X", Summary: "x"}}, got.Candidates)
	require.Equal(t, []string{"X", "Y"}, got.Scope)
}

// TestPipelineRoutesByFirstStage: with RouteByFirstStage the reading's other route's best answer leads when
// the first stage ranks it higher, and the response says so.
func TestPipelineRoutesByFirstStage(t *testing.T) {
	for _, on := range []bool{false, true} {
		p, err := New(testFirstStage(), nil, &fakeReader{read: pickBeta}, nil, nil,
			Options{Policy: PolicyModel, RouteByFirstStage: on, MinTopScore: -1e9})
		require.NoError(t, err)
		resp, err := p.Run(t.Context(), Request{Query: "q", Size: 2})
		require.NoError(t, err)
		require.Equal(t, on, resp.Rerouted)
		if on {
			require.Equal(t, []string{"Seen Doc", "Beta"}, docids(resp.Results))
		} else {
			require.Equal(t, []string{"Beta", "Seen Doc"}, docids(resp.Results))
		}
	}
}

// TestPipelineUnknownPolicy: a policy name the pipeline does not know is refused, at New and per request.
func TestPipelineUnknownPolicy(t *testing.T) {
	_, err := New(testFirstStage(), nil, nil, nil, nil, Options{Policy: "neural"})
	require.ErrorContains(t, err, `policy "neural"`)
	p, err := New(testFirstStage(), nil, nil, nil, nil, Options{})
	require.NoError(t, err)
	_, err = p.Run(t.Context(), Request{Query: "q", Policy: "neural"})
	require.ErrorContains(t, err, `policy "neural"`)
}
