package rank

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
)

// newTestGuard is a guard on a private registry.
func newTestGuard(o GuardOptions) (*Guard, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return NewGuard(o, NewMetrics(reg)), reg
}

// fakeRead is a read that asks admission for 100 tokens, then does what run says.
func fakeRead(run func(ctx context.Context) (Reading, error)) Read {
	return func(ctx context.Context, admit func(int) error) (Reading, error) {
		if err := admit(100); err != nil {
			return Reading{}, err
		}
		return run(ctx)
	}
}

func answered(context.Context) (Reading, error) {
	return Reading{Scored: []Scored{{DocID: "Beta", Route: RouteCopy, Score: -0.1, Candidate: 1}}}, nil
}

func stuck(ctx context.Context) (Reading, error) {
	<-ctx.Done()
	return Reading{}, ctx.Err()
}

// seedCosts records n runs of 100 tokens taking d at level into the cost model of the reader named "m".
func seedCosts(g *Guard, n, level int, d time.Duration) {
	for range n {
		g.costs("m", Seed{}).observe(100, level, d, 0)
	}
}

// metric reads one sample's value from reg ("" when absent), by its name and labels as the text format
// prints them.
func metric(t *testing.T, reg *prometheus.Registry, series string) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&b, mf)
		require.NoError(t, err)
	}
	for line := range strings.SplitSeq(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestGuardShortBudgetTimeoutIsNotAFailure: a run that started with less than the promised run budget and
// timed out is answered model_timeout but not counted; one that had its whole budget and overran is counted.
func TestGuardShortBudgetTimeoutIsNotAFailure(t *testing.T) {
	g, _ := newTestGuard(GuardOptions{ConsecutiveFailures: 1, RunBudget: 500 * time.Millisecond})
	for range 3 {
		_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(100*time.Millisecond), fakeRead(stuck))
		require.NoError(t, err)
		require.Equal(t, ReasonModelTimeout, reason)
		require.Equal(t, "closed", g.BreakerState(), "a run short of its budget is not the reader's failure")
	}
	_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(700*time.Millisecond), fakeRead(stuck))
	require.NoError(t, err)
	require.Equal(t, ReasonModelTimeout, reason)
	require.Equal(t, "open", g.BreakerState(), "a run that had its budget and overran is")
}

// TestGuardTimeoutCountsAgainstPredictedCost: a timeout counts for the breaker only when the run had at least
// twice the time the cost model predicted for it; load that makes every run slower does not open it.
func TestGuardTimeoutCountsAgainstPredictedCost(t *testing.T) {
	g, _ := newTestGuard(GuardOptions{ConsecutiveFailures: 1, RunBudget: 500 * time.Millisecond})
	_, ok := g.costs("m", Seed{}).predict(100, 1)
	require.False(t, ok, "no prediction before %d runs", minCostSamples)
	seedCosts(g, minCostSamples, 1, 400*time.Millisecond) // runs at the current load take 400ms
	p, ok := g.costs("m", Seed{}).predict(100, 1)
	require.True(t, ok)
	require.Equal(t, 400*time.Millisecond, p)
	_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(700*time.Millisecond), fakeRead(stuck))
	require.NoError(t, err)
	require.Equal(t, ReasonModelTimeout, reason, "less than twice the prediction")
	require.Equal(t, "closed", g.BreakerState())

	// Another reader starts a cost model of its own: its runs take 100ms.
	for range minCostSamples {
		g.costs("idle", Seed{}).observe(100, 1, 100*time.Millisecond, 0)
	}
	_, reason, err = g.Run(t.Context(), "idle", Seed{}, time.Now().Add(700*time.Millisecond), fakeRead(stuck))
	require.NoError(t, err)
	require.Equal(t, ReasonModelTimeout, reason, "over twice the prediction, and still not done: stuck")
	require.Equal(t, "open", g.BreakerState())
}

// TestCostModelPrefillAndDecode: a run's cost is its prompt's reading (per token) plus the rest (decoding, about
// the same for every prompt): runs over tiny prompts, which spend their time decoding, do not make a larger
// prompt's prediction many times its cost; the split comes from the readings the reader reports.
func TestCostModelPrefillAndDecode(t *testing.T) {
	c := newCostModel()
	for range minCostSamples {
		c.observe(10, 1, 10*time.Millisecond, 500*time.Millisecond) // a query without hits: little to read
	}
	p, ok := c.predict(200, 1)
	require.True(t, ok)
	require.Equal(t, 700*time.Millisecond, p, "200 tokens at 1 ms each, and the decode")
	p, ok = c.predict(200, 2)
	require.True(t, ok)
	require.Equal(t, 1400*time.Millisecond, p, "level 2 borrows level 1's, twice")
	lv := c.snapshot()
	require.Len(t, lv, 1)
	require.InDelta(t, 1.0, lv[0].MSPerToken, 1e-9)
	require.InDelta(t, 500.0, lv[0].FixedMS, 1e-9)
	require.InDelta(t, 510.0, lv[0].TypicalMS, 1e-9)

	g, _ := newTestGuard(GuardOptions{})
	for range minCostSamples {
		_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(time.Minute),
			func(_ context.Context, admit func(int) error) (Reading, error) {
				if err := admit(10); err != nil {
					return Reading{}, err
				}
				time.Sleep(20 * time.Millisecond)
				return Reading{PromptTokens: 10, Prefill: time.Millisecond, Scored: []Scored{{DocID: "a"}}}, nil
			})
		require.NoError(t, err)
		require.Empty(t, reason)
	}
	lv = g.Costs("m", Seed{})
	require.Len(t, lv, 1)
	require.InDelta(t, 0.1, lv[0].MSPerToken, 1e-9, "the reported prefill per token")
	require.GreaterOrEqual(t, lv[0].FixedMS, 19.0, "the rest of the run")
}

