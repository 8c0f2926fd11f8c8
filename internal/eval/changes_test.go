package eval

import "testing"

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
