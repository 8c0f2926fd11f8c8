package inference

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildTrie(t *testing.T) {
	seqs := [][]int64{{5, 6, 0}, {5, 7, 0}, {5, 6, 8, 0}, {9, 0}}
	tr, err := BuildTrie(seqs, 0)
	require.NoError(t, err)
	require.Equal(t, 4, tr.Depth())

	toks, _ := tr.Children(0)
	require.Equal(t, []int32{5, 9}, toks, "root edges sorted")

	walk := func(seq []int64) NodeID {
		t.Helper()
		n := NodeID(0)
		for _, tok := range seq {
			var ok bool
			n, ok = tr.Child(n, tok)
			require.True(t, ok, "token %d of %v", tok, seq)
		}
		return n
	}
	for i, s := range seqs {
		require.Equal(t, i, tr.Doc(walk(s)), "doc of %v", s)
	}
	// A docid that is a prefix of another branches between end and more tokens.
	toks, _ = tr.Children(walk([]int64{5, 6}))
	require.Equal(t, []int32{0, 8}, toks)
	require.Equal(t, -1, tr.Doc(walk([]int64{5, 6})))
	_, ok := tr.Child(0, 42)
	require.False(t, ok)
}

func TestBuildTrieErrors(t *testing.T) {
	tests := []struct {
		name string
		seqs [][]int64
		want string
	}{
		{"empty sequence", [][]int64{{}}, "must end with the end token"},
		{"no end", [][]int64{{3, 4}}, "must end with the end token"},
		{"end inside", [][]int64{{3, 0, 4, 0}}, "end token 0 inside"},
		{"duplicate", [][]int64{{3, 0}, {3, 0}}, "duplicate docid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildTrie(tc.seqs, 0)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := BuildTrie([][]int64{{3, 0}, {3, 0}}, 0)
	require.True(t, errors.Is(err, ErrDuplicateDocID))
}

func TestTrieEmpty(t *testing.T) {
	tr, err := BuildTrie(nil, 0)
	require.NoError(t, err)
	toks, _ := tr.Children(0)
	require.Empty(t, toks)
	require.Equal(t, 1, tr.Len())
}

// TestTrieChildrenFollowParents pins the numbering the copy route relies on (one backward pass over the
// nodes sees every child before its parent).
func TestTrieChildrenFollowParents(t *testing.T) {
	seqs, err := docidSeqs(fakeTokenizer{}, []string{"Bern", "Berlin", "Bergen", "Oslo", "B", "Lyon", "Lyonnais"}, fakeEnd)
	require.NoError(t, err)
	tr, err := BuildTrie(seqs, fakeEnd)
	require.NoError(t, err)
	for n := range tr.Len() {
		_, kids := tr.Children(NodeID(n))
		for _, k := range kids {
			require.Greater(t, int(k), n)
		}
	}
}
