package plugin

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// Arm is the side of the A/B experiment that answered a /v1/search request.
type Arm string

const (
	// ArmA is Elasticsearch BM25 over all documents: the baseline.
	ArmA Arm = "A"
	// ArmB is the sidecar's answer: /v1/search under policy.mode (default gate: the first stage's order,
	// the model's top promoted where its gate says so).
	ArmB Arm = "B"
	// ArmInterleaved is a team-draft interleaving of A and B, each result saying its team.
	ArmInterleaved Arm = "interleaved"
)

// Values of ABOptions.Mode.
const (
	// ABSplit gives each key one arm, B with probability SplitB.
	ABSplit = "split"
	// ABInterleave answers every request with a team-draft interleaving of both arms.
	ABInterleave = "interleave"
)

// Where an assignment key came from, as the response and the impression log say.
const (
	keyFromHeader    = "header"
	keyFromRequestID = "request_id"
)

// ABOptions configure the A/B experiment on /v1/search (docs/ab.md). The zero value is off.
type ABOptions struct {
	// Enabled turns the experiment on; off, /v1/search is arm B without an "ab" section.
	Enabled bool
	// Mode is ABSplit (default) or ABInterleave.
	Mode string
	// SplitB is the share of keys sent to arm B in split mode, 0..1.
	SplitB float64
	// KeyHeader is the request header holding the assignment key (default "X-ICICLE-AB-Key"). A request
	// without it is assigned by its request id: randomised per request rather than per user.
	KeyHeader string
	// Experiment salts the key hash (default "icicle"): a new value re-draws every key's arm.
	Experiment string
}

func (o ABOptions) withDefaults() ABOptions {
	o.Mode = cmp.Or(o.Mode, ABSplit)
	o.KeyHeader = cmp.Or(o.KeyHeader, "X-ICICLE-AB-Key")
	o.Experiment = cmp.Or(o.Experiment, "icicle")
	return o
}

// assignment is one request's place in the experiment.
type assignment struct {
	on     bool      // the experiment was on for this request
	arm    Arm       // A, B or interleaved
	source string    // keyFromHeader or keyFromRequestID
	key    [32]byte  // SHA-256(experiment, 0, key): picks the arm; its first 16 bytes are the log's pseudonym
	seed   [2]uint64 // the interleaving's coin, from SHA-256(experiment, 0, key, 0, request id)
}

// digest hashes parts separated by zero bytes, so ("ab", "c") and ("a", "bc") differ.
func digest(parts ...string) [32]byte {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// armFor maps a key digest to an arm: its first 53 bits read as a uniform number in [0, 1), arm B below
// splitB. The same key always gets the same arm; a change of splitB moves only the keys between the old
// and the new threshold.
func armFor(key [32]byte, splitB float64) Arm {
	u := float64(binary.BigEndian.Uint64(key[:8])>>11) / (1 << 53)
	if u < splitB {
		return ArmB
	}
	return ArmA
}

// assign reads the request's key and places it in the experiment.
func (s *Server) assign(c *gin.Context) assignment {
	o, rid := s.opts.AB, requestID(c)
	key, source := c.GetHeader(o.KeyHeader), keyFromHeader
	if key == "" {
		key, source = rid, keyFromRequestID
	}
	a := assignment{source: source, key: digest(o.Experiment, key), on: true}
	if o.Mode == ABInterleave {
		seed := digest(o.Experiment, key, rid)
		a.arm, a.seed = ArmInterleaved, [2]uint64{binary.BigEndian.Uint64(seed[:8]), binary.BigEndian.Uint64(seed[8:16])}
	} else {
		a.arm = armFor(a.key, o.SplitB)
	}
	return a
}

// searchAB answers /v1/search from the request's arm and logs the impression: arm A is BM25 over all
// documents, arm B the ICICLE answer (searchModel), interleaved both. With the experiment off it is arm B
// without an "ab" section.
func (s *Server) searchAB(ctx context.Context, c *gin.Context, req SearchRequest) (Response, error) {
	var a assignment
	var resp Response
	var err error
	if s.opts.AB.Enabled {
		a = s.assign(c)
	}
	switch a.arm {
	case ArmA:
		resp, err = s.searchAll(ctx, req.Query, req.Size)
	case ArmInterleaved:
		resp, err = s.searchInterleaved(ctx, req.Query, req.Size, a.seed)
	default:
		resp, err = s.searchModel(ctx, req.Query, req.Size, req.Policy)
	}
	if err != nil {
		return Response{}, err
	}
	resp.RequestID = requestID(c)
	if a.on {
		s.metrics.abArms.WithLabelValues(string(a.arm)).Inc()
		resp.AB = &ABInfo{Arm: a.arm, Experiment: s.opts.AB.Experiment, KeySource: a.source}
	}
	if s.opts.Impressions != nil {
		// Its own id, never the request id: a client that reuses X-Request-ID must not merge two
		// impressions (and their clicks) into one.
		resp.ImpressionID = newImpressionID()
		c.Header(impressionIDHeader, resp.ImpressionID)
		s.opts.Impressions.Log(newImpression(time.Now(), resp, a))
	}
	return resp, nil
}

// impressionIDHeader carries the impression id of a /v1/search answer, as its body's impression_id does.
const impressionIDHeader = "X-ICICLE-Impression-ID"

// newImpressionID returns 128 random bits in 32 lowercase hex digits: unique without coordination
// between replicas.
func newImpressionID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails on the platforms Go supports
	return hex.EncodeToString(b[:])
}

