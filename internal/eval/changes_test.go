package eval

import (
	"math"
	"testing"
)

func TestTopChanges(t *testing.T) {
	rel := map[string]bool{"g": true}
	o := func(id, sub string, ranked ...string) Outcome {
		return Outcome{QueryID: id, Subset: sub, Relevant: rel, Ranked: ranked}
	}
	a := Arm{Outcomes: []Outcome{o("1", SubsetNew, "x", "g"), o("2", SubsetNew, "g"), o("3", SubsetSeen, "x"), o("4", SubsetSeen, "g"),
		o("5", SubsetSeen, "x"), {QueryID: "6", Subset: SubsetNew, Err: "timeout"}}}
	b := Arm{Outcomes: []Outcome{o("1", SubsetNew, "g", "x"), o("2", SubsetNew, "y"), o("3", SubsetSeen, "y"), o("4", SubsetSeen, "g"),
		o("5", SubsetSeen, "x"), o("6", SubsetNew, "g")}}
	got := TopChanges(a, b)
	want := map[string]Changes{
		SubsetNew:  {Queries: 2, Changed: 2, Right: 1, Wrong: 1},
		SubsetSeen: {Queries: 3, Changed: 1},
		SubsetAll:  {Queries: 5, Changed: 3, Right: 1, Wrong: 1},
	}
	for sub, w := range want {
		if got[sub] != w {
			t.Errorf("%s: %+v, want %+v", sub, got[sub], w)
		}
	}
	if got[SubsetAll].Gain() != 0 {
		t.Errorf("gain %d", got[SubsetAll].Gain())
	}
}

func TestSignTest(t *testing.T) {
	near := func(want, got float64) bool { return math.Abs(want-got) < 1e-12 }
	// 8 right, 1 wrong: 2 x P(X <= 1 | n=9) = 2 x (1 + 9) / 512.
	if got := SignTest(8, 1); !near(20.0/512, got) {
		t.Errorf("SignTest(8, 1) = %v, want %v", got, 20.0/512)
	}
	if got := SignTest(1, 8); !near(20.0/512, got) {
		t.Errorf("SignTest(1, 8) = %v: two-sided, want %v", got, 20.0/512)
	}
	if SignTest(0, 0) != 1 || SignTest(3, 3) != 1 {
		t.Errorf("no change or an even split must give 1, got %v and %v", SignTest(0, 0), SignTest(3, 3))
	}
	if got := SignTest(400, 300); !(got > 0 && got < 0.001) {
		t.Errorf("SignTest(400, 300) = %v: large counts must stay finite and small", got)
	}
}
