package rank

import (
	"context"
	"errors"
	"time"

	"github.com/icicle-search/sidecar/internal/gate"
)

// Reader reads a query and the first stage's top candidates and scores them: any model that can rerank (the
// ICICLE reader, the dense encoder, a cross-encoder, a reader from the team's own clicks). A Reader knows
// nothing of HTTP, of policies or of other readers; the pipeline runs it under the guard and the policy
// decides what its reading changes. Implementations must be safe for concurrent use.
type Reader interface {
	// Read scores q's candidates. An error wrapping ErrContextFull or ErrNothingToRank is the request's size or
	// content, not the reader's failure (the breaker does not count it); ctx ending stops the read with its error.
	Read(ctx context.Context, q Query) (Reading, error)
}

// Source is the serving reader with its gate and name: a Reader that may be swapped for another between
// requests (plugin.Swapper), or a fixed one (Fixed).
type Source interface {
	Reader
	// Gate is the serving reader's gate (gate.json beside it); nil never promotes.
	Gate() *gate.Gate
	// Name names the serving reader: the responses' model, and the key of the guard's cost model (a reader of
	// another name starts a new one).
	Name() string
}

// Fixed is a Source that serves one reader with one gate, never swapped.
type Fixed struct {
	Reader
	G *gate.Gate
	N string
}

// Gate returns the fixed gate.
func (f Fixed) Gate() *gate.Gate { return f.G }

// Name returns the fixed name.
func (f Fixed) Name() string { return f.N }

// Query is what a reader reads.
type Query struct {
	// Text is the user's query.
	Text string
	// Candidates are the first stage's top documents the reader may pick from, in its order (for the ICICLE
	// reader: the new documents, its copy context).
	Candidates []Candidate
	// Scope, when not nil, is every document the reader may name beyond its candidates: the first stage's
	// ranking over the whole index, in its order (experimental.memory_scope first_stage). Nil: any it knows.
	Scope []string
	// Admit, if set, is called once the reader knows what its run costs (its prompt's length in tokens) and
	// before the run's heavy part; an error ends the read with that error (the guard's cost model refusing a
	// run that would not end in time).
	Admit func(tokens int) error
}

// Candidate is one document a reader may pick.
type Candidate struct {
	// DocID identifies the document: what the reader names in its answer.
	DocID string
	// Title and Summary are what it reads of the document.
	Title, Summary string
}

// Route names how a reader reached a document.
type Route string

const (
	// RouteCopy is a document picked from the candidates (the ICICLE reader's [COPY] route).
	RouteCopy Route = "copy"
	// RouteParametric is a document named beyond the candidates (the ICICLE reader's memory route).
	RouteParametric Route = "parametric"
)

// Scored is one document of a reading.
type Scored struct {
	DocID string
	// Score is the reader's score (a log-probability for the ICICLE reader, a cosine for the dense one):
	// higher is better, comparable within one reading only.
	Score float64
	Route Route
	// Candidate is the document's index in Query.Candidates, -1 for one named beyond them.
	Candidate int
}

// Reading is a reader's answer: the documents it ranks, best first, and what a gate may weigh.
type Reading struct {
	// Scored is the ranking, best first: candidates, and any documents named beyond them.
	Scored []Scored
	// Confidence holds the reader's own confidences by name (ConfidenceCopy), for the gate and the response.
	Confidence map[string]float64
	// InContext is how many candidates, from the first, the reader read.
	InContext int
	// TitleOnly counts the candidates read by title alone.
	TitleOnly int
	// PromptTokens is the length of what the reader read, in tokens (the cost model's measure); 0 unknown.
	PromptTokens int
	// Prefill and Decode split the reader's time, when it says (0 otherwise).
	Prefill, Decode time.Duration
}

// ConfidenceCopy is the ICICLE reader's router probability p([COPY]) at its first step: how sure it is that
// the answer is among the candidates.
const ConfidenceCopy = "p_copy"

// Errors a Reader returns for a request it cannot read, which are not its failures.
var (
	// ErrContextFull: the query alone does not fit the reader's context.
	ErrContextFull = errors.New("the query does not fit the reader's context")
	// ErrNothingToRank: no candidate and nothing the reader may name.
	ErrNothingToRank = errors.New("nothing to rank")
)
