package adapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bulkNode answers bulk requests as a node does, item by item, from what each action is: every action is
// created, except that shed(id, sends) says which sends of an action it refuses for load (429). It keeps
// the size of every request and how many times it saw each _id. short answers each request with one item
// fewer than it has actions.
type bulkNode struct {
	shed  func(id string, sends int) bool
	short bool

	mu    sync.Mutex
	sizes []int
	sends map[string]int
}

func (n *bulkNode) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var items []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var meta map[string]struct {
			ID string `json:"_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &meta); err != nil {
			return nil, err
		}
		sc.Scan() // the source
		for op, m := range meta {
			n.mu.Lock()
			n.sends[m.ID]++
			shed := n.shed != nil && n.shed(m.ID, n.sends[m.ID])
			n.mu.Unlock()
			item := fmt.Sprintf(`{%q:{"_id":%q,"status":201,"result":"created"}}`, op, m.ID)
			if shed {
				item = fmt.Sprintf(`{%q:{"_id":%q,"status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}}`, op, m.ID)
			}
			items = append(items, item)
		}
	}
	n.mu.Lock()
	n.sizes = append(n.sizes, len(body))
	n.mu.Unlock()
	if n.short {
		items = items[:len(items)-1]
	}
	var out bytes.Buffer
	out.WriteString(`{"errors":true,"took":1,"items":[`)
	for k, it := range items {
		if k > 0 {
			out.WriteByte(',')
		}
		out.WriteString(it)
	}
	out.WriteString(`]}`)
	return &http.Response{StatusCode: 200, Status: "200 OK", Request: req, Body: io.NopCloser(&out),
		Header: http.Header{"Content-Type": {"application/json"}, "X-Elastic-Product": {"Elasticsearch"}}}, nil
}

func newBulkNodeAdapter(t *testing.T, n *bulkNode) *Adapter {
	t.Helper()
	n.sends = map[string]int{}
	a, err := New(Options{Addresses: []string{"http://es.test:9200"}, Transport: n}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	a.backoff = func(int) time.Duration { return 0 }
	return a
}

// TestBulkWriterSettlesEachActionOnce: actions are sent in requests no larger than flushBytes, on several
// workers at once; those shed for load are sent again in later rounds; each is settled exactly once, with
// the number of requests that carried it, and those shed at every attempt fail after MaxRetries resends.
func TestBulkWriterSettlesEachActionOnce(t *testing.T) {
	const n, flushBytes = 300, 2000
	node := &bulkNode{shed: func(id string, sends int) bool {
		k, _ := strconv.Atoi(id)
		switch {
		case k%50 == 0:
			return true // at every attempt
		case k%7 == 0:
			return sends <= 2
		case k%3 == 0:
			return sends == 1
		}
		return false
	}}
	a := newBulkNodeAdapter(t, node)
	var (
		mu      sync.Mutex
		results = map[string][]bulkResult{}
		flushes int
	)
	w := a.newBulkWriter(t.Context(), bulkOptions{workers: 3, flushBytes: flushBytes, onFlush: func() {
		mu.Lock()
		defer mu.Unlock()
		flushes++
	}})
	for k := range n {
		id := strconv.Itoa(k)
		act := bulkAction{op: "index", id: id, source: []byte(`{"docid":"` + id + `","text":"some text to fill the request"}`)}
		require.NoError(t, w.add(t.Context(), act, func(r bulkResult) {
			mu.Lock()
			defer mu.Unlock()
			results[id] = append(results[id], r)
		}))
	}
	require.NoError(t, w.close(t.Context(), nil))
	require.NoError(t, w.err())

	require.Len(t, results, n, "every action settled")
	for k := range n {
		id := strconv.Itoa(k)
		require.Len(t, results[id], 1, "action %s settled once", id)
		r := results[id][0]
		switch {
		case k%50 == 0:
			require.True(t, r.failed(), id)
			require.True(t, r.retryable(), id)
			require.Equal(t, a.retries+1, r.sends, id)
			require.Equal(t, "es_rejected_execution_exception: queue full (sent 4 times)", r.reason(), id)
		case k%7 == 0:
			require.False(t, r.failed(), id)
			require.Equal(t, 3, r.sends, id)
		case k%3 == 0:
			require.False(t, r.failed(), id)
			require.Equal(t, 2, r.sends, id)
		default:
			require.False(t, r.failed(), id)
			require.Equal(t, 1, r.sends, id)
			require.Equal(t, "created", r.result, id)
		}
		require.Equal(t, r.sends, node.sends[id], "the node saw action %s as often as it was sent", id)
	}
	require.Equal(t, len(node.sizes), w.sent())
	require.Equal(t, len(node.sizes), flushes, "onFlush after every request")
	require.Greater(t, len(node.sizes), n*60/flushBytes, "the first round alone took several requests")
	for _, size := range node.sizes {
		require.Less(t, size, flushBytes)
	}
}

// TestBulkAllShortAnswer: an answer with fewer items than the request has actions is an error of the
// writing as a whole, and the action without an item is settled as not answered.
func TestBulkAllShortAnswer(t *testing.T) {
	a := newBulkNodeAdapter(t, &bulkNode{short: true})
	actions := []bulkAction{
		{op: "update", id: "a", source: []byte(`{"doc":{"seen":true}}`)},
		{op: "update", id: "b", source: []byte(`{"doc":{"seen":true}}`)},
	}
	results, err := a.bulkAll(t.Context(), "", actions)
	require.EqualError(t, err, "bulk request answered 1 items for 2 actions")
	require.False(t, results[0].failed())
	require.ErrorIs(t, results[1].err, errNoResult)
}
