package eval

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
)

// PaperContext draws one query's context under the paper's protocol (Section 4, "Evaluation Protocol"):
// n indices into a pool of poolSize documents (D_new). With gold >= 0 (a new-document query) the result
// is gold at a uniformly random position among n-1 distinct random others; with gold < 0 (a seen-document
// query, "all-noise") n distinct random indices. exclude (may be nil) names indices never drawn as noise:
// the query's relevant documents. Fewer than n come back only when the pool runs out.
//
// The draw depends only on seed and qid, never on evaluation order or concurrency, and the noise of a
// smaller n is a prefix of a larger n's (the gold's position is drawn after the noise).
func PaperContext(qid string, seed uint64, n, poolSize, gold int, exclude func(i int) bool) []int {
	h := fnv.New64a()
	h.Write([]byte(qid))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	noise := n
	if gold >= 0 {
		noise = n - 1
	}
	// A partial Fisher-Yates shuffle over a sparse permutation: draws without replacement in O(n).
	swapped := map[int]int{}
	at := func(i int) int {
		if v, ok := swapped[i]; ok {
			return v
		}
		return i
	}
	out := make([]int, 0, n)
	for k := 0; k < poolSize && len(out) < noise; k++ {
		j := k + rng.IntN(poolSize-k)
		vk, vj := at(k), at(j)
		swapped[k], swapped[j] = vj, vk
		if vj != gold && (exclude == nil || !exclude(vj)) {
			out = append(out, vj)
		}
	}
	if gold >= 0 {
		out = slices.Insert(out, rng.IntN(len(out)+1), gold)
	}
	return out
}
