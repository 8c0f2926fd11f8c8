// Package gate decides per query whether the model's top result may replace BM25's: a logistic model over
// a few features of the model's answer and the BM25 ranking, and a threshold chosen by cross-validation on
// labelled queries (Fit). A Gate is stored beside the model as gate.json (inference/MODEL_FORMAT.md), so a
// swapped model brings its own. The zero Gate and Default never fire: the BM25 order is kept.
package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// FileName is the gate's file in a model directory.
const FileName = "gate.json"

// Version is the gate.json format version this package writes. It reads version 1 too (the nine features
// before bm25_top_in_context), as a gate whose weight for the new feature is 0.
const Version = 2

// Feature names, in the order of Features.Vector.
var FeatureNames = []string{
	"p_copy", "top_score", "score_margin", "top_is_bm25_top", "log1p_bm25_rank", "not_in_bm25",
	"bm25_margin", "route_copy", "parametric_in_bm25", "bm25_top_in_context",
}

// Features describe one query's model answer against the BM25 baseline. They are computed by the
// server (plugin) and by nothing else, so calibration and serving share one definition.
type Features struct {
	// PCopy is the router probability p([COPY]).
	PCopy float64 `json:"p_copy"`
	// TopScore is the top beam's score (a log-probability, <= 0).
	TopScore float64 `json:"top_score"`
	// ScoreMargin is the top beam's score minus the second's (0 with one beam).
	ScoreMargin float64 `json:"score_margin"`
	// TopIsBM25Top is 1 when the model's top is BM25's top.
	TopIsBM25Top float64 `json:"top_is_bm25_top"`
	// Log1pBM25Rank is log(1 + rank) of the model's top in the BM25 list (rank from 1), 0 when absent.
	Log1pBM25Rank float64 `json:"log1p_bm25_rank"`
	// NotInBM25 is 1 when the model's top is not in the BM25 list.
	NotInBM25 float64 `json:"not_in_bm25"`
	// BM25Margin is BM25's (s1 - s2) / s1 over its first two scores (0 when fewer or s1 <= 0).
	BM25Margin float64 `json:"bm25_margin"`
	// RouteCopy is 1 when the top beam was copied from the context, 0 when generated (parametric).
	RouteCopy float64 `json:"route_copy"`
	// ParametricInBM25 is 1 when some parametric beam is in the BM25 list.
	ParametricInBM25 float64 `json:"parametric_in_bm25"`
	// BM25TopInContext is 1 when BM25's top document was among the prompt's candidates, so the model could
	// copy it. 0 when it was not: for a model without a memory route, its answer cannot be BM25's top (a
	// document it was trained on, for example) and so is a different guess, not a correction.
	BM25TopInContext float64 `json:"bm25_top_in_context"`
}

// Vector is the features in FeatureNames order.
func (f Features) Vector() []float64 {
	return []float64{f.PCopy, f.TopScore, f.ScoreMargin, f.TopIsBM25Top, f.Log1pBM25Rank, f.NotInBM25,
		f.BM25Margin, f.RouteCopy, f.ParametricInBM25, f.BM25TopInContext}
}

// Beam is what Compute needs of one model beam.
type Beam struct {
	DocID string
	Copy  bool
	Score float64
}

// Compute derives the features from the model's beams (best first), p([COPY]), the BM25 baseline's
// docids and scores (best first) and the docids of the prompt's candidates.
func Compute(pCopy float64, beams []Beam, bm25 []string, bm25Scores []float64, inContext []string) Features {
	f := Features{PCopy: pCopy, NotInBM25: 1}
	if len(bm25) > 0 && slices.Contains(inContext, bm25[0]) {
		f.BM25TopInContext = 1
	}
	rank := make(map[string]int, len(bm25))
	for i, d := range bm25 {
		if _, ok := rank[d]; !ok {
			rank[d] = i + 1
		}
	}
	if len(bm25Scores) >= 2 && bm25Scores[0] > 0 {
		f.BM25Margin = (bm25Scores[0] - bm25Scores[1]) / bm25Scores[0]
	}
	if len(beams) == 0 {
		return f
	}
	top := beams[0]
	f.TopScore = top.Score
	if len(beams) > 1 {
		f.ScoreMargin = top.Score - beams[1].Score
	}
	if r, ok := rank[top.DocID]; ok {
		f.NotInBM25, f.Log1pBM25Rank = 0, math.Log1p(float64(r))
		if r == 1 {
			f.TopIsBM25Top = 1
		}
	}
	if top.Copy {
		f.RouteCopy = 1
	}
	for _, b := range beams {
		if _, ok := rank[b.DocID]; ok && !b.Copy {
			f.ParametricInBM25 = 1
			break
		}
	}
	return f
}

