package plugin

import (
	"context"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
)

// seenDiffTimeout bounds one background seen-corpus diff (a listing of every seen docid).
const seenDiffTimeout = 2 * time.Minute

// seenDiffState is the last seen-corpus diff and whether one is being computed.
type seenDiffState struct {
	mu      sync.Mutex
	diff    *adapter.SeenDiff // the last diff that succeeded; nil until one has
	diffFor ModelInfo         // the model diff compared with
	diffAt  time.Time         // when diff was computed
	model   ModelInfo         // the model the last attempt compared with
	at      time.Time         // when the last attempt ended
	failed  bool              // the last attempt failed
	running bool
}

// servingSeen returns the model serving now and its seen corpus, read together so that a hot swap
// cannot pair one model's name with another's corpus; ok is false when the model does not know its
// seen corpus.
func (s *Server) servingSeen() (model ModelInfo, seen []string, ok bool) {
	if s.models != nil {
		model, seen = s.models.current()
		return model, seen, true
	}
	return ModelInfo{}, nil, false
}

// refreshSeenDiff starts computing the seen-corpus diff in the background unless the model does not
// know its seen corpus, one is running, or the last is fresh (younger than Options.SeenDiffInterval, 30s
// after a failure, and for the model serving now). It never waits: listing 100K docids can take longer
// than a readiness probe may.
func (s *Server) refreshSeenDiff() {
	model, seen, ok := s.servingSeen()
	if !ok {
		return
	}
	st := &s.seen
	st.mu.Lock()
	defer st.mu.Unlock()
	ttl := s.opts.SeenDiffInterval
	if st.failed {
		ttl = min(ttl, 30*time.Second)
	}
	if st.running || (!st.at.IsZero() && time.Since(st.at) < ttl && st.model == model) {
		return
	}
	st.running = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), seenDiffTimeout)
		defer cancel()
		start := time.Now()
		d, err := s.es.SeenDiff(ctx, seen)
		st.mu.Lock()
		defer st.mu.Unlock()
		st.running, st.at, st.failed, st.model = false, time.Now(), err != nil, model
		if err != nil {
			s.log.Warn("seen corpus diff failed", "model", model.Name, "err", err)
			return
		}
		st.diff, st.diffFor, st.diffAt = &d, model, st.at
		log := s.log.Info
		if !d.Consistent() {
			log = s.log.Warn
		}
		log("seen corpus diff", "model", model.Name, "index_seen", d.IndexSeen, "model_seen", d.ModelSeen,
			"missing_in_index", d.MissingInIndexCount, "not_in_model", d.NotInModelCount,
			"took_ms", time.Since(start).Milliseconds())
	}()
}

// seenDiffBody returns the last seen-corpus diff as /readyz shows it, and the diff itself; both are nil
// until one has been computed for model, the one serving now (a diff against a model swapped out since
// says nothing about the new one's corpus). It also starts a refresh when the last one is stale.
func (s *Server) seenDiffBody(model ModelInfo) (gin.H, *adapter.SeenDiff) {
	s.refreshSeenDiff()
	st := &s.seen
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.diff == nil || st.diffFor != model {
		return nil, nil
	}
	d := *st.diff
	return gin.H{
		"index_seen":                d.IndexSeen,
		"model_seen":                d.ModelSeen,
		"missing_in_index":          d.MissingInIndexCount,
		"not_in_model":              d.NotInModelCount,
		"missing_in_index_examples": append([]string{}, d.MissingInIndex...), // [] rather than null
		"not_in_model_examples":     append([]string{}, d.NotInModel...),
		"model":                     st.diffFor.Name,
		"age_s":                     int(time.Since(st.diffAt).Seconds()),
	}, &d
}
