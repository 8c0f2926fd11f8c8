package plugin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/inference"
	"github.com/icicle-search/sidecar/internal/gate"
	"github.com/icicle-search/sidecar/retrieve"
)

// rerank serves POST /v1/rerank: the caller's BM25 hits, reranked.
func (s *Server) rerank(c *gin.Context) {
	start := time.Now()
	var req RerankRequest
	if err := s.decode(c, &req); err != nil {
		s.fail(c, "rerank", err)
		return
	}
	if err := s.checkQuery(req.Query, req.Size); err != nil {
		s.fail(c, "rerank", err)
		return
	}
	policy, err := s.requestPolicy(req.Policy)
	if err != nil {
		s.fail(c, "rerank", err)
		return
	}
	if len(req.Hits) > s.opts.MaxHits {
		s.fail(c, "rerank", &InputError{Field: "hits", Problem: fmt.Sprintf("%d hits, at most %d accepted", len(req.Hits), s.opts.MaxHits)})
		return
	}
	hits, err := s.hitsFromES(req.Hits)
	if err != nil {
		s.fail(c, "rerank", err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.rank(ctx, req.Query, hits, req.Size, 0, policy)
	if err != nil {
		s.fail(c, "rerank", err)
		return
	}
	s.respond(c, "rerank", start, resp)
}

// search serves POST /v1/search: BM25 over the whole index (the baseline) and over new documents (the
// model's context) by the sidecar, then ranked as rerank is; or,
// with the A/B experiment on, the request's arm (ab.go).
func (s *Server) search(c *gin.Context) {
	start := time.Now()
	var req SearchRequest
	if err := s.decode(c, &req); err != nil {
		s.fail(c, "search", err)
		return
	}
	if err := s.checkQuery(req.Query, req.Size); err != nil {
		s.fail(c, "search", err)
		return
	}
	var err error
	if req.Policy, err = s.requestPolicy(req.Policy); err != nil {
		s.fail(c, "search", err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.searchAB(ctx, c, req)
	if err != nil {
		s.fail(c, "search", err)
		return
	}
	s.respond(c, "search", start, resp)
}

// searchModel is the ICICLE answer (arm B): within Elasticsearch's share of the budget, the first stage
// over the whole index (the baseline: what policy bm25 and every fallback answer) and over new documents
// (the model's copy context, its top decode.max_candidates); then rank.
func (s *Server) searchModel(ctx context.Context, query string, size int, policy string) (Response, error) {
	esCtx, esCancel := context.WithDeadline(ctx, s.workDeadline(ctx))
	defer esCancel()
	esStart := time.Now()
	policy = s.resolvePolicy(policy)
	req := retrieve.Request{Query: query, NewK: s.opts.MaxCandidates, Size: s.resultSize(size) + 1}
	switch policy {
	case PolicyFirstStage, policyGateIdle, policyNoModel:
		req.NewK = 0 // the model is not called: no context
	case "fusion":
		req.Size = 0 // any baseline hit may reach the fused top
	}
	lists, err := s.first.Search(esCtx, req)
	esDur := time.Since(esStart)
	s.metrics.stage.WithLabelValues("es").Observe(esDur.Seconds())
	var newErr *retrieve.NewSearchError
	if err != nil && !errors.As(err, &newErr) {
		return Response{}, upstreamError(ctx, "search all documents", err)
	}
	s.metrics.baselines.WithLabelValues(lists.Baseline, lists.Reason).Inc()
	if newErr != nil {
		// A refusal (401/403) is about the credentials, not the index: the caller's answer (or, with the
		// sidecar's own credentials, its dependency failing), never a fallback that hides it.
		var refused *adapter.ResponseError
		if ctx.Err() != nil || errors.As(newErr, &refused) && (refused.Status == http.StatusUnauthorized || refused.Status == http.StatusForbidden) {
			return Response{}, upstreamError(ctx, "search new documents", newErr.Err)
		}
		s.log.Warn("search new documents (the model's context)", "err", newErr.Err)
		resp := Response{HitsReceived: len(lists.All), Model: s.modelInfo().Name, Timings: Timings{ES: ms(esDur), Embed: ms(lists.Embed)},
			Baseline: s.baseline(lists.Info)}
		return s.fallback(resp, lists.All, min(cmp.Or(size, s.opts.Decode.BeamWidth), 100), ReasonContextUnavailable), nil
	}
	resp, err := s.rankWith(ctx, query, lists.All, lists.New, size, esDur, lists.Info, policy)
	resp.Timings.Embed = ms(lists.Embed)
	return resp, err
}

// baseline is the response's account of the first stage.
func (s *Server) baseline(info retrieve.Info) *Baseline {
	b := &Baseline{Kind: info.Baseline, Reason: info.Reason, Encoder: info.Encoder}
	if info.Baseline == retrieve.BaselineHybrid {
		b.Method = s.first.Params().Method
	}
	return b
}

// readBody reads the request body within Options.MaxBodyBytes. Too large stays an *http.MaxBytesError
// (413); any other read failure is bad input on "body".
func (s *Server) readBody(c *gin.Context) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if !errors.As(err, &tooBig) {
			err = &InputError{Field: "body", Problem: "unreadable: " + err.Error()}
		}
		return nil, err
	}
	return body, nil
}

// decode reads a JSON body within the size limit, naming the field of a type error.
func (s *Server) decode(c *gin.Context, v any) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	if !utf8.Valid(body) {
		return &InputError{Field: "body", Problem: "invalid UTF-8"}
	}
	if err := checkDuplicateKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &InputError{Field: te.Field, Problem: fmt.Sprintf("must be %s, got JSON %s", te.Type, te.Value)}
		}
		return &InputError{Field: "body", Problem: "invalid JSON: " + err.Error()}
	}
	if dec.More() {
		return &InputError{Field: "body", Problem: "trailing data after the JSON object"}
	}
	return nil
}

func (s *Server) checkQuery(q string, size int) error {
	switch n := utf8.RuneCountInString(q); {
	case strings.TrimSpace(q) == "":
		return &InputError{Field: "query", Problem: "required"}
	case n > s.opts.MaxQueryChars:
		return &InputError{Field: "query", Problem: fmt.Sprintf("%d characters, at most %d", n, s.opts.MaxQueryChars)}
	}
	if size < 0 || size > 100 {
		return &InputError{Field: "size", Problem: fmt.Sprintf("%d outside 0..100", size)}
	}
	return nil
}

// The policies: the values of policy.mode and of a request's "policy".
const (
	// PolicyFirstStage answers the first stage's order without running the model.
	PolicyFirstStage = "first_stage"
	// PolicyGate keeps the first stage's order unless the model's gate promotes its top.
	PolicyGate = "gate"
	// PolicyModel answers the model's own ranking.
	PolicyModel = "model"
	// PolicyFusion merges the model's ranking with the first stage's by reciprocal rank fusion.
	PolicyFusion = "fusion"
	// policyBM25 is the former name of PolicyFirstStage, accepted from requests and configurations.
	policyBM25 = "bm25"
)

// policies are the values of policy.mode and of a request's "policy".
var policies = []string{PolicyFirstStage, PolicyGate, PolicyModel, PolicyFusion}

// canonicalPolicy is p with the former name of the first-stage policy replaced.
func canonicalPolicy(p string) string {
	if p == policyBM25 {
		return PolicyFirstStage
	}
	return p
}

// requestPolicy is the policy a request runs under: the configured one when it asks for none, else the one
// it asks for. Asking for the first stage alone is always allowed (it never costs more); another policy than
// the configured one needs Options.AllowPolicyOverride, so that a caller cannot make every request run a
// reader the operator did not enable.
func (s *Server) requestPolicy(p string) (string, error) {
	if p == "" {
		return s.opts.Policy, nil
	}
	p = canonicalPolicy(p)
	if !slices.Contains(policies, p) {
		return "", &InputError{Field: "policy", Problem: fmt.Sprintf("%q, want one of %s (or absent: the configured policy.mode)",
			p, strings.Join(policies, ", "))}
	}
	if p != PolicyFirstStage && p != s.opts.Policy && !s.opts.AllowPolicyOverride {
		return "", &ForbiddenError{Field: "policy", Reason: fmt.Sprintf("policy %q: this sidecar answers policy %q or %q; "+
			"another needs policy.allow_override", p, s.opts.Policy, PolicyFirstStage)}
	}
	return p, nil
}

// hitsFromES reads the title (docid) and summary out of each hit's _source.
//
// The fields read are Options.Fields' (the sidecar's layout by default: title, summary, docid): the title
// is required, and is the docid unless the docid field (or the _id, with a team's index keyed by it) says
// otherwise.
func (s *Server) hitsFromES(in []ESHit) ([]adapter.Hit, error) {
	f := s.opts.Fields
	hits := make([]adapter.Hit, len(in))
	for i, h := range in {
		field := func(f string) string { return "hits[" + strconv.Itoa(i) + "]" + f }
		if len(h.Source) == 0 {
			return nil, &InputError{Field: field("._source"), Problem: "required"}
		}
		var src map[string]json.RawMessage
		if err := json.Unmarshal(h.Source, &src); err != nil {
			return nil, &InputError{Field: field("._source"), Problem: "must be an object with string " + f.Title + " and " + f.Summary + ": " + err.Error()}
		}
		title, err := sourceString(src, f.Title)
		if err == nil && strings.TrimSpace(title) == "" {
			err = errors.New("required (the title is the docid)")
		}
		if err != nil {
			return nil, &InputError{Field: field("._source." + f.Title), Problem: err.Error()}
		}
		hits[i] = adapter.Hit{ID: h.ID, DocID: title, Title: title, Rank: i + 1}
		if f.DocID == adapter.IDField && h.ID != "" {
			hits[i].DocID = h.ID
		} else if d, err := sourceString(src, f.DocID); err == nil && d != "" {
			hits[i].DocID = d
		} else if err != nil {
			return nil, &InputError{Field: field("._source." + f.DocID), Problem: err.Error()}
		}
		summary, err := sourceString(src, f.Summary)
		if err != nil {
			return nil, &InputError{Field: field("._source." + f.Summary), Problem: err.Error()}
		}
		hits[i].Summary = summary
		if h.Score != nil {
			hits[i].Score = *h.Score
		}
	}
	return hits, nil
}

// sourceString reads the string at a field's dotted path in a hit's _source ("" when absent, an array's
// first string); anything else is an error saying what it is.
func sourceString(src map[string]json.RawMessage, path string) (string, error) {
	raw, ok := src[path]
	if !ok {
		head, rest, nested := strings.Cut(path, ".")
		var inner map[string]json.RawMessage
		if !nested || json.Unmarshal(src[head], &inner) != nil {
			return "", nil
		}
		return sourceString(inner, rest)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) > 0 {
			return ss[0], nil
		}
		return "", nil
	}
	if string(raw) == "null" {
		return "", nil
	}
	return "", fmt.Errorf("must be a string, got JSON %s", truncateJSON(raw))
}

// rank runs the model over hits and builds the response (/v1/rerank: the caller's hits; the drop-in):
// the first stage re-scores hits first, and its order is both the baseline and the model's context.
func (s *Server) rank(ctx context.Context, query string, hits []adapter.Hit, size int, esDur time.Duration, policy string) (Response, error) {
	start := time.Now()
	rescored, info, err := s.first.Rescore(ctx, query, hits)
	if err != nil {
		return Response{}, err
	}
	s.metrics.baselines.WithLabelValues(info.Baseline, info.Reason).Inc()
	resp, err := s.rankWith(ctx, query, rescored, rescored, size, esDur+time.Since(start)-info.Embed, info, s.resolvePolicy(policy))
	resp.Timings.Embed = ms(info.Embed)
	return resp, err
}

