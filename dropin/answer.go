package dropin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/icicle-search/sidecar/rank"
)

// Info is the "icicle" object the drop-in adds to Elasticsearch's search response.
type Info struct {
	RequestID string `json:"request_id"`
	// Mode is first_stage, gated, reranked, fused, first_stage_fallback or passthrough.
	Mode rank.Mode `json:"mode"`
	// Reason says why Mode is first_stage_fallback (as rank.Response.FallbackReason) or passthrough
	// (Reason* constants).
	Reason string `json:"reason,omitempty"`
	// ModelSkipped says why the model was not run although nothing failed (as rank.Response.ModelSkipped).
	ModelSkipped string `json:"model_skipped,omitempty"`
	// QueryFrom names where the query text was found: "ext.icicle.query" or the query's JSON path, such as
	// "query.bool.must.match.title". Empty when none was.
	QueryFrom string `json:"query_from,omitempty"`
	// HitsReceived is the number of hits in Elasticsearch's response (hits.hits).
	HitsReceived int `json:"hits_received"`
	// CandidatesInContext is how many of them were in the model's prompt.
	CandidatesInContext int  `json:"candidates_in_context"`
	CandidatesTruncated bool `json:"candidates_truncated,omitempty"`
	TitleOnlyCandidates int  `json:"title_only_candidates,omitempty"`
	Snippets            int  `json:"snippets,omitempty"`
	// RouterProb is p([COPY]) at the first decoding step; absent when the model did not run.
	RouterProb *float64 `json:"router_prob,omitempty"`
	// Rerouted: experimental.route_by_first_stage put the model's other route's answer first.
	Rerouted bool `json:"rerouted,omitempty"`
	// Unresolved counts parametric docids that were not found in the index and so are not among the hits.
	Unresolved int `json:"unresolved,omitempty"`
	// RankWindowSize is how many of Elasticsearch's top hits were reranked (once) to cut this page from;
	// absent when the answer was passed through unchanged.
	RankWindowSize int          `json:"rank_window_size,omitempty"`
	Timings        rank.Timings `json:"timings"`
	Model          string       `json:"model,omitempty"`
}

// HitInfo is the "_icicle" object the drop-in adds to each hit it placed.
type HitInfo struct {
	// Provenance is copy (a context hit the model copied), parametric (a seen-corpus document the model
	// generated; the hit was inserted, with _score null) or bm25 (placed by its Elasticsearch rank).
	Provenance rank.Provenance `json:"provenance"`
	// Score is the model's log-probability (copy, parametric), the fusion score (mode fused) or the
	// Elasticsearch score (bm25).
	Score float64 `json:"score"`
	// BM25Rank is the 1-based position in Elasticsearch's hits, absent for an inserted parametric document.
	BM25Rank *int `json:"bm25_rank,omitempty"`
}

// ranked records the ranking of the window in info.
func (info *Info) ranked(resp rank.Response, unresolved int) {
	info.Mode, info.Reason, info.Timings = resp.Mode, resp.FallbackReason, resp.Timings
	info.ModelSkipped = resp.ModelSkipped
	info.CandidatesInContext, info.CandidatesTruncated = resp.CandidatesInContext, resp.CandidatesTruncated
	info.TitleOnlyCandidates, info.RouterProb, info.Rerouted, info.Unresolved = resp.TitleOnlyCandidates, resp.RouterProb, resp.Rerouted, unresolved
	info.Snippets = resp.Snippets
}

// esHits returns the response's hits object and its hits.hits entries; ok is false when either is missing
// or malformed.
func esHits(top map[string]json.RawMessage) (hitsObj map[string]json.RawMessage, raw []json.RawMessage, ok bool) {
	if json.Unmarshal(top["hits"], &hitsObj) != nil || hitsObj == nil {
		return nil, nil, false
	}
	if json.Unmarshal(hitsObj["hits"], &raw) != nil || hitsObj["hits"] == nil {
		return hitsObj, nil, false
	}
	return hitsObj, raw, true
}

// placeHits turns the ranking into the ranked window: each result that was a hit is that hit as
// Elasticsearch returned it, with "_icicle" added; a parametric result that was not is its recalled hit
// (fetched with the request's source filter, _score null); unresolved parametric docids have no document
// to show and are counted. Hits the ranking did not place follow in Elasticsearch's order (provenance
// bm25), no document twice, until the list has limit hits (the number Elasticsearch was asked for: when
// it had fewer, every hit stays).
func placeHits(results []rank.Result, raw []json.RawMessage, recalled map[string]json.RawMessage, limit int) ([]json.RawMessage, int) {
	ids := make([]string, len(raw))
	byID := make(map[string]int, len(raw))
	for j, r := range raw {
		var h struct {
			ID string `json:"_id"`
		}
		_ = json.Unmarshal(r, &h)
		ids[j] = h.ID
		if _, dup := byID[h.ID]; !dup {
			byID[h.ID] = j
		}
	}
	used := make([]bool, len(raw))
	placed := make(map[string]bool, len(raw))
	out := make([]json.RawMessage, 0, len(raw))
	unresolved := 0
	for _, r := range results {
		info := HitInfo{Provenance: r.Provenance, Score: r.Score, BM25Rank: r.BM25Rank}
		j, inRaw := byID[r.ID]
		switch {
		case r.BM25Rank != nil:
			j, inRaw = *r.BM25Rank-1, true
		case !r.Resolved:
			unresolved++
			continue
		}
		switch {
		case inRaw && j < len(raw):
			if used[j] || placed[ids[j]] {
				continue
			}
			used[j], placed[ids[j]] = true, true
			info.BM25Rank = ptr(j + 1)
			out = append(out, withField(raw[j], "_icicle", info))
		case recalled[r.ID] != nil && !placed[r.ID]:
			placed[r.ID] = true
			out = append(out, withField(recalled[r.ID], "_icicle", info))
		default:
			unresolved++
		}
	}
	for j := range raw {
		if len(out) >= limit {
			break
		}
		if used[j] || placed[ids[j]] {
			continue
		}
		placed[ids[j]] = true
		var h ESHit
		_ = json.Unmarshal(raw[j], &h)
		info := HitInfo{Provenance: rank.FromBM25, BM25Rank: ptr(j + 1)}
		if h.Score != nil {
			info.Score = *h.Score
		}
		out = append(out, withField(raw[j], "_icicle", info))
	}
	return out, unresolved
}

// withField returns the JSON object obj with key set to v.
func withField(obj json.RawMessage, key string, v any) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(obj, &m) // an object: rawHits decoded it
	m[key] = mustJSON(v)
	return mustJSON(m)
}

// mustJSON encodes v, which is built of JSON values and plain types, without HTML escaping (Elasticsearch
// does not escape either).
func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err)) // unreachable: values are already valid JSON
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// jsonContentType is Elasticsearch's JSON media type of the answer (the vendor type when the client asked
// for it), or application/json.
func jsonContentType(h http.Header) string {
	if ct := h.Get("Content-Type"); strings.Contains(ct, "json") {
		return ct
	}
	return "application/json; charset=utf-8"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }
