package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/dropin"
	"github.com/icicle-search/sidecar/rank"
)

// rerank serves POST /v1/rerank: the caller's BM25 hits, reranked.
func (s *Server) rerank(c *gin.Context) (answer, error) {
	start := time.Now()
	var req RerankRequest
	if err := s.decode(c, &req); err != nil {
		return answer{}, err
	}
	if err := s.checkQuery(req.Query, req.Size); err != nil {
		return answer{}, err
	}
	policy, err := s.requestPolicy(req.Policy)
	if err != nil {
		return answer{}, err
	}
	if len(req.Hits) > s.opts.MaxHits {
		return answer{}, &InputError{Field: "hits", Problem: fmt.Sprintf("%d hits, at most %d accepted", len(req.Hits), s.opts.MaxHits)}
	}
	hits, err := s.opts.Fields.Hits(req.Hits)
	if err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	ranked, err := s.pipe.Run(ctx, rank.Request{Query: req.Query, Size: req.Size, Policy: policy, Hits: hits})
	if err != nil {
		return answer{}, err
	}
	return s.ranked(c, "rerank", start, Response{Response: ranked}), nil
}

// search serves POST /v1/search: BM25 over the whole index (the baseline) and over new documents (the
// model's context) by the sidecar, then ranked as rerank is; or, with the A/B experiment on, the request's
// arm (ab.go).
func (s *Server) search(c *gin.Context) (answer, error) {
	start := time.Now()
	var req SearchRequest
	if err := s.decode(c, &req); err != nil {
		return answer{}, err
	}
	if err := s.checkQuery(req.Query, req.Size); err != nil {
		return answer{}, err
	}
	var err error
	if req.Policy, err = s.requestPolicy(req.Policy); err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	resp, err := s.searchAB(ctx, c, req)
	if err != nil {
		return answer{}, err
	}
	return s.ranked(c, "search", start, resp), nil
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
	if err := dropin.CheckDuplicateKeys(body); err != nil {
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

// requestPolicy is the policy a request runs under: the configured one when it asks for none, else the one
// it asks for. Asking for the first stage alone is always allowed (it never costs more); another policy than
// the configured one needs Options.AllowPolicyOverride, so that a caller cannot make every request run a
// reader the operator did not enable.
func (s *Server) requestPolicy(p string) (string, error) {
	configured := s.pipe.Policy()
	if p == "" {
		return configured, nil
	}
	p = rank.CanonicalPolicy(p)
	if !slices.Contains(rank.Policies, p) {
		return "", &InputError{Field: "policy", Problem: fmt.Sprintf("%q, want one of %s (or absent: the configured policy.mode)",
			p, strings.Join(rank.Policies, ", "))}
	}
	if p != PolicyFirstStage && p != configured && !s.opts.AllowPolicyOverride {
		return "", &ForbiddenError{Field: "policy", Reason: fmt.Sprintf("policy %q: this sidecar answers policy %q or %q; "+
			"another needs policy.allow_override", p, configured, PolicyFirstStage)}
	}
	return p, nil
}

// ranked is the answer of a ranking, resp, to the request that started at start, logged.
func (s *Server) ranked(c *gin.Context, endpoint string, start time.Time, resp Response) answer {
	resp.RequestID = requestID(c)
	resp.Timings.Total = ms(time.Since(start))
	s.log.Info("ranked", "request_id", resp.RequestID, "endpoint", endpoint, "mode", resp.Mode,
		"reason", resp.FallbackReason, "hits", resp.HitsReceived, "in_context", resp.CandidatesInContext, "took_ms", resp.Timings.Total)
	return answer{body: resp, mode: string(resp.Mode)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }
