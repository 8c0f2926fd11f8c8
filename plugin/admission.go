package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sony/gobreaker/v2"

	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/retrieve"
)

// Fallback reasons: the response is answered from BM25 and says why.
const (
	// ReasonOverloaded: no model session came free within concurrency.queue_timeout (or the queue was
	// full). Load, not a model failure: the breaker does not count it.
	ReasonOverloaded = "overloaded"
	// ReasonBreakerOpen: the breaker is open (or half-open with its trial requests taken).
	ReasonBreakerOpen = "breaker_open"
	// ReasonModelTimeout: a run that had started exceeded the model's share of the request budget.
	ReasonModelTimeout = "model_timeout"
	// ReasonModelError: the model returned an error.
	ReasonModelError = "model_error"
	// ReasonContextFull: the prompt does not fit the model's context (the request's size, not a failure).
	ReasonContextFull = "context_full"
	// ReasonLowConfidence: the model answered below experimental.min_copy_prob or experimental.min_top_score (rank).
	ReasonLowConfidence = "low_confidence"
	// ReasonContextUnavailable: the new-document search (the model's context) failed while the baseline
	// answered (searchModel).
	ReasonContextUnavailable = "context_unavailable"
	// ReasonNothingToRank: the model had nothing to answer from: no candidate in its context and nothing it
	// may recall (a copy-only model, or memory_scope first_stage with no seen document listed). The request's,
	// not a failure: the breaker does not count it.
	ReasonNothingToRank = "nothing_to_rank"
)

// fallbackReasons lists every reason a response may fall back to BM25 with, so /metrics shows each
// icicle_fallbacks_total series at zero from the start.
var fallbackReasons = []string{ReasonOverloaded, ReasonBreakerOpen, ReasonModelTimeout, ReasonModelError,
	ReasonContextFull, ReasonLowConfidence, ReasonContextUnavailable, ReasonNothingToRank}

// admission is the bounded FIFO queue in front of the model sessions. run holds one token per request
// running the model (capacity Options.MaxInflight, the engine's session count); tickets holds one per
// request running or waiting (capacity MaxInflight + QueueSize), so at most QueueSize wait. Waiters are
// served in arrival order: Go queues the goroutines blocked on a channel send first in, first out.
type admission struct {
	run     chan struct{}
	tickets chan struct{}
	timeout time.Duration
}

func newAdmission(inflight, queue int, timeout time.Duration) *admission {
	return &admission{run: make(chan struct{}, inflight), tickets: make(chan struct{}, inflight+queue), timeout: timeout}
}

// acquire waits for a model session until the queue timeout or until deadline (the end of the model's
// share of the budget), whichever is first. ok is false when none came free in time or the queue was
// full; err is set only when ctx ended first (the client went away).
func (a *admission) acquire(ctx context.Context, deadline time.Time) (release func(), ok bool, err error) {
	select {
	case a.tickets <- struct{}{}:
	default:
		return nil, false, nil // the queue is full
	}
	release = func() { <-a.run; <-a.tickets }
	select {
	case a.run <- struct{}{}: // a session is free now
		return release, true, nil
	default:
	}
	wait := min(a.timeout, time.Until(deadline))
	if wait <= 0 {
		<-a.tickets
		return nil, false, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case a.run <- struct{}{}:
		return release, true, nil
	case <-t.C:
		<-a.tickets
		return nil, false, nil
	case <-ctx.Done():
		<-a.tickets
		return nil, false, ctx.Err()
	}
}

// costModel predicts what a model run costs on this machine, from the sidecar's own runs: the time per
// prompt token, per level of concurrency (how many runs shared the cores: the most in flight at the run's
// start or end). It predicts tokens x the level's 75th percentile of recent time per token; a level
// without enough samples borrows the nearest level's, scaled by the ratio of the levels (runs sharing the
// cores slow down in proportion: measured 0.37 s alone, 0.83-0.88 s two at a time for reader135 on 2
// cores). A swapped-in model starts a new cost model.
type costModel struct {
	mu     sync.Mutex
	levels map[int]*samples // concurrency level -> seconds per token
	tokens samples          // prompt lengths, for the typical run
}

// samples is a ring of the last len(ring) values.
type samples struct {
	ring [64]float64
	n    int
	next int
}

func (r *samples) add(v float64) {
	r.ring[r.next] = v
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))
}

