package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Protocols say how an arm's rankings were produced.
const (
	// ProtocolBM25All is arm A: Elasticsearch BM25 over every document, seen and new.
	ProtocolBM25All = "bm25_all"
	// ProtocolFirstStage is the first stage alone: the sidecar's /v1/search with policy bm25 (BM25 fused
	// with the dense encoder, the model not called); the baseline the model must beat.
	ProtocolFirstStage = "first_stage"
	// ProtocolSearch is arm B: the sidecar's /v1/search (under its policy.mode; the model reads the first
	// stage's top candidates over new documents).
	ProtocolSearch = "search"
	// ProtocolTopN is the N-shot sweep: the BM25 top N new documents posted to /v1/rerank.
	ProtocolTopN = "bm25_top_n"
	// ProtocolReader is arm R: a second sidecar serving a reader profile, asked for the reader's own
	// ranking (policy model) on some of the queries; ProtocolOnReaderQueries are arms A, F and B on the same
	// queries, so that the four compare query for query.
	ProtocolReader          = "reader"
	ProtocolOnReaderQueries = "on_reader_queries"
	// ProtocolPaper is the paper's protocol posted to /v1/rerank: a new-document query gets its gold
	// document and N-1 random new documents (gold at a random position); a seen-document query gets N
	// random new documents (all-noise).
	ProtocolPaper = "paper"
)

// SubsetAll names the summary over every query of an arm.
const SubsetAll = "all"

// Arm is one named set of outcomes with its summaries by subset.
type Arm struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	// Shots is the number of candidates posted (ProtocolTopN, ProtocolPaper); 0 otherwise.
	Shots int `json:"shots,omitempty"`
	// Summaries are keyed SubsetSeen, SubsetNew and SubsetAll.
	Summaries map[string]Summary `json:"summaries"`
	Outcomes  []Outcome          `json:"queries"`
}

// NewArm summarises outs by subset with bins calibration bins.
func NewArm(name, protocol string, shots int, outs []Outcome, bins int) Arm {
	a := Arm{Name: name, Protocol: protocol, Shots: shots, Outcomes: outs, Summaries: map[string]Summary{}}
	for _, sub := range []string{SubsetSeen, SubsetNew} {
		a.Summaries[sub] = Summarise(outs, sub, bins)
	}
	a.Summaries[SubsetAll] = Summarise(outs, "", bins)
	return a
}

// Meta describes an evaluation run.
type Meta struct {
	Queries     map[string]int `json:"queries"`
	QueriesFile string         `json:"queries_file"`
	QrelsFile   string         `json:"qrels_file"`
	Split       string         `json:"split"`
	ModelDir    string         `json:"model_dir"`
	SeenDocIDs  int            `json:"seen_docids"`
	NewDocIDs   int            `json:"new_docids,omitempty"`
	Sidecar     string         `json:"sidecar"`
	Model       string         `json:"model"`
	Index       string         `json:"index"`
	Concurrency int            `json:"concurrency"`
	Seed        uint64         `json:"seed"`
	Bins        int            `json:"calibration_bins"`
	Started     time.Time      `json:"started"`
	TookS       float64        `json:"took_s"`
}

