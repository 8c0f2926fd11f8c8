// Package dataset reads labelled retrieval sets in the BEIR layout: queries (JSONL, .gz allowed) and qrels
// (TSV), split into the queries whose relevant document a reader was trained on (seen) and the others (new).
package dataset

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/icicle-search/sidecar/internal/eval"
)

// Labelled is one query of a set with its relevant documents and its subset (eval.SubsetSeen or SubsetNew).
type Labelled struct {
	ID, Text string
	Relevant map[string]bool
	Subset   string
}

// Open opens path, gunzipping a .gz file.
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// ReadJSONL decodes the first n lines of a JSON Lines file (gunzipped when its name ends in .gz) into T;
// n <= 0 reads every line.
func ReadJSONL[T any](path string, n int) ([]T, error) {
	rc, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	var out []T
	for line := 1; (n <= 0 || len(out) < n) && sc.Scan(); line++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// ReadLabelled reads the queries of split that have relevance labels, the first n whose relevant
// document is seen and the first n whose relevant documents are all new, in file order. A query with
// any seen relevant document is a seen-document query.
func ReadLabelled(path, split string, n int, qrels map[string]map[string]bool, seen map[string]bool) ([]Labelled, error) {
	rc, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	defer rc.Close()
	var out []Labelled
	count := map[string]int{}
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for line := 1; sc.Scan() && (count[eval.SubsetSeen] < n || count[eval.SubsetNew] < n); line++ {
		var q struct {
			Qid   string `json:"qid"`
			ID    string `json:"_id"`
			Query string `json:"query"`
			Text  string `json:"text"`
			Split string `json:"split"`
		}
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			return nil, fmt.Errorf("read queries: %s:%d: %w", path, line, err)
		}
		id, text := cmp.Or(q.Qid, q.ID), cmp.Or(q.Query, q.Text)
		if split != "" && q.Split != split || len(qrels[id]) == 0 || strings.TrimSpace(text) == "" {
			continue
		}
		sub := eval.SubsetNew
		for d := range qrels[id] {
			if seen[d] {
				sub = eval.SubsetSeen
			}
		}
		if count[sub] < n {
			count[sub]++
			out = append(out, Labelled{ID: id, Text: text, Relevant: qrels[id], Subset: sub})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read queries: %s: %w", path, err)
	}
	return out, nil
}

// ReadQrels reads a BEIR qrels TSV (qid, docid, relevance; an optional header) into the relevant docids
// of each query; relevance 0 is not relevant.
func ReadQrels(path string) (map[string]map[string]bool, error) {
	rc, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("read qrels: %w", err)
	}
	defer rc.Close()
	out := make(map[string]map[string]bool)
	sc := bufio.NewScanner(rc)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 3 || line == 1 && f[0] == "qid" || strings.TrimSpace(f[2]) == "0" {
			continue
		}
		if out[f[0]] == nil {
			out[f[0]] = make(map[string]bool)
		}
		out[f[0]][f[1]] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read qrels: %s: %w", path, err)
	}
	return out, nil
}
