package gate

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// strong and weak are crafted model answers: a confident copy beam far ahead of the second, at BM25 rank
// 3; and a hesitant one, not in the BM25 list.
var (
	strong = Compute(0.95, []Beam{{"a", true, -0.05}, {"b", true, -4}}, []string{"x", "y", "a"}, []float64{10, 9.9, 9}, []string{"x", "a"})
	weak   = Compute(0.40, []Beam{{"c", true, -2.5}, {"d", true, -2.6}}, []string{"x", "y", "a"}, []float64{10, 3, 2}, []string{"x"})
)

// crafted draws n samples: strong answers are right where BM25 is wrong, weak ones wrong where BM25 is right.
func crafted(n int) []Sample {
	var ss []Sample
	for i := range n {
		if i%2 == 0 {
			ss = append(ss, Sample{Features: strong, ModelRight: true})
		} else {
			ss = append(ss, Sample{Features: weak, BM25Right: true})
		}
	}
	return ss
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name  string
		beams []Beam
		bm25  []string
		ctx   []string
		want  Features
	}{
		{"top in bm25 at 3", []Beam{{"a", true, -0.5}, {"b", false, -1}}, []string{"x", "b", "a"}, []string{"a", "x"},
			Features{BM25TopInContext: 1, PCopy: 0.7, TopScore: -0.5, ScoreMargin: 0.5, Log1pBM25Rank: math.Log1p(3), BM25Margin: 0.5, RouteCopy: 1, ParametricInBM25: 1}},
		{"agrees with bm25", []Beam{{"x", true, -0.1}}, []string{"x", "y"}, []string{"x"},
			Features{BM25TopInContext: 1, PCopy: 0.7, TopScore: -0.1, TopIsBM25Top: 1, Log1pBM25Rank: math.Log1p(1), BM25Margin: 0.5, RouteCopy: 1}},
		{"parametric not in list", []Beam{{"p", false, -0.2}}, []string{"x", "y"}, nil,
			Features{PCopy: 0.7, TopScore: -0.2, NotInBM25: 1, BM25Margin: 0.5}},
		{"bm25 top not a candidate", []Beam{{"c", true, -0.2}}, []string{"x", "c"}, []string{"c", "y"},
			Features{PCopy: 0.7, TopScore: -0.2, Log1pBM25Rank: math.Log1p(2), BM25Margin: 0.5, RouteCopy: 1}},
		{"no beams", nil, []string{"x", "y"}, []string{"x"}, Features{BM25TopInContext: 1, PCopy: 0.7, NotInBM25: 1, BM25Margin: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Compute(0.7, tt.beams, tt.bm25, []float64{10, 5}, tt.ctx); got != tt.want {
				t.Errorf("Compute = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	fitted, err := Fit(crafted(40), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fitted.Never {
		t.Fatalf("fit on data where strong evidence is always right: Never, want a threshold (fit %+v)", fitted.Fit)
	}
	agree := Compute(0.99, []Beam{{"x", true, -0.01}}, []string{"x", "y"}, []float64{10, 1}, nil)
	tests := []struct {
		name    string
		g       *Gate
		f       Features
		promote bool
	}{
		{"strong evidence moves the hit", fitted, strong, true},
		{"weak evidence keeps bm25", fitted, weak, false},
		{"absent evidence (no beams) keeps bm25", fitted, Compute(0, nil, []string{"x"}, []float64{1}, nil), false},
		{"model top is bm25 top: nothing to move", fitted, agree, false},
		{"default gate never fires", Default(), strong, false},
		{"nil gate never fires", nil, strong, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.g.Decide(tt.f)
			if d.Promote != tt.promote {
				t.Errorf("Decide = %+v, want promote %v", d, tt.promote)
			}
			if d.Reason == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestFitNeverWhenTheModelNeverHelps(t *testing.T) {
	tests := []struct {
		name string
		ss   []Sample
	}{
		{"model always wrong where it differs", func() []Sample {
			var ss []Sample
			for i := range 30 {
				f := strong
				if i%3 == 0 {
					f = weak
				}
				ss = append(ss, Sample{Features: f, BM25Right: i%2 == 0})
			}
			return ss
		}()},
		{"same features, right and wrong equally often", func() []Sample {
			var ss []Sample
			for i := range 40 {
				ss = append(ss, Sample{Features: strong, ModelRight: i%2 == 0, BM25Right: i%2 == 1})
			}
			return ss
		}()},
		{"model always agrees with bm25", func() []Sample {
			agree := Compute(0.9, []Beam{{"x", true, -0.1}}, []string{"x"}, []float64{1}, nil)
			return []Sample{{Features: agree, ModelRight: true, BM25Right: true}, {Features: agree}, {Features: agree}, {Features: agree}, {Features: agree}}
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Fit(tt.ss, FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !g.Never {
				t.Fatalf("gate fires (threshold %v, fit %+v); want never", g.Threshold, g.Fit)
			}
			if g.Decide(strong).Promote {
				t.Error("a Never gate promoted")
			}
			if g.Fit == nil || g.Fit.Note == "" {
				t.Errorf("fit record %+v: want a note saying why", g.Fit)
			}
		})
	}
}

func TestFitRecordsCrossValidation(t *testing.T) {
	g, err := Fit(crafted(50), FitOptions{Folds: 5, Info: FitInfo{Data: "crafted"}})
	if err != nil {
		t.Fatal(err)
	}
	fi := g.Fit
	if fi.N != 50 || fi.Folds != 5 || fi.Positives != 25 || fi.Negatives != 25 || fi.Data != "crafted" {
		t.Errorf("fit record %+v", fi)
	}
	if fi.CVGain != fi.CVRight-fi.CVWrong || fi.CVGain <= 0 || len(fi.FoldGains) != 5 {
		t.Errorf("cv: %+v", fi)
	}
	for i, fg := range fi.FoldGains {
		if fg < 0 {
			t.Errorf("fold %d lost %d", i, fg)
		}
	}
	if _, err := Fit(crafted(3), FitOptions{Folds: 5}); err == nil {
		t.Error("3 samples in 5 folds: no error")
	}
	if _, err := Fit(crafted(10), FitOptions{Folds: 1}); err == nil {
		t.Error("1 fold: no error")
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	g, err := Load(dir)
	if err != nil || !g.Never || !strings.HasPrefix(g.Source, "default") {
		t.Fatalf("Load of a directory without gate.json = %+v, %v; want the default", g, err)
	}
	fitted, err := Fit(crafted(40), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fitted.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Threshold != fitted.Threshold || back.Prob(strong) != fitted.Prob(strong) || back.Source != filepath.Join(dir, FileName) {
		t.Errorf("round trip: %+v, want %+v", back, fitted)
	}
	bad := map[string]string{
		`{"version": 3}`: "version",
		`{"version": 2, "features": ["p_copy"], "threshold": 0.5}`:                           "features",
		`{"version": 2, "features": ` + featuresJSON() + `, "weights": [1], "threshold": 2}`: "threshold",
		`{"version": 1, "features": ["p_copy"], "threshold": 0.5}`:                           "features",
		`{"version": 2`: "unexpected end",
	}
	for body, want := range bad {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want an error naming %q", body, err, want)
		}
	}
}

func featuresJSON() string { return `["` + strings.Join(FeatureNames, `", "`) + `"]` }

// TestLoadVersion1: a gate.json of version 1 (nine features) loads as the current version with weight 0 for
// bm25_top_in_context, deciding exactly as before.
func TestLoadVersion1(t *testing.T) {
	dir := t.TempDir()
	v1 := `{"version": 1, "features": ["` + strings.Join(FeatureNames[:9], `", "`) + `"],
	  "mean": [0,0,0,0,0,0,0,0,0], "scale": [1,1,1,1,1,1,1,1,1], "weights": [2,0,0,0,0,0,0,0,0], "bias": -1, "threshold": 0.5}`
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g.Version != Version || len(g.Weights) != len(FeatureNames) || g.Weights[9] != 0 {
		t.Fatalf("upgraded gate = %+v", g)
	}
	f := Features{PCopy: 1}
	on, off := f, f
	on.BM25TopInContext = 1
	if g.Prob(on) != g.Prob(off) || math.Abs(g.Prob(f)-1/(1+math.Exp(-1))) > 1e-12 {
		t.Errorf("Prob = %v / %v, want sigmoid(1) for both", g.Prob(on), g.Prob(off))
	}
}

func TestServingMismatch(t *testing.T) {
	g := &Gate{Version: Version, Threshold: 0.6, Source: "models/x/gate.json",
		Fit: &FitInfo{Serving: map[string]string{"experimental.scoring": "vocab", "experimental.route_by_first_stage": "true"}}}
	if why := g.ServingMismatch(map[string]string{"experimental.scoring": "vocab", "experimental.route_by_first_stage": "true", "decode.beam_width": "10"}); len(why) != 0 {
		t.Fatalf("the same settings, and one the fit did not record: %q", why)
	}
	why := g.ServingMismatch(map[string]string{"experimental.scoring": "trie", "experimental.route_by_first_stage": "false"})
	want := []string{"experimental.route_by_first_stage: fitted under true, now false", "experimental.scoring: fitted under vocab, now trie"}
	if !slices.Equal(why, want) {
		t.Fatalf("mismatch %q, want %q", why, want)
	}
	if why := (&Gate{}).ServingMismatch(map[string]string{"experimental.scoring": "trie"}); len(why) != 0 {
		t.Fatalf("a fit that recorded no settings is not compared: %q", why)
	}
	u := g.Unfitted(want)
	if !u.Never || g.Never {
		t.Fatalf("the copy never promotes (%v), the gate itself is left as it was (%v)", u.Never, g.Never)
	}
	if !strings.Contains(u.Source, "models/x/gate.json, not applied: fitted under other settings (experimental.route_by_first_stage: fitted under true, now false;") {
		t.Fatalf("source %q does not say why", u.Source)
	}
}