// quantile returns the q-quantile (nearest rank) of the samples; ok is false with fewer than minCostSamples.
func (r *samples) quantile(q float64) (float64, bool) {
	if r.n < minCostSamples {
		return 0, false
	}
	v := slices.Clone(r.ring[:r.n])
	slices.Sort(v)
	return v[min(len(v)-1, int(q*float64(len(v))))], true
}

// minCostSamples is how many runs a level needs before its own figure is used.
const minCostSamples = 4

func newCostModel() *costModel { return &costModel{levels: map[int]*samples{}} }

// observe records a run of tokens prompt tokens that took d at concurrency level (a run stopped at its
// deadline is recorded with the time it had: a lower bound, which still moves the estimate up).
func (c *costModel) observe(tokens, level int, d time.Duration) {
	if tokens <= 0 || level <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.levels[level]
	if !ok {
		r = &samples{}
		c.levels[level] = r
	}
	r.add(d.Seconds() / float64(tokens))
	c.tokens.add(float64(tokens))
}

// perToken is the predicted seconds per token at level; ok is false before any level has samples.
func (c *costModel) perToken(level int) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.levels[level]; ok {
		if v, ok := r.quantile(0.75); ok {
			return v, true
		}
	}
	best, bestDist := 0.0, -1
	for l, r := range c.levels {
		v, ok := r.quantile(0.75)
		if !ok {
			continue
		}
		dist := l - level
		if dist < 0 {
			dist = -dist
		}
		if bestDist < 0 || dist < bestDist {
			best, bestDist = v*float64(level)/float64(l), dist
		}
	}
	return best, bestDist >= 0
}

// predict is the predicted time of a run of tokens prompt tokens at level.
func (c *costModel) predict(tokens, level int) (time.Duration, bool) {
	v, ok := c.perToken(level)
	if !ok {
		return 0, false
	}
	return time.Duration(v * float64(tokens) * float64(time.Second)), true
}

// typical is the predicted time of a median-length prompt at level (before the prompt is built).
func (c *costModel) typical(level int) (time.Duration, bool) {
	c.mu.Lock()
	med, ok := c.tokens.quantile(0.5)
	c.mu.Unlock()
	if !ok {
		return 0, false
	}
	return c.predict(int(med), level)
}

// CostLevel is one concurrency level's cost as /v1/model shows it.
type CostLevel struct {
	// Level is how many runs shared the machine.
	Level int `json:"level"`
	// Runs is how many recent runs the figures come from (at most 64).
	Runs int `json:"runs"`
	// MSPerToken is the 75th percentile of the time per prompt token, in milliseconds.
	MSPerToken float64 `json:"ms_per_token"`
	// TypicalMS is the predicted time of a median-length prompt.
	TypicalMS float64 `json:"typical_ms"`
}

// snapshot is every level with enough samples, in order.
func (c *costModel) snapshot() []CostLevel {
	c.mu.Lock()
	med, _ := c.tokens.quantile(0.5)
	var out []CostLevel
	for l, r := range c.levels {
		if v, ok := r.quantile(0.75); ok {
			out = append(out, CostLevel{Level: l, Runs: r.n, MSPerToken: v * 1000, TypicalMS: v * med * 1000})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b CostLevel) int { return a.Level - b.Level })
	return out
}

// workDeadline is when the first stage and the model must be done: the request's deadline less the
// reserve held back for the answer (RequestTimeout x ESBudgetFraction: Elasticsearch's lookup of
// parametric answers, and writing the response). The first stage gets all of it when it needs it (a
// saturated machine slows Elasticsearch too: a fixed share of its own turned those requests into 504s),
// and the model starts only when its predicted run fits in what the first stage left.
func (s *Server) workDeadline(ctx context.Context) time.Time {
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(s.opts.RequestTimeout)
	}
	return end.Add(-time.Duration(float64(s.opts.RequestTimeout) * s.opts.ESBudgetFraction))
}

// modelDeadline is when the model must have answered: workDeadline.
func (s *Server) modelDeadline(ctx context.Context) time.Time { return s.workDeadline(ctx) }

// runBudget is the time a run is promised before the cost model knows what runs take: the budget less
// the answer's reserve, a typical first stage (a tenth of the budget) and the longest queue wait.
func (s *Server) runBudget() time.Duration {
	return time.Duration(float64(s.opts.RequestTimeout)*(0.9-s.opts.ESBudgetFraction)) - s.opts.QueueTimeout
}

// loadTimeoutError is a model timeout that load explains: the run was not given at least twice what the
// cost model predicted for it at the concurrency it ran at (or, before the cost model knows anything, less
// than runBudget). It is answered model_timeout and does not count for the breaker.
type loadTimeoutError struct {
	budget, predicted time.Duration
	err               error
}

