package rank

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// GuardOptions configure a Guard; cmd/icicle fills them from config's concurrency and breaker sections.
type GuardOptions struct {
	// MaxInflight is how many reads run at once (the reader's sessions; default 2), QueueSize how many more
	// may wait for one, first come first served (0: none wait), and QueueTimeout the longest wait (default
	// 500ms).
	MaxInflight, QueueSize int
	QueueTimeout           time.Duration
	// ConsecutiveFailures open the breaker (default 5); OpenTimeout until half-open; HalfOpenMaxRequests
	// trial reads (default 1); Interval clears a closed breaker's counts (0 never).
	ConsecutiveFailures int
	OpenTimeout         time.Duration
	HalfOpenMaxRequests int
	Interval            time.Duration
	// RunBudget is the time a read is promised before the cost model knows what reads take: a read that
	// times out with less than this is load, not the reader's failure.
	RunBudget time.Duration
	Logger    *slog.Logger
}

// Guard runs a reader within a request's deadline and answers, when the reader cannot answer, with the
// typed reason the response states: admission (a bounded first-come-first-served queue for the reader's
// sessions, and a cost model that refuses a run predicted not to end in time), then the circuit breaker
// around the run itself. Load is never counted as failure: only reader errors and timeouts that load does
// not explain open the breaker. Safe for concurrent use.
type Guard struct {
	opts     GuardOptions
	admit    *admission
	breaker  *gobreaker.CircuitBreaker[Reading]
	metrics  *Metrics
	log      *slog.Logger
	inflight atomic.Int64
	costMu   sync.Mutex
	cost     *costModel
	costOf   string
}

// NewGuard builds a guard that reports to m (nil: a private one).
func NewGuard(opts GuardOptions, m *Metrics) *Guard {
	opts.MaxInflight = cmp.Or(opts.MaxInflight, 2)
	opts.QueueTimeout = cmp.Or(opts.QueueTimeout, 500*time.Millisecond)
	opts.ConsecutiveFailures = cmp.Or(opts.ConsecutiveFailures, 5)
	opts.HalfOpenMaxRequests = cmp.Or(opts.HalfOpenMaxRequests, 1)
	if m == nil {
		m = NewMetrics(nil)
	}
	g := &Guard{opts: opts, admit: newAdmission(opts.MaxInflight, max(opts.QueueSize, 0), opts.QueueTimeout),
		metrics: m, log: opts.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.breaker = gobreaker.NewCircuitBreaker[Reading](gobreaker.Settings{
		Name:        "model",
		MaxRequests: uint32(opts.HalfOpenMaxRequests),
		Interval:    opts.Interval,
		Timeout:     opts.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(opts.ConsecutiveFailures) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			g.log.Warn("model breaker state changed", "from", from.String(), "to", to.String())
			m.breakerState.Set(float64(to))
			m.breakerTransitions.WithLabelValues(to.String()).Inc()
		},
		// A client that went away says nothing about the reader's health, nor does a request too large for
		// its context, one with nothing to rank, a run the cost model refused or one that load squeezed.
		IsSuccessful: func(err error) bool {
			var load *loadTimeoutError
			return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrContextFull) ||
				errors.Is(err, ErrNothingToRank) || errors.Is(err, errNoBudget) || errors.As(err, &load)
		},
	})
	return g
}

// BreakerState is the circuit breaker's state: "closed", "half-open" or "open".
func (g *Guard) BreakerState() string { return g.breaker.State().String() }

// Admission describes the guard's admission control for /v1/model.
func (g *Guard) Admission() (maxInflight, queueSize int, queueTimeout time.Duration) {
	return g.opts.MaxInflight, g.opts.QueueSize, g.opts.QueueTimeout
}

// Seed is a reader's warm-up, run alone when it was loaded: the cost model's first estimate of what a run
// of that reader costs, until its own runs replace it.
type Seed struct {
	Tokens int
	Took   time.Duration
}

// Costs returns what a run of the reader named key costs now at each level of concurrency (for /v1/model).
func (g *Guard) Costs(key string, seed Seed) []CostLevel { return g.costs(key, seed).snapshot() }

// costs is the cost model of the reader named key: a new one when another reader serves, whose runs cost
// what they cost, not what the previous reader's did.
func (g *Guard) costs(key string, seed Seed) *costModel {
	g.costMu.Lock()
	defer g.costMu.Unlock()
	if g.cost == nil || g.costOf != key {
		g.cost, g.costOf = newCostModel(), key
		if seed.Tokens > 0 {
			for range minCostSamples {
				g.cost.observe(seed.Tokens, 1, seed.Took, 0)
			}
		}
	}
	return g.cost
}

// Read is one read under the guard: run it with ctx (ending at the deadline) and admit (to call once the read
// knows its cost in tokens; an error from it ends the read).
type Read func(ctx context.Context, admit func(tokens int) error) (Reading, error)