// rankWith runs the model over the context hits and builds the response against base, the first stage's
// ranking (on /v1/search over the whole index): policy bm25 and every fallback answer base's order, policy
// gate keeps it unless the model's gate promotes the model's top. Only a client cancellation is returned
// as an error.
func (s *Server) rankWith(ctx context.Context, query string, base, hits []adapter.Hit, size int, esDur time.Duration, info retrieve.Info, policy string) (Response, error) {
	size = min(cmp.Or(size, s.opts.Decode.BeamWidth), 100)
	resp := Response{RequestID: "", HitsReceived: len(hits), Model: s.modelInfo().Name, Baseline: s.baseline(info)}
	resp.Timings.ES = ms(esDur)
	switch policy {
	case PolicyFirstStage, policyNoModel:
		resp.HitsReceived = len(base)
		resp.Mode, resp.Results = ModeFirstStage, baselineResults(base, size, info.Baseline)
		resp.ModelSkipped = SkipPolicy
		if policy == policyNoModel {
			resp.ModelSkipped = SkipNoModel
		}
		return resp, nil
	case policyGateIdle:
		resp.HitsReceived = len(base)
		resp.Mode, resp.Results = ModeGated, baselineResults(base, size, info.Baseline)
		resp.ModelSkipped = SkipGateNever
		g := s.gate()
		resp.Gate = &GateReport{Decision: GateKeep, Reason: ReasonGateIdle, Threshold: g.Threshold, Never: true}
		if len(base) > 0 {
			resp.Gate.FirstStageTop = base[0].DocID
		}
		s.metrics.gateDecisions.WithLabelValues(GateKeep).Inc()
		return resp, nil
	}
	cands := hits[:min(len(hits), s.opts.MaxCandidates)]
	resp.CandidatesTruncated = len(hits) > len(cands)
	read := cands // what the model reads of them; the results show cands
	if s.opts.SnippetChars > 0 {
		read = s.snippets(ctx, query, cands, &resp)
	}
	in := make([]inference.Candidate, len(cands))
	for i, h := range read {
		in[i] = CandidateOf(h)
		if s.opts.Decode.ByTitle(i, in[i]) {
			resp.TitleOnlyCandidates++
		}
	}
	fallback := func(reason string) (Response, error) { return s.fallback(resp, base, size, reason), nil }
	baseKind := info.Baseline
	// Model admission (admission.go): a session within the deadline, or a BM25 answer with the reason.
	modelStart := time.Now()
	var memory []string // nil: the whole seen corpus
	if s.opts.MemoryFromFirstStage {
		memory = make([]string, len(base))
		for i, h := range base {
			memory[i] = h.DocID
		}
	}
	res, reason, err := s.runModel(ctx, query, in, memory)
	resp.Timings.Model = ms(time.Since(modelStart))
	if err != nil {
		return Response{}, err
	}
	if reason != "" {
		return fallback(reason)
	}
	resp.Timings.Prefill, resp.Timings.Decode = ptr(ms(res.Stats.Prefill)), ptr(ms(res.Stats.Decode))
	resp.CandidatesInContext = res.InContext
	resp.Context = make([]string, min(res.InContext, len(cands)))
	for i := range resp.Context {
		resp.Context[i] = cands[i].DocID
	}
	s.metrics.inContext.Observe(float64(res.InContext))
	resp.RouterProb = &res.PCopy
	if s.opts.RouteByFirstStage {
		res.Beams, resp.Rerouted = routeByFirstStage(res.Beams, base)
	}
	if len(res.Beams) == 0 || res.PCopy < s.opts.MinCopyProb && res.Beams[0].Route == inference.RouteCopy || res.Beams[0].Score < s.opts.MinTopScore {
		return fallback(ReasonLowConfidence)
	}
	s.metrics.routes.WithLabelValues(string(res.Beams[0].Route)).Inc()
	switch policy {
	case PolicyGate:
		resp.Mode = ModeGated
		resp.Gate, resp.Results = s.gated(ctx, res, cands, base, size, baseKind)
		s.metrics.gateDecisions.WithLabelValues(resp.Gate.Decision).Inc()
	case PolicyFusion:
		resp.Mode = ModeFused
		model := rebase(s.modelResults(ctx, res.Beams, cands, cands), base)
		resp.Results = fuse(model, baselineResults(base, len(base), baseKind), s.opts.FusionK, size)
	default:
		resp.Mode = ModeReranked
		resp.Results = rebase(s.modelResults(ctx, res.Beams[:min(size, len(res.Beams))], cands, cands), base)
	}
	return resp, nil
}