func (e *loadTimeoutError) Error() string {
	return fmt.Sprintf("model run with %s left (predicted %s): %v", e.budget, e.predicted, e.err)
}

func (e *loadTimeoutError) Unwrap() error { return e.err }

// errNoBudget is a run the cost model refused before it started: what is left of the budget is less
// than the predicted time. Load, not failure: answered overloaded, not counted by the breaker.
var errNoBudget = errors.New("predicted run time exceeds the budget left")

// runModel admits the request to the model and runs it: the single admission point of rank(). It
// returns the model's result, or a fallback reason ("" when the model answered): the caller then
// answers from the baseline with that reason. err is only the client's cancellation (context.Canceled).
//
// Order: an open breaker sheds at once; then the request waits in the bounded FIFO queue for a session
// at most concurrency.queue_timeout and never so long that a typical run (the cost model's) could not
// finish before the model's deadline (modelDeadline); once the prompt is built, the run starts only if
// the cost model's prediction for its length, at the concurrency it will run at, fits what is left.
// Either refusal is "overloaded", answered at once and NOT reported to the breaker: a busy model is not a
// failing one. The run itself goes through the breaker and is stopped at the deadline (ONNX Runtime's run
// termination), so the answer leaves on time. The breaker counts errors, and timeouts that load does not
// explain: runs that had at least twice their predicted time (runBudget before the cost model has
// samples). A cancellation, a prompt too long for the context, an admission refusal, or a timeout of a
// run squeezed by load does not count (Server.New's IsSuccessful).
func (s *Server) runModel(ctx context.Context, query string, in []inference.Candidate, memory []string) (inference.Result, string, error) {
	if s.breaker.State() == gobreaker.StateOpen {
		return inference.Result{}, ReasonBreakerOpen, nil
	}
	deadline := s.modelDeadline(ctx)
	cost := s.costs()
	// Wait only while a run could still finish: a session given to a run that cannot make its deadline
	// is taken from one that could.
	waitUntil := deadline
	if typ, ok := cost.typical(min(int(s.inflight.Load())+1, s.opts.MaxInflight)); ok {
		waitUntil = deadline.Add(-typ)
	}
	waitStart := time.Now()
	s.metrics.queued.Inc()
	release, ok, err := s.admit.acquire(ctx, waitUntil)
	s.metrics.queued.Dec()
	s.metrics.queueWait.Observe(time.Since(waitStart).Seconds())
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return inference.Result{}, "", err
	case err != nil || !ok:
		return inference.Result{}, ReasonOverloaded, nil
	}
	defer release()
	s.metrics.running.Inc()
	defer s.metrics.running.Dec()
	level := int(s.inflight.Add(1))
	defer s.inflight.Add(-1)

	mctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var (
		tokens    int
		predicted time.Duration
		start     time.Time
	)
	opts := s.opts.Decode
	opts.MemoryScope = memory
	// experimental.route_by_first_stage weighs the two routes' best answers: both must be in the answer.
	opts.EachRoute = s.opts.RouteByFirstStage
	opts.Admit = func(n int) error {
		tokens, start = n, time.Now()
		if p, ok := cost.predict(n, level); ok {
			predicted = p
			if time.Until(deadline) < p {
				return errNoBudget
			}
		}
		return nil
	}
	modelStart := time.Now()
	res, err := s.breaker.Execute(func() (inference.Result, error) {
		res, err := s.model.Rank(mctx, query, in, opts)
		if start.IsZero() { // the model did not call Admit (a fake, or an error before it)
			start = modelStart
		}
		ran := time.Since(start)
		lvl := max(level, int(s.inflight.Load()))
		switch {
		case err == nil:
			cost.observe(cmp.Or(res.PromptTokens, tokens), lvl, ran)
		case errors.Is(err, context.DeadlineExceeded):
			cost.observe(tokens, lvl, ran) // at least this long
			budget := deadline.Sub(start)
			if predicted > 0 && budget < 2*predicted || predicted == 0 && budget < s.runBudget() {
				// Load explains it: the run had less than twice what runs take at this concurrency.
				err = &loadTimeoutError{budget: budget, predicted: predicted, err: err}
			}
		}
		return res, err
	})
	s.metrics.stage.WithLabelValues("model").Observe(time.Since(modelStart).Seconds())
	switch {
	case err == nil:
		s.metrics.stage.WithLabelValues("model_prefill").Observe(res.Stats.Prefill.Seconds())
		s.metrics.stage.WithLabelValues("model_decode").Observe(res.Stats.Decode.Seconds())
		return res, "", nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return inference.Result{}, "", err
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return inference.Result{}, ReasonBreakerOpen, nil
	case errors.Is(err, inference.ErrContextFull):
		return inference.Result{}, ReasonContextFull, nil
	case errors.Is(err, inference.ErrEmptyAllowedSet):
		return inference.Result{}, ReasonNothingToRank, nil
	case errors.Is(err, errNoBudget):
		s.metrics.admissionRefused.Inc()
		return inference.Result{}, ReasonOverloaded, nil
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("model timed out", "budget_ms", deadline.Sub(modelStart).Milliseconds(), "err", err)
		return inference.Result{}, ReasonModelTimeout, nil
	default:
		s.log.Error("model failed", "err", err)
		return inference.Result{}, ReasonModelError, nil
	}
}

