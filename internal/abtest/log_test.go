package abtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/icicle-search/sidecar/rank"
)

func testImpression(i int) Impression {
	return Impression{Time: time.Unix(1700000000, 0), RequestID: fmt.Sprintf("req-%04d", i), Arm: ArmB, Mode: rank.ModeReranked,
		Shown: []Shown{{Rank: 1, DocID: "Beta", ID: "2", Provenance: rank.FromCopy}}}
}

// readImpressions reads every line of the JSONL files, each a valid Impression.
func readImpressions(t *testing.T, paths ...string) []Impression {
	t.Helper()
	var out []Impression
	for _, p := range paths {
		f, err := os.Open(p)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var imp Impression
			require.NoError(t, json.Unmarshal(sc.Bytes(), &imp), "line %q of %s", sc.Text(), p)
			out = append(out, imp)
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	return out
}

func TestImpressionLogConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "impressions.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"request_id":"before"}`+"\n"), 0o600))
	l, err := OpenImpressionLog(path, LogOptions{Buffer: 2000})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Go(func() {
			for i := range 50 {
				require.True(t, l.Log(testImpression(g*50+i)))
			}
		})
	}
	wg.Wait()
	require.NoError(t, l.Close(), "Close drains the queue")
	require.NoError(t, l.Close(), "idempotent")
	require.False(t, l.Log(testImpression(0)), "closed")

	got := readImpressions(t, path)
	require.Len(t, got, 1001, "appended after the existing line")
	require.Equal(t, "before", got[0].RequestID)
	ids := map[string]bool{}
	for _, imp := range got[1:] {
		ids[imp.RequestID] = true
	}
	require.Len(t, ids, 1000, "every line whole and once")
	require.Equal(t, LogCounts{Written: 1000, DroppedClosed: 1}, l.Counts())
}

func TestImpressionLogDropsWhenFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "impressions.jsonl")
	// The writer is not running yet: a Log that waited for it would hang here.
	l, err := openImpressionLog(path, LogOptions{Buffer: 2})
	require.NoError(t, err)
	require.True(t, l.Log(testImpression(1)))
	require.True(t, l.Log(testImpression(2)))
	require.False(t, l.Log(testImpression(3)), "a full queue drops")
	require.False(t, l.Log(testImpression(4)))
	require.Equal(t, uint64(2), l.Counts().DroppedFull)
	go l.run()
	require.NoError(t, l.Close())
	got := readImpressions(t, path)
	require.Len(t, got, 2)
	require.Equal(t, "req-0001", got[0].RequestID)
	require.Equal(t, LogCounts{Written: 2, DroppedFull: 2}, l.Counts())
}

func TestImpressionLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "impressions.jsonl")
	line, err := json.Marshal(testImpression(0))
	require.NoError(t, err)
	maxBytes := int64(3*(len(line)+1) + 10) // three lines fit, a fourth does not
	l, err := OpenImpressionLog(path, LogOptions{MaxBytes: maxBytes})
	require.NoError(t, err)
	for i := range 10 {
		require.True(t, l.Log(testImpression(i)))
		require.Eventually(t, func() bool { return l.Counts().Written == uint64(i+1) }, 5*time.Second, time.Millisecond)
	}
	require.NoError(t, l.Close())
	rotated, err := filepath.Glob(path + ".*")
	require.NoError(t, err)
	require.Len(t, rotated, 3, "10 lines, 3 per file: 3 rotated files and the live one")
	for _, p := range append(rotated, path) {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Size(), maxBytes, p)
	}
	all := readImpressions(t, append(rotated, path)...) // rotated names sort by time
	require.Len(t, all, 10)
	for i, imp := range all {
		require.Equal(t, fmt.Sprintf("req-%04d", i), imp.RequestID, "in order across files")
	}
}

func TestImpressionLogWriteError(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	l, err := OpenImpressionLog("/dev/full", LogOptions{})
	require.NoError(t, err)
	require.True(t, l.Log(testImpression(1)), "queued; the write fails later")
	err = l.Close()
	require.ErrorContains(t, err, "write impression log")
	require.Equal(t, uint64(1), l.Counts().Failed)
}

func TestImpressionLogOpenError(t *testing.T) {
	_, err := OpenImpressionLog(filepath.Join(t.TempDir(), "missing", "impressions.jsonl"), LogOptions{})
	require.ErrorContains(t, err, "open impression log")
}

func TestClickLogDropsWhenFull(t *testing.T) {
	w, err := openJSONLog("click log", filepath.Join(t.TempDir(), "clicks.jsonl"), LogOptions{Buffer: 1}) // the writer is not running yet
	require.NoError(t, err)
	l := &ClickLog{w: w}
	c := Click{Time: time.Unix(1700000000, 0), RequestID: "r1", DocID: "Beta", Position: 1, ClickRequestID: "c1"}
	require.True(t, l.Log(c))
	require.False(t, l.Log(c), "a full queue drops")
	go w.run()
	require.NoError(t, l.Close())
	require.False(t, l.Log(c), "closed")
	require.Equal(t, LogCounts{Written: 1, DroppedFull: 1, DroppedClosed: 1}, l.Counts())
}