// Run runs read within deadline for the reader named key (its cost model seeded by seed), and returns its
// reading, or the fallback reason ("" when it answered) the response then states. err is only the client's
// cancellation.
//
// Order: an open breaker sheds at once; the read then waits in the bounded FIFO queue for a session, at most
// GuardOptions.QueueTimeout and never so long that a typical run (the cost model's) could not end by the
// deadline; once the read knows its cost, it goes on only if the cost model's prediction at the concurrency
// it will run at fits what is left. Either refusal is ReasonOverloaded, at once, and not reported to the
// breaker. The read itself goes through the breaker and is stopped at the deadline (ctx). The breaker counts
// errors, and timeouts that load does not explain: runs that had at least twice their predicted time
// (RunBudget before the cost model has samples).
func (g *Guard) Run(ctx context.Context, key string, seed Seed, deadline time.Time, read Read) (Reading, string, error) {
	if g.breaker.State() == gobreaker.StateOpen {
		return Reading{}, ReasonBreakerOpen, nil
	}
	cost := g.costs(key, seed)
	// Wait only while a run could still finish: a session given to a run that cannot make its deadline is
	// taken from one that could.
	waitUntil := deadline
	if typ, ok := cost.typical(min(int(g.inflight.Load())+1, g.opts.MaxInflight)); ok {
		waitUntil = deadline.Add(-typ)
	}
	waitStart := time.Now()
	g.metrics.queued.Inc()
	release, ok, err := g.admit.acquire(ctx, waitUntil)
	g.metrics.queued.Dec()
	g.metrics.queueWait.Observe(time.Since(waitStart).Seconds())
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return Reading{}, "", err
	case err != nil || !ok:
		return Reading{}, ReasonOverloaded, nil
	}
	defer release()
	g.metrics.running.Inc()
	defer g.metrics.running.Dec()
	level := int(g.inflight.Add(1))
	defer g.inflight.Add(-1)

	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var (
		tokens    int
		predicted time.Duration
		start     time.Time
	)
	admit := func(n int) error {
		tokens, start = n, time.Now()
		if p, ok := cost.predict(n, level); ok {
			predicted = p
			if time.Until(deadline) < p {
				return errNoBudget
			}
		}
		return nil
	}
	runStart := time.Now()
	res, err := g.breaker.Execute(func() (Reading, error) {
		res, err := read(rctx, admit)
		if start.IsZero() { // the reader did not call admit (a fake, or an error before it)
			start = runStart
		}
		ran := time.Since(start)
		lvl := max(level, int(g.inflight.Load()))
		switch {
		case err == nil && res.Prefill > 0:
			cost.observe(cmp.Or(res.PromptTokens, tokens), lvl, res.Prefill, ran-res.Prefill)
		case err == nil:
			cost.observe(cmp.Or(res.PromptTokens, tokens), lvl, ran, 0)
		case errors.Is(err, context.DeadlineExceeded):
			cost.observe(tokens, lvl, ran, 0) // at least this long
			budget := deadline.Sub(start)
			if predicted > 0 && budget < 2*predicted || predicted == 0 && budget < g.opts.RunBudget {
				// Load explains it: the run had less than twice what runs take at this concurrency.
				err = &loadTimeoutError{budget: budget, predicted: predicted, err: err}
			}
		}
		return res, err
	})
	g.metrics.stage.WithLabelValues("model").Observe(time.Since(runStart).Seconds())
	switch {
	case err == nil:
		g.metrics.stage.WithLabelValues("model_prefill").Observe(res.Prefill.Seconds())
		g.metrics.stage.WithLabelValues("model_decode").Observe(res.Decode.Seconds())
		return res, "", nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return Reading{}, "", err
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return Reading{}, ReasonBreakerOpen, nil
	case errors.Is(err, ErrContextFull):
		return Reading{}, ReasonContextFull, nil
	case errors.Is(err, ErrNothingToRank):
		return Reading{}, ReasonNothingToRank, nil
	case errors.Is(err, errNoBudget):
		g.metrics.admissionRefused.Inc()
		return Reading{}, ReasonOverloaded, nil
	case errors.Is(err, context.DeadlineExceeded):
		g.log.Warn("model timed out", "budget_ms", deadline.Sub(runStart).Milliseconds(), "err", err)
		return Reading{}, ReasonModelTimeout, nil
	default:
		g.log.Error("model failed", "err", err)
		return Reading{}, ReasonModelError, nil
	}
}

// loadTimeoutError is a reader timeout that load explains: the run was not given at least twice what the
// cost model predicted for it at the concurrency it ran at (or, before the cost model knows anything, less
// than RunBudget). It is answered model_timeout and does not count for the breaker.
type loadTimeoutError struct {
	budget, predicted time.Duration
	err               error
}

func (e *loadTimeoutError) Error() string {
	return fmt.Sprintf("model run with %s left (predicted %s): %v", e.budget, e.predicted, e.err)
}

func (e *loadTimeoutError) Unwrap() error { return e.err }

// errNoBudget is a run the cost model refused before it started: what is left of the budget is less than
// the predicted time. Load, not failure: answered overloaded, not counted by the breaker.
var errNoBudget = errors.New("predicted run time exceeds the budget left")

