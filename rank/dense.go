package rank

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/icicle-search/sidecar/inference/dense"
)

// Embedder is what DenseReader needs of a dense encoder (*dense.Encoder): a query's vector and passages'
// vectors, unit length, comparable by their dot product.
type Embedder interface {
	Query(ctx context.Context, query string) ([]float32, error)
	Passages(ctx context.Context, texts []string) ([][]float32, error)
}

// DenseReader reads with a dense encoder: each candidate's title and summary is embedded and scored by its
// cosine with the query. It names nothing beyond its candidates. It is the simplest reader: a second encoder
// (or the first stage's own, on the text the first stage did not embed) re-scoring the first stage's top.
type DenseReader struct {
	enc Embedder
	// text is what a candidate is embedded from.
	text func(Candidate) string
}

// NewDenseReader reads with enc; text makes a candidate's passage (nil: its title and summary on two lines).
func NewDenseReader(enc Embedder, text func(Candidate) string) *DenseReader {
	if text == nil {
		text = func(c Candidate) string {
			switch {
			case c.Title == "":
				return c.Summary
			case c.Summary == "":
				return c.Title
			}
			return c.Title + "\n" + c.Summary
		}
	}
	return &DenseReader{enc: enc, text: text}
}

// ConfidenceMargin is DenseReader's confidence: the cosine of its top candidate less its second's.
const ConfidenceMargin = "cosine_margin"

// Read scores every candidate by its cosine with the query, best first (ties by the first stage's order).
func (r *DenseReader) Read(ctx context.Context, q Query) (Reading, error) {
	if len(q.Candidates) == 0 {
		return Reading{}, ErrNothingToRank
	}
	texts := make([]string, len(q.Candidates))
	tokens := 0
	for i, c := range q.Candidates {
		texts[i] = r.text(c)
		tokens += len(texts[i]) / 4 // a rough token count, for the cost model's per-token measure
	}
	if q.Admit != nil {
		if err := q.Admit(max(tokens, 1)); err != nil {
			return Reading{}, err
		}
	}
	qv, err := r.enc.Query(ctx, q.Text)
	if err != nil {
		return Reading{}, fmt.Errorf("dense reader: %w", err)
	}
	pv, err := r.enc.Passages(ctx, texts)
	if err != nil {
		return Reading{}, fmt.Errorf("dense reader: %w", err)
	}
	out := Reading{Scored: make([]Scored, len(q.Candidates)), InContext: len(q.Candidates), PromptTokens: tokens}
	for i, c := range q.Candidates {
		out.Scored[i] = Scored{DocID: c.DocID, Score: dense.Dot(qv, pv[i]), Route: RouteCopy, Candidate: i}
	}
	slices.SortStableFunc(out.Scored, func(a, b Scored) int { return cmp.Compare(b.Score, a.Score) })
	margin := 0.0
	if len(out.Scored) > 1 {
		margin = out.Scored[0].Score - out.Scored[1].Score
	}
	out.Confidence = map[string]float64{ConfidenceMargin: margin}
	return out, nil
}

var _ Reader = (*DenseReader)(nil)
