package main

import (
	"context"
	"io"
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
		})
	}
}