// TestGuardSeed: a reader's warm-up seeds its cost model, and a reader of another name starts its own.
func TestGuardSeed(t *testing.T) {
	g, _ := newTestGuard(GuardOptions{})
	p, ok := g.costs("a", Seed{Tokens: 200, Took: 400 * time.Millisecond}).predict(100, 1)
	require.True(t, ok)
	require.Equal(t, 200*time.Millisecond, p)
	require.NotEmpty(t, g.Costs("a", Seed{}))
	require.Empty(t, g.Costs("b", Seed{}), "a new reader has no runs yet")
}

// TestGuardRefusesARunThatCannotFit: once the read knows its cost, a run predicted to take longer than the
// time left is not started: overloaded, the reader untouched, the breaker closed, the refusal counted.
func TestGuardRefusesARunThatCannotFit(t *testing.T) {
	g, reg := newTestGuard(GuardOptions{ConsecutiveFailures: 1})
	seedCosts(g, minCostSamples, 1, 5*time.Second)
	var ran atomic.Int64
	_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(700*time.Millisecond), fakeRead(func(ctx context.Context) (Reading, error) {
		ran.Add(1)
		return answered(ctx)
	}))
	require.NoError(t, err)
	require.Equal(t, ReasonOverloaded, reason)
	require.Zero(t, ran.Load())
	require.Equal(t, "closed", g.BreakerState())
	require.Equal(t, "1", metric(t, reg, "icicle_model_admission_refused_total"))
}

// TestGuardContentionLeavesTheBreakerClosed: reads that slow down with the reads beside them (the cores
// shared), under more concurrent requests than the budget allows: answers are the reader's, overloaded or
// timeouts, and the breaker never opens. A reader that fails does open it, and it heals once it answers again.
func TestGuardContentionLeavesTheBreakerClosed(t *testing.T) {
	var inflight atomic.Int64
	var failing atomic.Bool
	read := fakeRead(func(ctx context.Context) (Reading, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		if failing.Load() {
			return Reading{}, errors.New("injected reader failure")
		}
		select { // 80ms per run in flight
		case <-time.After(time.Duration(n) * 80 * time.Millisecond):
			return answered(ctx)
		case <-ctx.Done():
			return Reading{}, ctx.Err()
		}
	})
	budget := 600 * time.Millisecond
	g, _ := newTestGuard(GuardOptions{MaxInflight: 4, QueueSize: 8, QueueTimeout: 100 * time.Millisecond,
		ConsecutiveFailures: 2, OpenTimeout: 200 * time.Millisecond, RunBudget: time.Duration(float64(budget)*0.8) - 100*time.Millisecond})
	reasons := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for range 8 {
				ctx, cancel := context.WithTimeout(t.Context(), budget)
				dl, _ := ctx.Deadline()
				_, reason, err := g.Run(ctx, "m", Seed{}, dl.Add(-budget/10), read)
				cancel()
				require.NoError(t, err)
				mu.Lock()
				reasons[reason]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, "closed", g.BreakerState(), "load is not failure: %v", reasons)
	require.Positive(t, reasons[""], "the reader answered some: %v", reasons)
	require.Zero(t, reasons[ReasonModelError]+reasons[ReasonBreakerOpen], "%v", reasons)

	failing.Store(true)
	for range 2 {
		_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(budget), read)
		require.NoError(t, err)
		require.Equal(t, ReasonModelError, reason)
	}
	require.Equal(t, "open", g.BreakerState(), "real errors open it")
	failing.Store(false)
	require.Eventually(t, func() bool {
		_, reason, _ := g.Run(t.Context(), "m", Seed{}, time.Now().Add(budget), read)
		return reason == "" && g.BreakerState() == "closed"
	}, 3*time.Second, 50*time.Millisecond, "it heals once the reader answers")
}

// blocking is a read that holds its session until released.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocking) read(ctx context.Context) (Reading, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
		return answered(ctx)
	case <-ctx.Done():
		return Reading{}, ctx.Err()
	}
}