// ReasonGateIdle is a gate report's reason when the model was not run: its gate never promotes.
const ReasonGateIdle = "the model's gate never promotes: the model is not run (experimental.run_model_when_gate_never)"

// policyGateIdle is policy gate under a gate that never promotes (resolvePolicy): the model is not run.
const policyGateIdle = "gate_idle"

// policyNoModel is any policy of a sidecar that serves no model (resolvePolicy): the first stage answers.
const policyNoModel = "no_model"

// resolvePolicy is the policy a request runs under, decided once per request (a swap may change the gate):
// policyNoModel when no model is served; policyGateIdle for gate when the gate never promotes its answer, so
// that the model is not run at all (Options.RunModelWhenGateNever runs it anyway, for calibration); policy
// otherwise.
func (s *Server) resolvePolicy(policy string) string {
	switch {
	case s.model == nil:
		return policyNoModel
	case policy == PolicyGate && !s.opts.RunModelWhenGateNever && s.gate().Never:
		return policyGateIdle
	}
	return policy
}

// fallback answers base's order (the first stage's), saying why.
func (s *Server) fallback(resp Response, base []adapter.Hit, size int, reason string) Response {
	s.metrics.fallbacks.WithLabelValues(reason).Inc()
	resp.Mode, resp.FallbackReason = ModeFirstStageFallback, reason
	kind := retrieve.BaselineBM25
	if resp.Baseline != nil {
		kind = resp.Baseline.Kind
	}
	resp.Results = baselineResults(base, size, kind)
	return resp
}

// gated applies the model's gate: base's order (the first stage's), with the model's top moved to rank 1
// (the rest in base's order without it) when the gate promotes it.
func (s *Server) gated(ctx context.Context, res inference.Result, cands, base []adapter.Hit, size int, baseKind string) (*GateReport, []Result) {
	g := s.gate()
	beams := make([]gate.Beam, len(res.Beams))
	for i, b := range res.Beams {
		beams[i] = gate.Beam{DocID: b.DocID, Copy: b.Route == inference.RouteCopy, Score: b.Score}
	}
	ids, scores := make([]string, len(base)), make([]float64, len(base))
	for i, h := range base {
		ids[i], scores[i] = h.DocID, h.Score
	}
	inContext := make([]string, min(res.InContext, len(cands)))
	for i := range inContext {
		inContext[i] = cands[i].DocID
	}
	f := gate.Compute(res.PCopy, beams, ids, scores, inContext)
	d := g.Decide(f)
	rep := &GateReport{Decision: GateKeep, Reason: d.Reason, P: d.P, Threshold: g.Threshold, Never: g.Never,
		ModelTop: res.Beams[0].DocID, Features: f}
	if len(base) > 0 {
		rep.FirstStageTop = base[0].DocID
	}
	if !d.Promote {
		return rep, baselineResults(base, size, baseKind)
	}
	bm25 := baselineResults(base, size+1, baseKind) // the model's top may be among them
	rep.Decision = GatePromote
	top := rebase(s.modelResults(ctx, res.Beams[:1], cands, cands), base)[0]
	out := append(make([]Result, 0, size), top)
	for _, r := range bm25 {
		if len(out) == size {
			break
		}
		if r.DocID != top.DocID {
			out = append(out, r)
		}
	}
	for i := range out {
		out[i].Rank = i + 1
	}
	return rep, out
}