// Gate is a fitted gate: P(promote is right) = sigmoid(Bias + sum W[i] * (x[i] - Mean[i]) / Scale[i]);
// the model's top is promoted when P >= Threshold, never when Never is set.
type Gate struct {
	Version  int       `json:"version"`
	Features []string  `json:"features"`
	Mean     []float64 `json:"mean"`
	Scale    []float64 `json:"scale"`
	Weights  []float64 `json:"weights"`
	Bias     float64   `json:"bias"`
	// Threshold is the least P that promotes the model's top.
	Threshold float64 `json:"threshold"`
	// Never is set when no threshold gained on the calibration data: the model is not trusted.
	Never bool `json:"never"`
	// Fit says what the gate was fitted on.
	Fit *FitInfo `json:"fit,omitempty"`
	// Source says where the gate came from (the file, or the default); not stored.
	Source string `json:"-"`
}

// FitInfo records the calibration of a gate.
type FitInfo struct {
	// Data names the labelled queries (files, split, subsets) and the index they were run against.
	Data    string    `json:"data"`
	Model   string    `json:"model,omitempty"`
	N       int       `json:"n"`
	Folds   int       `json:"folds"`
	Created time.Time `json:"created"`
	// Changes counts the queries where the model's top differs from BM25's (the only ones a gate decides).
	Changes int `json:"changes"`
	// Positives and Negatives count those where promoting is right (model right, BM25 wrong) and wrong
	// (BM25 right, model wrong).
	Positives int `json:"positives"`
	Negatives int `json:"negatives"`
	// CVRight and CVWrong count the held-out promotions of the nested cross-validation (the fit and the
	// threshold choice on k-1 folds, applied to the held-out one) that were right and wrong; CVGain is
	// CVRight - CVWrong, and FoldGains its value per held-out fold.
	CVRight   int   `json:"cv_right"`
	CVWrong   int   `json:"cv_wrong"`
	CVGain    int   `json:"cv_gain"`
	FoldGains []int `json:"fold_gains"`
	// Note is free text (why Never, for example).
	Note string `json:"note,omitempty"`
	// Serving records the sidecar's settings that shape the model's answer (`/v1/model`'s serving section:
	// experimental.scoring, experimental.route_by_first_stage, ...) when the calibration queries were answered: the
	// features were those settings' answers. Absent in gates fitted before it was recorded.
	Serving map[string]string `json:"serving,omitempty"`
}

// ServingMismatch lists, one per setting, where now differs from the settings the gate was fitted under
// ("experimental.scoring: fitted under vocab, now trie"), in the settings' order; none when they agree or the fit
// recorded none. A setting the fit did not record is not compared.
func (g *Gate) ServingMismatch(now map[string]string) []string {
	if g == nil || g.Fit == nil {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(g.Fit.Serving)) {
		if v, ok := now[k]; ok && v != g.Fit.Serving[k] {
			out = append(out, fmt.Sprintf("%s: fitted under %s, now %s", k, g.Fit.Serving[k], v))
		}
	}
	return out
}

// Unfitted returns a copy of g that never promotes, saying why in its source: a gate fitted under other
// settings than the sidecar's (ServingMismatch) describes answers the model no longer gives.
func (g *Gate) Unfitted(why []string) *Gate {
	c := *g
	c.Never = true
	c.Source = fmt.Sprintf("%s, not applied: fitted under other settings (%s)", g.Source, strings.Join(why, "; "))
	return &c
}

// Default is the gate of a model directory without gate.json: it never overrides the first stage.
func Default() *Gate {
	return &Gate{Version: Version, Features: FeatureNames, Never: true, Threshold: 1, Source: "default (no " + FileName + ": the first stage's order is kept)"}
}

