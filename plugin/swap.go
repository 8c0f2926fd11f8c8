package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icicle-search/sidecar/rank"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/internal/gate"
)

// LoadedModel is an open model as a ModelLoader returns it.
type LoadedModel struct {
	// Reader reads with the model (rank.NewICICLE over its engine).
	Reader rank.Reader
	// Info describes it for /v1/model and the responses.
	Info ModelInfo
	// Seen is its seen corpus (seen_docids.txt), compared with the previous model's on a swap.
	Seen []string
	// Close releases it; called once, after its last request. Nil for nothing to release.
	Close func() error
	// Gate is its gate (gate.json beside the manifest): it travels with the model on a swap. Nil is the
	// safe default, which never overrides BM25.
	Gate *gate.Gate
}

// ModelLoader opens a model directory (cmd/icicle: inference/loader.Open). Its error says what is wrong
// with the directory; it is shown to the admin who asked for the swap.
type ModelLoader func(dir string) (LoadedModel, error)

// LoadError is a model directory that failed to load; the model serving before keeps serving.
type LoadError struct {
	Dir string
	Err error
}

func (e *LoadError) Error() string {
	if msg := e.Err.Error(); strings.Contains(msg, e.Dir) { // inference/loader names the directory itself
		return msg
	}
	return fmt.Sprintf("load model %s: %v", e.Dir, e.Err)
}

// Unwrap returns the loader's error.
func (e *LoadError) Unwrap() error { return e.Err }

// ErrModelClosed is the answer of a Swapper after Close.
var ErrModelClosed = errors.New("model closed")

// generation is one loaded model and the references to it: the Swapper's own while it is current, plus
// one per Rank in flight. The reference that brings the count to zero closes the model; from then on the
// count never rises again, so a request either holds a live model or retries on the current one.
type generation struct {
	LoadedModel
	refs   atomic.Int64
	closed chan struct{} // closed once Close has returned
	err    error         // Close's error, readable after closed
}

// Swapper is a Reranker that delegates to the current model and swaps in a new one without downtime:
// requests in flight finish on the model they started with, which is closed only after the last of them
// returns; requests that start after Swap returns use the new model. Safe for concurrent use.
type Swapper struct {
	cur  atomic.Pointer[generation]
	load ModelLoader
	log  *slog.Logger

	mu      sync.Mutex // serialises Swap and Close; loading two models at once would only cost memory
	closing atomic.Bool
	retired []*generation // swapped out, possibly still serving their last requests
}

// NewSwapper serves first, and load opens the directories of later swaps. log may be nil.
func NewSwapper(first LoadedModel, load ModelLoader, log *slog.Logger) *Swapper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Swapper{load: load, log: log}
	s.cur.Store(newGeneration(first))
	return s
}

func newGeneration(m LoadedModel) *generation {
	g := &generation{LoadedModel: m, closed: make(chan struct{})}
	g.refs.Store(1)
	return g
}

// Read reads with the current model, holding it until the reading is in (rank.Reader).
func (s *Swapper) Read(ctx context.Context, q rank.Query) (rank.Reading, error) {
	g, err := s.acquire()
	if err != nil {
		return rank.Reading{}, err
	}
	defer s.release(g)
	return g.Reader.Read(ctx, q)
}

// Name names the current model (rank.Source): the responses' model, and its cost model's key.
func (s *Swapper) Name() string {
	i := s.cur.Load().Info
	return i.Name
}

// Seed is what a run of the current model cost alone when it was loaded (rank.Seeded).
func (s *Swapper) Seed() rank.Seed {
	if r := s.cur.Load().Info.Run; r != nil && r.WarmPromptTokens > 0 {
		return rank.Seed{Tokens: r.WarmPromptTokens, Took: time.Duration(r.WarmRunMS * float64(time.Millisecond))}
	}
	return rank.Seed{}
}

// Info describes the current model.
func (s *Swapper) Info() ModelInfo { return s.cur.Load().Info }

// Gate is the current model's gate (nil: none).
func (s *Swapper) Gate() *gate.Gate { return s.cur.Load().Gate }

// SeenCorpus is the current model's seen corpus (LoadedModel.Seen), for /readyz's seen-corpus diff.
func (s *Swapper) SeenCorpus() []string { return s.cur.Load().Seen }

// current describes the current model and returns its seen corpus, both of the same model.
func (s *Swapper) current() (ModelInfo, []string) {
	g := s.cur.Load()
	return g.Info, g.Seen
}

func (s *Swapper) acquire() (*generation, error) {
	for {
		g := s.cur.Load()
		for n := g.refs.Load(); n > 0; n = g.refs.Load() {
			if g.refs.CompareAndSwap(n, n+1) {
				return g, nil
			}
		}
		// g lost its last reference after the Load: Swap had already stored its successor, or Close ran.
		if s.closing.Load() {
			return nil, ErrModelClosed
		}
	}
}

func (s *Swapper) release(g *generation) {
	if g.refs.Add(-1) != 0 {
		return
	}
	// Off the request's path: closing sessions can take a while.
	go func() {
		defer close(g.closed)
		if g.Close == nil {
			return
		}
		if g.err = g.Close(); g.err != nil {
			s.log.Error("close swapped-out model", "model", g.Info.Name, "dir", g.Info.Dir, "err", g.err)
			return
		}
		s.log.Info("swapped-out model closed", "model", g.Info.Name, "dir", g.Info.Dir)
	}()
}

// SwapReport describes a completed swap; it is the body of a 200 from POST /v1/admin/model.
type SwapReport struct {
	RequestID string `json:"request_id,omitempty"`
	// Previous is the model swapped out: it finishes its requests in flight and is then closed.
	Previous ModelInfo `json:"previous"`
	// Model is the model serving now.
	Model ModelInfo `json:"model"`
	// SeenAdded and SeenRemoved count the docids in the new model's seen corpus and not the previous
	// one's, and the reverse. Documents in Elasticsearch keep their seen marks: re-run icicle ingest with
	// the new model to re-mark them; /readyz reports seen_consistent against the new model.
	SeenAdded   int `json:"seen_added"`
	SeenRemoved int `json:"seen_removed"`
	// LoadMS is how long the new directory took to load, in milliseconds.
	LoadMS float64 `json:"load_ms"`
}

// Swap loads dir and makes it the current model. A directory that fails to load returns a *LoadError
// and changes nothing.
func (s *Swapper) Swap(dir string) (SwapReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return SwapReport{}, ErrModelClosed
	}
	start := time.Now()
	m, err := s.load(dir)
	if err != nil {
		return SwapReport{}, &LoadError{Dir: dir, Err: err}
	}
	g := newGeneration(m)
	old := s.cur.Swap(g)
	s.retired = slices.DeleteFunc(s.retired, isClosed)
	s.retired = append(s.retired, old)
	s.release(old)
	rep := SwapReport{Previous: old.Info, Model: g.Info, LoadMS: ms(time.Since(start))}
	rep.SeenAdded, rep.SeenRemoved = seenDiff(old.Seen, g.Seen)
	return rep, nil
}

// Close stops serving: later Rank calls fail with ErrModelClosed. It waits until every model, the
// current one and those swapped out, has finished its requests and been closed, and returns their close
// errors. Idempotent.
func (s *Swapper) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing.Swap(true) {
		g := s.cur.Load()
		s.retired = append(s.retired, g)
		s.release(g)
	}
	var errs []error
	for _, g := range s.retired {
		<-g.closed
		errs = append(errs, g.err)
	}
	return errors.Join(errs...)
}

func isClosed(g *generation) bool {
	select {
	case <-g.closed:
		return true
	default:
		return false
	}
}

// seenDiff counts the docids only in next, and only in prev.
func seenDiff(prev, next []string) (added, removed int) {
	in := make(map[string]bool, len(prev))
	for _, d := range prev {
		in[d] = true
	}
	for _, d := range next {
		if in[d] {
			delete(in, d)
		} else {
			added++
		}
	}
	return added, len(in)
}

// modelInfo describes the model serving now: the Swapper's current one, else Options.Model.
func (s *Server) modelInfo() ModelInfo {
	if s.models != nil {
		return s.models.Info()
	}
	return s.opts.Model
}

// ErrNotSwappable is the answer of SwapModel for a server whose model is not a *Swapper.
var ErrNotSwappable = errors.New("the model cannot be swapped: the server was not built with a plugin.Swapper")

// SwapModel loads dir and swaps it in (Swapper.Swap), logging and counting the outcome; POST
// /v1/admin/model and SIGHUP (cmd/icicle) both come here. On error the previous model keeps serving.
func (s *Server) SwapModel(dir string) (SwapReport, error) {
	sw := s.models
	if sw == nil {
		return SwapReport{}, ErrNotSwappable
	}
	rep, err := sw.Swap(dir)
	if err != nil {
		s.metrics.swaps.WithLabelValues("failure").Inc()
		s.log.Error("model swap failed; the previous model keeps serving", "dir", dir, "model", sw.Info().Name, "err", err)
		return SwapReport{}, err
	}
	s.metrics.swaps.WithLabelValues("success").Inc()
	s.log.Info("model swapped", "dir", dir, "model", rep.Model.Name, "previous", rep.Previous.Name,
		"seen_docids", rep.Model.SeenDocIDs, "took_ms", rep.LoadMS)
	if rep.SeenAdded > 0 || rep.SeenRemoved > 0 {
		s.log.Warn("the new model's seen corpus differs from the previous one's; documents in Elasticsearch keep their seen marks until re-ingested with the new model",
			"seen_added", rep.SeenAdded, "seen_removed", rep.SeenRemoved)
	}
	return rep, nil
}

// SwapRequest is the body of POST /v1/admin/model.
type SwapRequest struct {
	// Dir is the model directory to load, as a path on the sidecar's host.
	Dir string `json:"dir"`
}

// adminModel serves POST /v1/admin/model: 200 with a SwapReport, or 400 naming "dir" with the loader's
// message when the directory does not load (the previous model keeps serving).
func (s *Server) adminModel(c *gin.Context) (answer, error) {
	var req SwapRequest
	if err := s.decode(c, &req); err != nil {
		return answer{}, err
	}
	if strings.TrimSpace(req.Dir) == "" {
		return answer{}, &InputError{Field: "dir", Problem: "required (a model directory on the sidecar's host)"}
	}
	rep, err := s.SwapModel(req.Dir)
	if le := (*LoadError)(nil); errors.As(err, &le) {
		err = &InputError{Field: "dir", Problem: le.Error()}
	}
	if err != nil {
		return answer{}, err
	}
	rep.RequestID = requestID(c)
	return answer{body: rep, mode: "swapped"}, nil
}