// TestGuardNoWaitForARunThatCannotFinish: with the typical run longer than what is left, a request finding
// the sessions busy is shed at once instead of waiting for a session (here for as long as the queue timeout
// of an hour: a guard that waited would hold the request until the test cancels it).
func TestGuardNoWaitForARunThatCannotFinish(t *testing.T) {
	b := newBlocking()
	g, _ := newTestGuard(GuardOptions{MaxInflight: 1, QueueSize: 2, QueueTimeout: time.Hour})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = g.Run(t.Context(), "m", Seed{}, time.Now().Add(time.Minute), fakeRead(b.read))
	}()
	<-b.started
	seedCosts(g, minCostSamples, 1, 30*time.Second) // runs take longer than what is left below
	ctx, cancel := context.WithCancel(t.Context())
	stop := context.AfterFunc(t.Context(), cancel)
	defer stop()
	timer := time.AfterFunc(30*time.Second, cancel)
	defer timer.Stop()
	_, reason, err := g.Run(ctx, "m", Seed{}, time.Now().Add(16*time.Second), fakeRead(b.read))
	require.NoError(t, err, "shed at once, not cancelled while waiting")
	require.Equal(t, ReasonOverloaded, reason)
	close(b.release)
	<-done
}

// TestGuardQueue: with the one session busy, a read that gets no session within the queue timeout, or finds
// the queue full, is shed as overloaded; however many, the breaker stays closed; a waiter gets a session freed
// in time.
func TestGuardQueue(t *testing.T) {
	b := newBlocking()
	g, reg := newTestGuard(GuardOptions{MaxInflight: 1, QueueSize: 1, QueueTimeout: 50 * time.Millisecond, ConsecutiveFailures: 1})
	held := make(chan string, 1)
	go func() {
		_, reason, _ := g.Run(t.Context(), "m", Seed{}, time.Now().Add(time.Minute), fakeRead(b.read))
		held <- reason
	}()
	<-b.started
	for range 3 {
		_, reason, err := g.Run(t.Context(), "m", Seed{}, time.Now().Add(time.Minute), fakeRead(b.read))
		require.NoError(t, err)
		require.Equal(t, ReasonOverloaded, reason)
		require.Equal(t, "closed", g.BreakerState(), "a wait for a session is not a reader failure")
	}
	require.Equal(t, "0", metric(t, reg, "icicle_model_queued"))
	require.Equal(t, "1", metric(t, reg, "icicle_model_running"))

	// A waiter gets the session when it comes free within the queue timeout.
	g2, _ := newTestGuard(GuardOptions{MaxInflight: 1, QueueSize: 1, QueueTimeout: time.Minute})
	b2 := newBlocking()
	first := make(chan string, 1)
	go func() {
		_, reason, _ := g2.Run(t.Context(), "m", Seed{}, time.Now().Add(2*time.Minute), fakeRead(b2.read))
		first <- reason
	}()
	<-b2.started
	second := make(chan string, 1)
	go func() {
		_, reason, _ := g2.Run(t.Context(), "m", Seed{}, time.Now().Add(2*time.Minute), fakeRead(b2.read))
		second <- reason
	}()
	require.Eventually(t, func() bool { return g2.admit.waiting() == 1 }, 5*time.Second, time.Millisecond)
	close(b2.release)
	require.Empty(t, <-first)
	require.Empty(t, <-second, "the waiter ran once the session came free")

	close(b.release)
	require.Empty(t, <-held)
}

// TestGuardClientCancelIsNotAFailure: a client that goes away while its read runs says nothing about the
// reader: the error is the cancellation, and the breaker stays closed.
func TestGuardClientCancelIsNotAFailure(t *testing.T) {
	b := newBlocking()
	g, _ := newTestGuard(GuardOptions{MaxInflight: 1, ConsecutiveFailures: 1})
	for range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, reason, err := g.Run(ctx, "m", Seed{}, time.Now().Add(time.Minute), fakeRead(b.read))
			require.ErrorIs(t, err, context.Canceled)
			require.Empty(t, reason)
		}()
		<-b.started
		cancel()
		<-done
	}
	require.Equal(t, "closed", g.BreakerState())
}

// TestGuardRequestErrorsAreNotFailures: a query too large for the reader's context, or with nothing to rank,
// is the request's, answered with its reason and not counted.
func TestGuardRequestErrorsAreNotFailures(t *testing.T) {
	g, _ := newTestGuard(GuardOptions{ConsecutiveFailures: 1})
	for err, want := range map[error]string{ErrContextFull: ReasonContextFull, ErrNothingToRank: ReasonNothingToRank} {
		_, reason, runErr := g.Run(t.Context(), "m", Seed{}, time.Now().Add(time.Minute), fakeRead(func(context.Context) (Reading, error) {
			return Reading{}, err
		}))
		require.NoError(t, runErr)
		require.Equal(t, want, reason)
	}
	require.Equal(t, "closed", g.BreakerState())
}