// costs is the cost model of the model serving now: a new one after a swap, whose runs cost what they
// cost, not what the old model's did.
func (s *Server) costs() *costModel {
	info := s.modelInfo()
	key := info.Dir + "\x00" + info.Name + "\x00" + info.ModelVersion
	s.costMu.Lock()
	defer s.costMu.Unlock()
	if s.cost == nil || s.costOf != key {
		s.cost, s.costOf = newCostModel(), key
		if r := info.Run; r != nil && r.WarmPromptTokens > 0 {
			// The load-time warm-up ran alone: level 1, until the model's own runs replace it.
			for range minCostSamples {
				s.cost.observe(r.WarmPromptTokens, 1, time.Duration(r.WarmRunMS*float64(time.Millisecond)))
			}
		}
	}
	return s.cost
}

// ModelEndpoint is the body of GET /v1/model: the serving model, and how the server runs it.
type ModelEndpoint struct {
	ModelInfo
	// Concurrency is the admission control: sessions (max_inflight), the queue, and what a run costs now
	// at each level of concurrency (from the server's own runs; the warm-up's until they exist).
	Concurrency ConcurrencyInfo `json:"concurrency"`
	// FirstStage is the first stage's encoder and fusion.
	FirstStage FirstStageInfo `json:"first_stage"`
	// Index is the Elasticsearch index the sidecar serves (elasticsearch.index): a client measuring against the
	// same cluster (`icicle eval`'s BM25 arm) checks that it searches the same one.
	Index string `json:"index"`
	// Reader is false when the sidecar serves no model (model.dir empty): every answer is the first stage's.
	Reader bool `json:"reader"`
	// Policy is the configured policy (policy.mode) and whether requests may ask for another.
	Policy PolicyInfo `json:"policy"`
	// Profile names the reader profile loaded (config/profiles); absent for none.
	Profile string `json:"profile,omitempty"`
	// Experimental lists the experimental settings in force (config's experimental section), by key.
	Experimental map[string]string `json:"experimental,omitempty"`
}

// PolicyInfo is the configured policy as /v1/model shows it.
type PolicyInfo struct {
	Mode          string `json:"mode"`
	AllowOverride bool   `json:"allow_override"`
}

// ConcurrencyInfo is the admission control as /v1/model shows it.
type ConcurrencyInfo struct {
	MaxInflight    int         `json:"max_inflight"`
	QueueSize      int         `json:"queue_size"`
	QueueTimeoutMS float64     `json:"queue_timeout_ms"`
	Cost           []CostLevel `json:"cost"`
}

// FirstStageInfo is the first stage as /v1/model shows it.
type FirstStageInfo struct {
	Encoder string          `json:"encoder,omitempty"`
	Params  retrieve.Params `json:"params"`
}

func (s *Server) modelEndpoint(c *gin.Context) {
	c.JSON(http.StatusOK, ModelEndpoint{
		ModelInfo: s.modelInfo().withBlocks(),
		Concurrency: ConcurrencyInfo{MaxInflight: s.opts.MaxInflight, QueueSize: s.opts.QueueSize,
			QueueTimeoutMS: ms(s.opts.QueueTimeout), Cost: s.costs().snapshot()},
		FirstStage: FirstStageInfo{Encoder: s.first.Encoder(), Params: s.first.Params()},
		Index:      s.es.Index(),
		Reader:     s.model != nil,
		Policy:     PolicyInfo{Mode: s.opts.Policy, AllowOverride: s.opts.AllowPolicyOverride},
		Profile:    s.opts.Profile, Experimental: s.opts.Experimental,
	})
}