// rebase sets each result's FirstStageRank to its rank in base and its BM25 rank and scores to base's
// (absent when base does not hold it).
func rebase(rs []Result, base []adapter.Hit) []Result {
	at := make(map[string]int, len(base))
	for i, h := range base {
		if _, ok := at[h.DocID]; !ok {
			at[h.DocID] = i
		}
	}
	for i := range rs {
		rs[i].FirstStageRank, rs[i].BM25Rank, rs[i].BM25Score, rs[i].DenseScore = nil, nil, nil, nil
		if j, ok := at[rs[i].DocID]; ok {
			rs[i].FirstStageRank = ptr(j + 1)
			setHitScores(&rs[i], base[j])
		}
	}
	return rs
}

// setHitScores copies a first-stage hit's BM25 rank and score and its cosine into r.
func setHitScores(r *Result, h adapter.Hit) {
	if h.BM25Rank > 0 {
		r.BM25Rank, r.BM25Score = ptr(h.BM25Rank), ptr(h.BM25)
	}
	if h.HasDense {
		r.DenseScore = ptr(h.Dense)
	}
}

// fuse merges the model's and the baseline's rankings by reciprocal rank fusion: score(d) = sum over the
// lists that rank d of 1/(k + rank). A document keeps the model's provenance when the model ranked it. Ties
// go to the better first-stage rank, then the docid.
func fuse(model, bm25 []Result, k, size int) []Result {
	byDoc := make(map[string]*Result, len(model)+len(bm25))
	var order []string
	add := func(list []Result) {
		for i, r := range list {
			rrf := 1 / float64(k+i+1)
			if cur, ok := byDoc[r.DocID]; ok {
				cur.Score += rrf
				if cur.FirstStageRank == nil {
					cur.FirstStageRank = r.FirstStageRank
				}
				continue
			}
			r.Score = rrf
			byDoc[r.DocID] = &r
			order = append(order, r.DocID)
		}
	}
	add(model)
	add(bm25)
	out := make([]Result, 0, len(order))
	for _, d := range order {
		out = append(out, *byDoc[d])
	}
	bm25Rank := func(r Result) int {
		if r.FirstStageRank == nil {
			return math.MaxInt
		}
		return *r.FirstStageRank
	}
	slices.SortStableFunc(out, func(a, b Result) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(bm25Rank(a), bm25Rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.DocID, b.DocID)
	})
	out = out[:min(size, len(out))]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// modelResults turns beams into results: copied docids are their context hits; parametric docids are
// resolved to their stored documents in one Elasticsearch request.
func (s *Server) modelResults(ctx context.Context, beams []inference.Beam, cands, hits []adapter.Hit) []Result {
	byDocID := make(map[string]int, len(hits))
	for i, h := range hits {
		if _, ok := byDocID[h.DocID]; !ok {
			byDocID[h.DocID] = i
		}
	}
	var missing []string
	for _, b := range beams {
		if _, ok := byDocID[b.DocID]; !ok && b.Route == inference.RouteParametric {
			missing = append(missing, b.DocID)
		}
	}
	var resolved map[string]adapter.Hit
	if len(missing) > 0 {
		var err error
		if resolved, err = s.es.Resolve(ctx, missing); err != nil {
			s.log.Warn("resolve parametric docids", "docids", len(missing), "err", err)
		}
	}
	out := make([]Result, 0, len(beams))
	for i, b := range beams {
		r := Result{Rank: i + 1, DocID: b.DocID, Title: b.DocID, Score: b.Score, Provenance: FromParametric}
		if b.Route == inference.RouteCopy {
			r.Provenance = FromCopy
		}
		if j, ok := byDocID[b.DocID]; ok {
			h := hits[j]
			r.ID, r.Title, r.Summary, r.Resolved = h.ID, h.Title, h.Summary, true
			r.FirstStageRank = ptr(j + 1)
			setHitScores(&r, h)
		} else if h, ok := resolved[b.DocID]; ok {
			r.ID, r.Title, r.Summary, r.Resolved = h.ID, h.Title, h.Summary, true
		}
		out = append(out, r)
	}
	return out
}

// baselineResults is the top size of a first-stage ranking as results: provenance first_stage for a
// hybrid ranking, bm25 for BM25 alone (kind is retrieve.BaselineHybrid or BaselineBM25).
func baselineResults(hits []adapter.Hit, size int, kind string) []Result {
	prov := FromBM25
	if kind == retrieve.BaselineHybrid {
		prov = FromFirstStage
	}
	out := make([]Result, 0, min(size, len(hits)))
	for i, h := range hits[:min(size, len(hits))] {
		r := Result{Rank: i + 1, ID: h.ID, DocID: h.DocID, Title: h.Title, Summary: h.Summary,
			Score: h.Score, Provenance: prov, FirstStageRank: ptr(i + 1), Resolved: true}
		setHitScores(&r, h)
		if kind != retrieve.BaselineHybrid && r.BM25Rank == nil {
			r.BM25Rank = ptr(i + 1) // BM25 alone: the list's own order is BM25's
		}
		out = append(out, r)
	}
	return out
}

func (s *Server) respond(c *gin.Context, endpoint string, start time.Time, resp Response) {
	resp.RequestID = requestID(c)
	resp.Timings.Total = ms(time.Since(start))
	s.metrics.requests.WithLabelValues(endpoint, "200", string(resp.Mode)).Inc()
	s.metrics.duration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	s.log.Info("ranked", "request_id", resp.RequestID, "endpoint", endpoint, "mode", resp.Mode,
		"reason", resp.FallbackReason, "hits", resp.HitsReceived, "in_context", resp.CandidatesInContext, "took_ms", resp.Timings.Total)
	c.JSON(http.StatusOK, resp)
}

func (s *Server) fail(c *gin.Context, endpoint string, err error) {
	writeError(c, s.log, err)
	s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(c.Writer.Status()), "error").Inc()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }

// snippets gives the model's candidates the passages of their bodies that best match the query
// (experimental.snippet_chars) instead of their stored summaries, on copies: the results keep the stored summaries.
// Elasticsearch failing, or not answering by the working deadline (the first stage's), leaves the stored
// summaries, said in the log; the time counts as Elasticsearch's.
func (s *Server) snippets(ctx context.Context, query string, cands []adapter.Hit, resp *Response) []adapter.Hit {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, s.workDeadline(ctx))
	defer cancel()
	out := append([]adapter.Hit(nil), cands...)
	if err := s.es.Snippets(ctx, query, out, s.opts.SnippetChars); err != nil {
		s.log.Warn("query snippets: the model reads the stored summaries", "err", err)
		out = cands
	}
	for i := range out {
		if out[i].Summary != cands[i].Summary {
			resp.Snippets++
		}
	}
	resp.Timings.ES += ms(time.Since(start))
	return out
}

// CandidateOf is a hit as the model reads it: its docid (the title it copies) and its summary. The block
// store's fill (cmd/icicle) builds its blocks with it, so that they are the blocks requests read.
func CandidateOf(h adapter.Hit) inference.Candidate {
	return inference.Candidate{Title: h.DocID, Summary: h.Summary}
}
