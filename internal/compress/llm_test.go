package compress

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeLLM is a local OpenAI-compatible /v1/chat/completions endpoint. Each request is decoded into
// requests; reply answers it (status, body), by default with a completion whose content is "summary of
// <title line>".
type fakeLLM struct {
	*httptest.Server
	calls    atomic.Int32
	requests chan chatCall
	reply    func(n int32, req chatCall) (int, string)
}

type chatCall struct {
	Path   string
	Auth   string
	Body   map[string]any
	Parsed chatRequest
}

func newFakeLLM(t *testing.T, reply func(n int32, req chatCall) (int, string)) *fakeLLM {
	t.Helper()
	f := &fakeLLM{requests: make(chan chatCall, 100), reply: reply}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.calls.Add(1)
		raw, _ := io.ReadAll(r.Body)
		c := chatCall{Path: r.URL.Path, Auth: r.Header.Get("Authorization")}
		_ = json.Unmarshal(raw, &c.Body)
		_ = json.Unmarshal(raw, &c.Parsed)
		f.requests <- c
		status, body := http.StatusOK, completion("summary of "+titleLine(c.Parsed))
		if f.reply != nil {
			status, body = f.reply(n, c)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func completion(content string) string {
	b, _ := json.Marshal(map[string]any{"id": "x", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}}})
	return string(b)
}

func titleLine(r chatRequest) string {
	for _, m := range r.Messages {
		for line := range strings.SplitSeq(m.Content, "\n") {
			if t, ok := strings.CutPrefix(line, "Title: "); ok {
				return t
			}
		}
	}
	return ""
}

func newTestLLM(t *testing.T, url string, retries int) *LLM {
	t.Helper()
	l, err := NewLLM(LLMConfig{URL: url + "/v1", Model: "fake-14b", APIKey: "k-123", MaxRetries: retries,
		Backoff: time.Millisecond, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return l
}

func TestLLMRequestShape(t *testing.T) {
	f := newFakeLLM(t, nil)
	l := newTestLLM(t, f.URL, 0)
	got, err := l.Compress(t.Context(), "Roanoke Colony", "The Roanoke Colony was the first attempt ...")
	require.NoError(t, err)
	require.Equal(t, "summary of Roanoke Colony", got)

	c := <-f.requests
	require.Equal(t, "/v1/chat/completions", c.Path)
	require.Equal(t, "Bearer k-123", c.Auth)
	require.Equal(t, "fake-14b", c.Body["model"])
	require.Contains(t, c.Body, "temperature", "temperature 0 is sent, not omitted")
	require.Equal(t, 0.0, c.Body["temperature"])
	require.Equal(t, 256.0, c.Body["max_tokens"])
	p, _ := DefaultPrompt()
	require.Len(t, c.Parsed.Messages, 2)
	require.Equal(t, Message{Role: "system", Content: p.System}, c.Parsed.Messages[0])
	user := c.Parsed.Messages[1]
	require.Equal(t, "user", user.Role)
	require.Contains(t, user.Content, "Write ONE retrieval-oriented summary.")
	require.Contains(t, user.Content, "Title: Roanoke Colony\n")
	require.Contains(t, user.Content, "Source Document:\nThe Roanoke Colony was the first attempt ...\n")
	require.NotContains(t, user.Content, "{document}")
	require.True(t, strings.HasPrefix(l.ID(), "llm:fake-14b:"), l.ID())
}

func TestLLMRetries5xx(t *testing.T) {
	f := newFakeLLM(t, func(n int32, c chatCall) (int, string) {
		if n < 3 {
			return http.StatusServiceUnavailable, `{"error": "warming up"}`
		}
		return http.StatusOK, completion("  third time lucky \n")
	})
	got, err := newTestLLM(t, f.URL, 3).Compress(t.Context(), "T", "text")
	require.NoError(t, err)
	require.Equal(t, "third time lucky", got)
	require.EqualValues(t, 3, f.calls.Load())

	// Out of retries: the last status is reported.
	f2 := newFakeLLM(t, func(int32, chatCall) (int, string) { return http.StatusBadGateway, "upstream down" })
	_, err = newTestLLM(t, f2.URL, 2).Compress(t.Context(), "T", "text")
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadGateway, se.Code)
	require.EqualValues(t, 3, f2.calls.Load(), "1 attempt + 2 retries")
	require.Contains(t, err.Error(), "attempt 3 of 3")
}

func TestLLMNoRetryOn4xx(t *testing.T) {
	f := newFakeLLM(t, func(int32, chatCall) (int, string) { return http.StatusUnauthorized, `{"error":"bad key"}` })
	_, err := newTestLLM(t, f.URL, 3).Compress(t.Context(), "T", "text")
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusUnauthorized, se.Code)
	require.Contains(t, se.Body, "bad key")
	require.EqualValues(t, 1, f.calls.Load())
}

func TestLLMMalformedResponse(t *testing.T) {
	for _, tc := range []struct{ body, field, msg string }{
		{`not json`, "(body)", "not JSON"},
		{`[1, 2]`, "(body)", "want a JSON object, got an array"},
		{`{"id": "x"}`, "choices", "missing"},
		{`{"choices": {}}`, "choices", "want an array, got an object"},
		{`{"choices": []}`, "choices", "empty"},
		{`{"choices": [3]}`, "choices[0]", "want an object, got a number"},
		{`{"choices": [{"text": "legacy"}]}`, "choices[0].message", "missing"},
		{`{"choices": [{"message": {"role": "assistant"}}]}`, "choices[0].message.content", "missing"},
		{`{"choices": [{"message": {"content": null}}]}`, "choices[0].message.content", "want a string, got null"},
		{`{"choices": [{"message": {"content": "  \n"}}]}`, "choices[0].message.content", "empty summary"},
	} {
		t.Run(tc.field+" "+tc.msg, func(t *testing.T) {
			f := newFakeLLM(t, func(int32, chatCall) (int, string) { return http.StatusOK, tc.body })
			_, err := newTestLLM(t, f.URL, 3).Compress(t.Context(), "T", "text")
			var re *ResponseError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tc.field, re.Field)
			require.Contains(t, re.Msg, tc.msg)
			require.Contains(t, err.Error(), "field "+tc.field)
			require.EqualValues(t, 1, f.calls.Load(), "a malformed answer is not retried")
		})
	}
}

func TestLLMTimeoutAndCancel(t *testing.T) {
	block := make(chan struct{})
	f := newFakeLLM(t, func(int32, chatCall) (int, string) { <-block; return 200, completion("late") })
	t.Cleanup(func() { close(block) }) // runs before the server's Close, which waits for the handlers
	l, err := NewLLM(LLMConfig{URL: f.URL + "/v1", Model: "m", Timeout: 50 * time.Millisecond, MaxRetries: 1, Backoff: time.Millisecond})
	require.NoError(t, err)
	_, err = l.Compress(t.Context(), "T", "text")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Counted by the client, not the fake server: on a loaded machine a 50 ms attempt can end before its
	// request reaches the server's handler.
	require.ErrorContains(t, err, "(attempt 2 of 2)", "a timed-out attempt is retried")
	require.LessOrEqual(t, f.calls.Load(), int32(2))
}

func TestLLMBlankTextSkipsRequest(t *testing.T) {
	f := newFakeLLM(t, nil)
	got, err := newTestLLM(t, f.URL, 0).Compress(t.Context(), "T", " \n")
	require.NoError(t, err)
	require.Empty(t, got)
	require.Zero(t, f.calls.Load())
}

func TestNewLLMValidates(t *testing.T) {
	for _, cfg := range []LLMConfig{
		{URL: "", Model: "m"},
		{URL: "127.0.0.1:8000/v1", Model: "m"},
		{URL: "ftp://host/v1", Model: "m"},
		{URL: "http://host/v1", Model: " "},
		{URL: "http://host/v1", Model: "m", MaxRetries: -1},
	} {
		_, err := NewLLM(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

type llmGolden struct {
	Comment   string    `json:"_comment"`
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Text      string    `json:"text"`
	Messages  []Message `json:"messages"`
}

// TestLLMGolden pins the compressor id and the rendered messages that training/tests/test_compress.py
// checks Python's against (same prompt.json, same substitution, same id).
func TestLLMGolden(t *testing.T) {
	path := filepath.Join("testdata", "llm.golden.json")
	g := llmGolden{
		Comment: "LLM compressor parity: id and messages for one document, from internal/compress (go test -run TestLLMGolden -update) and checked by training/tests/test_compress.py.",
		Model:   "Qwen/Qwen2.5-14B-Instruct", MaxTokens: 256,
		Title: "A title with {document} and {title} inside", Text: "Body text {title}\nsecond line ünïcödé",
	}
	l, err := NewLLM(LLMConfig{URL: "http://127.0.0.1:1/v1", Model: g.Model, MaxTokens: g.MaxTokens})
	require.NoError(t, err)
	p, _ := DefaultPrompt()
	g.ID, g.Messages = l.ID(), p.Messages(g.Title, g.Text)
	if *update {
		out, err := json.MarshalIndent(g, "", " ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/compress -run TestLLMGolden -update")
	var want llmGolden
	require.NoError(t, json.Unmarshal(raw, &want))
	require.Equal(t, want, g, "prompt.json or the id changed: rerun with -update and the Python test")
	require.Contains(t, g.Messages[1].Content, "Title: A title with {document} and {title} inside\n", "one pass: no substitution inside the title")
}

func TestStatusErrorIsNotResponseError(t *testing.T) {
	var re *ResponseError
	require.False(t, errors.As(&StatusError{Code: 500}, &re))
}