// admission is the bounded FIFO queue in front of the reader's sessions. run holds one token per read
// running (capacity MaxInflight); tickets holds one per read running or waiting (capacity MaxInflight +
// QueueSize), so at most QueueSize wait. Waiters are served in arrival order: Go queues the goroutines
// blocked on a channel send first in, first out.
type admission struct {
	run     chan struct{}
	tickets chan struct{}
	timeout time.Duration
}

func newAdmission(inflight, queue int, timeout time.Duration) *admission {
	return &admission{run: make(chan struct{}, inflight), tickets: make(chan struct{}, inflight+queue), timeout: timeout}
}

// waiting is how many reads wait for a session now.
func (a *admission) waiting() int { return len(a.tickets) - len(a.run) }

// acquire waits for a session until the queue timeout or until deadline, whichever is first. ok is false
// when none came free in time or the queue was full; err is set only when ctx ended first.
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

// costModel predicts what a run costs on this machine, from the reader's own runs, per level of concurrency
// (how many runs shared the cores: the most in flight at the run's start or end), in two parts: the prompt's
// reading, which grows with its tokens (recent prefill time per prompt token), and the rest of the run
// (decoding the answer and scoring it: recent time per run, about the same for every prompt). It predicts
// tokens x the level's 75th percentile of the first plus the level's 75th percentile of the second; a level
// without enough samples borrows the nearest level's, scaled by the ratio of the levels (runs sharing the
// cores slow down in proportion). Time per token alone would let a few runs over tiny prompts (a query without
// hits: little to read, the whole decode to pay) predict a mid-sized prompt several times over, and shed it.
type costModel struct {
	mu     sync.Mutex
	levels map[int]*levelCost
	tokens samples // prompt lengths, for the typical run
}

// levelCost is one concurrency level's recent runs.
type levelCost struct {
	perToken samples // seconds of prefill per prompt token
	fixed    samples // seconds of the rest of the run
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

func newCostModel() *costModel { return &costModel{levels: map[int]*levelCost{}} }

// observe records a run over a prompt of tokens at concurrency level whose prefill took prefill and whose
// rest took rest. A run that does not say how its time divides (a warm-up's total, a run stopped at its
// deadline: the time it had, a lower bound that still moves the estimate up) is recorded as prefill alone.
func (c *costModel) observe(tokens, level int, prefill, rest time.Duration) {
	if tokens <= 0 || level <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.levels[level]
	if !ok {
		l = &levelCost{}
		c.levels[level] = l
	}
	l.perToken.add(prefill.Seconds() / float64(tokens))
	l.fixed.add(max(rest, 0).Seconds())
	c.tokens.add(float64(tokens))
}

// cost is level's 75th percentiles: seconds per prompt token and seconds per run. ok is false before the
// level has enough runs.
func (l *levelCost) cost() (perToken, fixed float64, ok bool) {
	perToken, ok = l.perToken.quantile(0.75)
	if !ok {
		return 0, 0, false
	}
	fixed, _ = l.fixed.quantile(0.75)
	return perToken, fixed, true
}

// at is the predicted seconds per token and per run at level; ok is false before any level has samples.
func (c *costModel) at(level int) (perToken, fixed float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, found := c.levels[level]; found {
		if pt, fx, ok := l.cost(); ok {
			return pt, fx, true
		}
	}
	bestDist := -1
	for l, lc := range c.levels {
		pt, fx, ok := lc.cost()
		if !ok {
			continue
		}
		dist := l - level
		if dist < 0 {
			dist = -dist
		}
		if bestDist < 0 || dist < bestDist {
			scale := float64(level) / float64(l)
			perToken, fixed, bestDist = pt*scale, fx*scale, dist
		}
	}
	return perToken, fixed, bestDist >= 0
}

// predict is the predicted time of a run of tokens at level.
func (c *costModel) predict(tokens, level int) (time.Duration, bool) {
	pt, fx, ok := c.at(level)
	if !ok {
		return 0, false
	}
	return time.Duration((pt*float64(tokens) + fx) * float64(time.Second)), true
}

// typical is the predicted time of a median-length run at level (before the read knows its length).
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
	// MSPerToken is the 75th percentile of the prompt's reading time per token, in milliseconds.
	MSPerToken float64 `json:"ms_per_token"`
	// FixedMS is the 75th percentile of the rest of a run (decoding, scoring), in milliseconds.
	FixedMS float64 `json:"fixed_ms"`
	// TypicalMS is the predicted time of a median-length run.
	TypicalMS float64 `json:"typical_ms"`
}

// snapshot is every level with enough samples, in order.
func (c *costModel) snapshot() []CostLevel {
	c.mu.Lock()
	med, _ := c.tokens.quantile(0.5)
	var out []CostLevel
	for l, lc := range c.levels {
		if pt, fx, ok := lc.cost(); ok {
			out = append(out, CostLevel{Level: l, Runs: lc.perToken.n, MSPerToken: pt * 1000, FixedMS: fx * 1000,
				TypicalMS: (pt*med + fx) * 1000})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b CostLevel) int { return a.Level - b.Level })
	return out
}
