package main

import (
	"context"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSlice(t *testing.T) {
	for _, tt := range []struct {
		in          string
		slice, of   int
		errContains string
	}{
		{"", 0, 0, ""},
		{"0/1", 0, 1, ""},
		{"2/3", 2, 3, ""},
		{"3/3", 0, 0, "want 0 <= I < N"},
		{"-1/3", 0, 0, "want 0 <= I < N"},
		{"0/0", 0, 0, "want 0 <= I < N"},
		{"1", 0, 0, "want I/N"},
		{"a/2", 0, 0, "want I/N"},
		{"1/b", 0, 0, "want I/N"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			slice, of, err := parseSlice(tt.in)
			if tt.errContains != "" {
				require.ErrorContains(t, err, tt.errContains)
				require.ErrorContains(t, err, "-slice")
				return
			}
			require.NoError(t, err)
			require.Equal(t, [2]int{tt.slice, tt.of}, [2]int{slice, of})
		})
	}
}

func TestEncoderThreadsRefusesNegative(t *testing.T) {
	for name, run := range map[string]func(context.Context, []string, io.Writer) error{
		"enrich": enrich, "vectors": vectors,
		"ingest": func(ctx context.Context, args []string, _ io.Writer) error { return ingest(ctx, args) },
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), []string{"-threads", "-1"}, io.Discard)
			require.ErrorContains(t, err, "-threads -1: want 0 (one per core) or more")
			err = run(context.Background(), []string{"-runs", "-1"}, io.Discard)
			require.ErrorContains(t, err, "-runs -1: want 0 (the cores / -threads) or more")
		})
	}
}

func TestPassageRunsFromFlags(t *testing.T) {
	cores := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		threads, runs, want int
	}{
		{1, 0, cores},     // the default: a passage a core
		{0, 0, 1},         // every core on one passage
		{cores, 0, 1},     // the same, named
		{1, 3, 3},         // as asked
		{2 * cores, 0, 1}, // more threads than cores: one at a time
		{max(1, cores/2), 0, cores / max(1, cores/2)}, // half the cores a passage
	} {
		f := encoderFlags{threads: &c.threads, runs: &c.runs}
		require.Equal(t, c.want, f.passageRuns(), "threads %d runs %d", c.threads, c.runs)
	}
}