// Decision is one query's verdict.
type Decision struct {
	// Promote is true when the model's top replaces BM25's at rank 1.
	Promote bool
	// P is the gate's probability that promoting is right.
	P float64
	// Reason says why, in a few words.
	Reason string
}

// Decide applies the gate to f.
func (g *Gate) Decide(f Features) Decision {
	switch {
	case g == nil || len(g.Weights) == 0:
		return Decision{Reason: "no gate: BM25 order kept"}
	case f.TopIsBM25Top == 1:
		return Decision{P: g.Prob(f), Reason: "model top is BM25 top"}
	}
	p := g.Prob(f)
	switch {
	case g.Never:
		return Decision{P: p, Reason: "gate never fires (the calibration found no gain)"}
	case p >= g.Threshold:
		return Decision{Promote: true, P: p, Reason: "evidence above threshold"}
	default:
		return Decision{P: p, Reason: "evidence below threshold"}
	}
}

// Prob is the logistic model's probability that promoting the model's top is right; 0 without weights.
func (g *Gate) Prob(f Features) float64 {
	if g == nil || len(g.Weights) == 0 {
		return 0
	}
	return sigmoid(g.score(f.Vector()))
}

func (g *Gate) score(x []float64) float64 {
	z := g.Bias
	for i, w := range g.Weights {
		z += w * (x[i] - g.Mean[i]) / g.Scale[i]
	}
	return z
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// Validate checks a gate read from a file.
func (g *Gate) Validate() error {
	var errs []error
	if g.Version != Version {
		errs = append(errs, fmt.Errorf("version: %d, this build reads %d (and 1, upgraded by Load)", g.Version, Version))
	}
	if len(g.Features) != len(FeatureNames) {
		errs = append(errs, fmt.Errorf("features: %d names, want %d %v", len(g.Features), len(FeatureNames), FeatureNames))
	} else {
		for i, n := range FeatureNames {
			if g.Features[i] != n {
				errs = append(errs, fmt.Errorf("features[%d]: %q, want %q", i, g.Features[i], n))
			}
		}
	}
	n := len(FeatureNames)
	if !g.Never || len(g.Weights) > 0 {
		for name, v := range map[string][]float64{"mean": g.Mean, "scale": g.Scale, "weights": g.Weights} {
			if len(v) != n {
				errs = append(errs, fmt.Errorf("%s: %d values, want %d", name, len(v), n))
			}
		}
		for i, s := range g.Scale {
			if !(s > 0) || math.IsInf(s, 0) {
				errs = append(errs, fmt.Errorf("scale[%d]: must be positive and finite, got %v", i, s))
			}
		}
	}
	if math.IsNaN(g.Threshold) || g.Threshold < 0 || g.Threshold > 1 {
		errs = append(errs, fmt.Errorf("threshold: must be within 0..1, got %v", g.Threshold))
	}
	return errors.Join(errs...)
}

// upgrade turns a version-1 gate (the first nine features) into the current version: the added feature gets
// weight 0, so its decisions are unchanged. Anything else is left for Validate to report.
func (g *Gate) upgrade() {
	v1 := FeatureNames[:9]
	if g.Version != 1 || !slices.Equal(g.Features, v1) {
		return
	}
	g.Version, g.Features = Version, FeatureNames
	if len(g.Weights) == len(v1) && len(g.Mean) == len(v1) && len(g.Scale) == len(v1) {
		g.Mean, g.Scale, g.Weights = append(g.Mean, 0), append(g.Scale, 1), append(g.Weights, 0)
	}
}

// Load reads dir/gate.json. A directory without one gets Default (and no error).
func Load(dir string) (*Gate, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", path, err)
	}
	var g Gate
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("gate %s: %w", path, err)
	}
	g.upgrade()
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("gate %s: %w", path, err)
	}
	g.Source = path
	return &g, nil
}

// Save writes g to dir/gate.json (through a temporary file, so a reader never sees half of it).
func (g *Gate) Save(dir string) (string, error) {
	b, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write gate: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write gate: %w", err)
	}
	return path, nil
}