// Report is everything `icicle eval` measured; report.json is its JSON.
type Report struct {
	Meta Meta  `json:"meta"`
	Arms []Arm `json:"arms"`
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ByProtocol returns the arms of one protocol, in report order.
func (r Report) ByProtocol(protocol string) []Arm {
	var out []Arm
	for _, a := range r.Arms {
		if a.Protocol == protocol {
			out = append(out, a)
		}
	}
	return out
}

// WriteMarkdown writes the report as markdown: the run, then one table per protocol group, then the
// paper's published figures beside the paper-protocol rows.
func (r Report) WriteMarkdown(w io.Writer) {
	m := r.Meta
	fmt.Fprintf(w, "%d queries (%d seen, %d new) of split %q from %s; seen = relevant document in %s/seen_docids.txt (%d docids).\n",
		m.Queries[SubsetSeen]+m.Queries[SubsetNew], m.Queries[SubsetSeen], m.Queries[SubsetNew], m.Split, m.QueriesFile, m.ModelDir, m.SeenDocIDs)
	fmt.Fprintf(w, "Sidecar %s (model %s), index %s, concurrency %d, seed %d, %d calibration bins, %.1f s.\n",
		m.Sidecar, m.Model, m.Index, m.Concurrency, m.Seed, m.Bins, m.TookS)
	groups := []struct{ title, protocol string }{
		{"BM25 over all documents (A: what a team runs today), the first stage alone (F) and the sidecar's /v1/search (B)", ""},
		{"The reader's own ranking (R: a sidecar serving a reader profile in model mode) beside A, F and B on the same queries", ProtocolReader},
		{"N-shot sweep: BM25 top N new documents posted to /v1/rerank", ProtocolTopN},
		{"Paper protocol: gold + N-1 random new documents (new), N random new documents (seen, all-noise), posted to /v1/rerank", ProtocolPaper},
	}
	for _, g := range groups {
		arms := r.ByProtocol(g.protocol)
		switch g.protocol {
		case "":
			arms = append(append(r.ByProtocol(ProtocolBM25All), r.ByProtocol(ProtocolFirstStage)...), r.ByProtocol(ProtocolSearch)...)
		case ProtocolReader:
			if len(arms) > 0 {
				arms = append(r.ByProtocol(ProtocolOnReaderQueries), arms...)
			}
		}
		if len(arms) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n### %s\n\n", g.title)
		WriteTable(w, arms)
		if g.protocol == ProtocolReader {
			// The reader's departures from the first stage, query by query: what a gate would have to tell apart.
			if f, rd := r.ByProtocol(ProtocolOnReaderQueries), r.ByProtocol(ProtocolReader); len(f) >= 2 && len(rd) == 1 {
				writeChanges(w, f[1], rd[0])
			}
		}
		if g.protocol != "" {
			continue
		}
		a, f, b := r.ByProtocol(ProtocolBM25All), r.ByProtocol(ProtocolFirstStage), r.ByProtocol(ProtocolSearch)
		// The model's contribution is measured above the first stage: that is what it must beat.
		if len(f) == 1 && len(b) == 1 {
			writeChanges(w, f[0], b[0])
		}
		if len(a) == 1 && len(f) == 1 {
			writeChanges(w, a[0], f[0])
		}
		if len(a) == 1 && len(b) == 1 {
			writeChanges(w, a[0], b[0])
		}
	}
	if paper := r.ByProtocol(ProtocolPaper); len(paper) > 0 {
		fmt.Fprintf(w, "\n### Beside the paper (NQ320K; this corpus is nq_qed, %d documents, so only the shape compares)\n\n", m.SeenDocIDs+m.NewDocIDs)
		writePaperTable(w, paper)
	}
}

// WriteTable writes one markdown row per arm and subset.
func WriteTable(w io.Writer, arms []Arm) {
	fmt.Fprintln(w, "| arm | subset | queries | errors | Hits@1 | Hits@10 | MRR@10 | top-1 copy / param / first stage / bm25 | gold in context | routing recall | P(hit\\|COPY) | ECE route | ECE top-1 | fallback | p50 ms | p95 ms | p99 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, a := range arms {
		for _, sub := range []string{SubsetSeen, SubsetNew, SubsetAll} {
			s := a.Summaries[sub]
			if s.N == 0 {
				continue
			}
			share := func(route string) float64 { return float64(s.Routes[route]) / float64(s.N) }
			fmt.Fprintf(w, "| %s | %s | %d | %d | %.3f | %.3f | %.3f | %.2f / %.2f / %.2f / %.2f | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f |\n",
				a.Name, sub, s.N, s.Errors, s.Hits1, s.Hits10, s.MRR,
				share(RouteCopy), share(RouteParametric), share(RouteFirstStage), share(RouteBM25),
				s.InContext, s.RoutingRecall, s.HitGivenCopy, optional(s.RouteECE), optional(s.TopECE),
				fallbackCell(s), s.Latency.P50, s.Latency.P95, s.Latency.P99)
		}
	}
}

// fallbackCell renders the fallback rate with its reasons: "0.05 (overloaded 2, model_timeout 1)".
func fallbackCell(s Summary) string {
	if len(s.Fallbacks) == 0 {
		return fmt.Sprintf("%.2f", s.FallbackRate)
	}
	var parts []string
	for _, reason := range sortedKeys(s.Fallbacks) {
		parts = append(parts, fmt.Sprintf("%s %d", reason, s.Fallbacks[reason]))
	}
	return fmt.Sprintf("%.2f (%s)", s.FallbackRate, strings.Join(parts, ", "))
}

func optional(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f", *v)
}

// Published ICICLE figures on NQ320K: Table 1 (N = 100) and the N-shot tables of the appendix (Hits@1
// only). Keyed by shots; 0 means not published.
var (
	paperNewHits1  = map[int]float64{3: 0.832, 10: 0.780, 20: 0.732, 50: 0.624, 100: 0.649}
	paperSeenHits1 = map[int]float64{3: 0.236, 10: 0.396, 20: 0.400, 50: 0.500, 100: 0.483}
	paperHits10    = map[string]float64{SubsetNew: 0.772, SubsetSeen: 0.664} // N = 100
)

// writePaperTable puts the paper-protocol arms beside ICICLE's published NQ320K numbers and BM25's
// (Table 1: BM25 D_train 0.386 / 0.617, D_new 0.297 / 0.471).
func writePaperTable(w io.Writer, arms []Arm) {
	fmt.Fprintln(w, "| condition | N | queries | Hits@1 | paper Hits@1 | Hits@10 | paper Hits@10 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, a := range arms {
		for _, c := range []struct {
			sub, name string
			h1        map[int]float64
		}{{SubsetNew, "D_new, gold in context (ctx)", paperNewHits1}, {SubsetSeen, "D_train, all-noise", paperSeenHits1}} {
			s := a.Summaries[c.sub]
			if s.N == 0 {
				continue
			}
			h10 := "–"
			if a.Shots == 100 {
				h10 = fmt.Sprintf("%.3f", paperHits10[c.sub])
			}
			h1 := "–"
			if v, ok := c.h1[a.Shots]; ok {
				h1 = fmt.Sprintf("%.3f", v)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %.3f | %s | %.3f | %s |\n", c.name, a.Shots, s.N, s.Hits1, h1, s.Hits10, h10)
		}
	}
	fmt.Fprintln(w, "\nPaper: ICICLE on NQ320K, Table 1 (N = 100) and the appendix's N-shot tables; BM25 over D_train ∪ D_new there: D_train 0.386 / 0.617, D_new 0.297 / 0.471.")
}
