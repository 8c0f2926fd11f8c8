package eval

import "math"

// Bin is one equal-width confidence bin of a reliability diagram: its bounds, how many predictions fell
// in it, their mean confidence and the share of them that were correct.
type Bin struct {
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	N    int     `json:"n"`
	Conf float64 `json:"conf"`
	Acc  float64 `json:"acc"`
}

// Reliability puts each (confidence, correct) pair into one of bins equal-width bins over [0, 1] (a
// confidence on an inner edge goes to the upper bin, 1 to the last) and returns every bin, empty ones
// included. Confidences outside [0, 1] are clamped.
func Reliability(conf []float64, correct []bool, bins int) []Bin {
	bins = max(bins, 1)
	out := make([]Bin, bins)
	for m := range out {
		out[m].Lo, out[m].Hi = float64(m)/float64(bins), float64(m+1)/float64(bins)
	}
	for i, c := range conf {
		c = min(max(c, 0), 1)
		// The epsilon keeps 0.3 in [0.3, 0.4) although 0.3*10 is 2.9999999999999996 in binary.
		m := min(int(math.Floor(c*float64(bins)+1e-9)), bins-1)
		out[m].N++
		out[m].Conf += c
		if correct[i] {
			out[m].Acc++
		}
	}
	for m := range out {
		if n := float64(out[m].N); n > 0 {
			out[m].Conf /= n
			out[m].Acc /= n
		}
	}
	return out
}

// ECE is the expected calibration error of binned predictions: sum over bins of |B_m|/N times
// |acc(B_m) - conf(B_m)|. It is NaN when the bins are empty.
func ECE(bins []Bin) float64 {
	total := 0
	for _, b := range bins {
		total += b.N
	}
	if total == 0 {
		return math.NaN()
	}
	var e float64
	for _, b := range bins {
		e += float64(b.N) / float64(total) * math.Abs(b.Acc-b.Conf)
	}
	return e
}

// RouteConfidence is one instance of the paper's routing ECE (Appendix H): the predicted mode is "copy"
// when pCopy >= 0.5, the true mode is "copy" when the relevant document is in the context, the
// confidence is max(pCopy, 1-pCopy) and the prediction is correct when the modes agree.
func RouteConfidence(pCopy float64, goldInContext bool) (conf float64, correct bool) {
	return max(pCopy, 1-pCopy), (pCopy >= 0.5) == goldInContext
}

// TopConfidence is one instance of the top-1 ECE: the confidence is the router probability of the route
// the top-1 result took (pCopy after [COPY], 1-pCopy for a parametric answer) and the prediction is
// correct when the top-1 result is relevant. valid is false for a top-1 the model did not route (a BM25
// fallback or no result).
func TopConfidence(pCopy float64, route string, hit1 bool) (conf float64, correct, valid bool) {
	switch route {
	case RouteCopy:
		return pCopy, hit1, true
	case RouteParametric:
		return 1 - pCopy, hit1, true
	}
	return 0, false, false
}