// searchAll is arm A: the BM25 top size over all documents, as Elasticsearch ranks them.
func (s *Server) searchAll(ctx context.Context, query string, size int) (Response, error) {
	size = s.resultSize(size)
	hits, esDur, err := s.bm25All(ctx, query, size)
	if err != nil {
		return Response{}, err
	}
	return Response{Response: rank.Response{Mode: ModeBM25, HitsReceived: len(hits), Results: rank.BaselineResults(hits, size, retrieve.BaselineBM25),
		Timings: Timings{ES: ms(esDur)}}}, nil
}

// bm25All asks Elasticsearch for the BM25 top k over all documents within its share of the budget.
func (s *Server) bm25All(ctx context.Context, query string, k int) ([]adapter.Hit, time.Duration, error) {
	esCtx, cancel := context.WithDeadline(ctx, s.pipe.WorkDeadline(ctx))
	defer cancel()
	start := time.Now()
	hits, err := s.es.SearchAll(esCtx, query, k)
	d := time.Since(start)
	s.pipe.Metrics().ObserveStage("es", d.Seconds())
	if err != nil {
		return nil, d, upstreamError(ctx, "search all documents", err)
	}
	return hits, d, nil
}

// searchInterleaved runs both arms at once (arm A's Elasticsearch call beside arm B's whole path) and
// answers with their team-draft interleaving, each result saying its team. The coin is seeded by the
// request (key and request id), so the same request interleaves the same way. Mode, fallback reason,
// router probability and model stay arm B's; scores and bm25_rank are each result's own arm's.
func (s *Server) searchInterleaved(ctx context.Context, query string, size int, seed [2]uint64) (Response, error) {
	size = s.resultSize(size)
	type answer struct {
		hits []adapter.Hit
		dur  time.Duration
		err  error
	}
	ach := make(chan answer, 1)
	go func() {
		var a answer
		defer func() {
			if r := recover(); r != nil {
				a.err = fmt.Errorf("search all documents: panic: %v", r)
			}
			ach <- a
		}()
		a.hits, a.dur, a.err = s.bm25All(ctx, query, size)
	}()
	resp, errB := s.searchModel(ctx, query, size, s.pipe.Policy())
	armA := <-ach
	switch {
	case errB != nil:
		return Response{}, errB
	case armA.err != nil:
		return Response{}, armA.err
	}
	listA, listB := rank.BaselineResults(armA.hits, size, retrieve.BaselineBM25), resp.Results
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	picks := TeamDraft(docIDs(listA), docIDs(listB), size, func() bool { return rng.Uint64()&1 == 1 })
	resp.Results = make([]Result, len(picks))
	for i, p := range picks {
		list := listB
		if p.Team == TeamA {
			list = listA
		}
		r := list[p.Index]
		r.Rank, r.Team = i+1, string(p.Team)
		resp.Results[i] = r
		s.metrics.interleaved.WithLabelValues(string(p.Team)).Inc()
	}
	resp.Timings.ES = max(resp.Timings.ES, ms(armA.dur))
	return resp, nil
}

func docIDs(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.DocID
	}
	return out
}

// keyHash is the key's pseudonym in the impression log.
func (a assignment) keyHash() string {
	if !a.on {
		return ""
	}
	return hex.EncodeToString(a.key[:16])
}

// resultSize is how many results a request asked for: size, else the beam width, at most 100.
func (s *Server) resultSize(size int) int { return s.pipe.Size(size) }

// upstreamError wraps an Elasticsearch failure as ErrUpstream (rank.UpstreamError).
func upstreamError(ctx context.Context, what string, err error) error {
	return rank.UpstreamError(ctx, what, err)
}
