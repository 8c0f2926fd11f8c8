package inference

import (
	"errors"
	"fmt"
	"slices"
)

// NodeID names a node of a Trie. The root is 0.
type NodeID uint32

// Trie is an immutable prefix tree over docid token sequences, stored as flat arrays so that a seen
// corpus of 100K+ titles costs a few bytes per token and builds without per-node allocations.
// Every sequence ends with the end token, so a docid is complete exactly when its end edge is taken;
// the node reached by that edge is a leaf that names the docid.
type Trie struct {
	// first[n]..first[n+1] is the range of n's edges in tokens/targets, sorted by token.
	first   []uint32
	tokens  []int32
	targets []NodeID
	doc     []int32 // doc[n] is the docid index of leaf n, -1 elsewhere
	depth   int     // the longest sequence, in tokens
}

// ErrDuplicateDocID means two docids tokenise to the same sequence (they are the same title).
var ErrDuplicateDocID = errors.New("duplicate docid")

// BuildTrie builds a trie from seqs; seqs[i] is docid i's token sequence ending with end. It fails on
// an empty sequence, a sequence not ending with end or containing it earlier, and duplicates.
func BuildTrie(seqs [][]int64, end int64) (*Trie, error) {
	// Build a pointer-free intermediate: children lists per node, then flatten breadth first.
	type edge struct {
		tok   int32
		child uint32
	}
	kids := [][]edge{nil}
	doc := []int32{-1}
	index := make(map[uint64]uint32) // (parent<<32 | token) -> child, so the root's many edges cost O(1)
	depth := 0
	for i, seq := range seqs {
		if len(seq) == 0 || seq[len(seq)-1] != end {
			return nil, fmt.Errorf("build trie: docid %d: sequence must end with the end token %d", i, end)
		}
		n := uint32(0)
		for j, t := range seq {
			if t == end && j != len(seq)-1 {
				return nil, fmt.Errorf("build trie: docid %d: end token %d inside the sequence", i, end)
			}
			key := uint64(n)<<32 | uint64(uint32(t))
			child, ok := index[key]
			if !ok {
				child = uint32(len(kids))
				kids = append(kids, nil)
				doc = append(doc, -1)
				kids[n] = append(kids[n], edge{tok: int32(t), child: child})
				index[key] = child
			}
			n = child
		}
		if doc[n] >= 0 {
			return nil, fmt.Errorf("build trie: docids %d and %d: %w", doc[n], i, ErrDuplicateDocID)
		}
		doc[n] = int32(i)
		depth = max(depth, len(seq))
	}
	t := &Trie{first: make([]uint32, 1, len(kids)+1), doc: make([]int32, 0, len(kids)), depth: depth}
	// Renumber breadth first so that a node's edges are contiguous and children follow their parents.
	order := []uint32{0}
	newID := make([]NodeID, len(kids))
	for i := 0; i < len(order); i++ {
		old := order[i]
		es := kids[old]
		slices.SortFunc(es, func(a, b edge) int { return int(a.tok) - int(b.tok) })
		for _, e := range es {
			newID[e.child] = NodeID(len(order))
			order = append(order, e.child)
		}
	}
	for _, old := range order {
		for _, e := range kids[old] {
			t.tokens = append(t.tokens, e.tok)
			t.targets = append(t.targets, newID[e.child])
		}
		t.first = append(t.first, uint32(len(t.tokens)))
		t.doc = append(t.doc, doc[old])
	}
	return t, nil
}

// Len returns the number of nodes.
func (t *Trie) Len() int { return len(t.doc) }

// Depth returns the length of the longest docid sequence, end token included.
func (t *Trie) Depth() int { return t.depth }

// Children returns n's edge tokens (ascending) and the nodes they lead to. The slices alias the trie.
func (t *Trie) Children(n NodeID) ([]int32, []NodeID) {
	a, b := t.first[n], t.first[n+1]
	return t.tokens[a:b], t.targets[a:b]
}

// Child returns the node reached from n by tok.
func (t *Trie) Child(n NodeID, tok int64) (NodeID, bool) {
	toks, targets := t.Children(n)
	i, ok := slices.BinarySearch(toks, int32(tok))
	if !ok {
		return 0, false
	}
	return targets[i], true
}

// Doc returns the index of the docid whose sequence ends at leaf n, or -1 when n is not a leaf.
func (t *Trie) Doc(n NodeID) int { return int(t.doc[n]) }

// SizeBytes estimates the trie's memory footprint.
func (t *Trie) SizeBytes() int {
	return 4*len(t.first) + 4*len(t.tokens) + 4*len(t.targets) + 4*len(t.doc)
}
