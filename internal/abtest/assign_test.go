package abtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArmForIsStable(t *testing.T) {
	for i := range 200 {
		key := fmt.Sprintf("user-%d", i)
		arm := armFor(digest("icicle", key), 0.3)
		for range 5 {
			require.Equal(t, arm, armFor(digest("icicle", key), 0.3), "key %s", key)
		}
	}
}

func TestArmForHonoursTheSplit(t *testing.T) {
	const n = 20000
	for _, split := range []float64{0, 0.1, 0.5, 0.9, 1} {
		t.Run(fmt.Sprint(split), func(t *testing.T) {
			b := 0
			for i := range n {
				if armFor(digest("icicle", fmt.Sprintf("session-%d", i)), split) == ArmB {
					b++
				}
			}
			// Binomial: 4 standard deviations is at most 0.014 at n = 20000.
			tol := 4 * math.Sqrt(split*(1-split)/n)
			require.InDelta(t, split, float64(b)/n, tol+1e-12, "%d of %d keys in arm B", b, n)
		})
	}
}

func TestArmForRaisingTheSplitOnlyMovesKeysToB(t *testing.T) {
	for i := range 5000 {
		d := digest("icicle", fmt.Sprint(i))
		if armFor(d, 0.2) == ArmB {
			require.Equal(t, ArmB, armFor(d, 0.5), "key %d left arm B when the split grew", i)
		}
	}
}

func TestExperimentRedrawsArms(t *testing.T) {
	moved := 0
	for i := range 2000 {
		key := fmt.Sprint(i)
		if armFor(digest("exp-1", key), 0.5) != armFor(digest("exp-2", key), 0.5) {
			moved++
		}
	}
	require.InDelta(t, 1000, moved, 150, "a new experiment name re-draws about half the keys")
}

func TestDigestSeparatesParts(t *testing.T) {
	require.NotEqual(t, digest("ab", "c"), digest("a", "bc"))
	require.NotEqual(t, digest("a", "b", "c"), digest("a", "bc"))
}

func TestAssign(t *testing.T) {
	split := Experiment{Name: "exp", Mode: ModeSplit, SplitB: 0.5}
	a := split.Assign("user-1", "req-1")
	require.Equal(t, KeyFromHeader, a.KeySource)
	require.Equal(t, "exp", a.Experiment)
	require.Equal(t, armFor(digest("exp", "user-1"), 0.5), a.Arm)
	require.Equal(t, a, split.Assign("user-1", "req-2"), "the key, not the request, picks the arm")
	require.Zero(t, a.Seed, "no coin in split mode")
	d := digest("exp", "user-1")
	require.Equal(t, fmt.Sprintf("%x", d[:16]), a.KeyHash())

	byRequest := split.Assign("", "req-9")
	require.Equal(t, KeyFromRequestID, byRequest.KeySource)
	require.Equal(t, armFor(digest("exp", "req-9"), 0.5), byRequest.Arm)

	inter := Experiment{Name: "exp", Mode: ModeInterleave}
	b := inter.Assign("user-1", "req-1")
	require.Equal(t, ArmInterleaved, b.Arm)
	require.Equal(t, b, inter.Assign("user-1", "req-1"), "the same request interleaves the same way")
	require.NotEqual(t, b.Seed, inter.Assign("user-1", "req-2").Seed, "another request, another coin")
	require.Equal(t, a.KeyHash(), b.KeyHash(), "the pseudonym is the key's")
}
