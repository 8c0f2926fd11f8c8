package compress

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// promptJSON is the document compression prompt (paper appendix D.1): {"system": ..., "user": ...} with
// {title} and {document} in the user template. training/icicle/compress.py reads the same file.
//
//go:embed prompt.json
var promptJSON []byte

// Prompt is a chat prompt for one document: a system message and a user template with the placeholders
// {title} and {document}.
type Prompt struct {
	System string `json:"system"`
	User   string `json:"user"`
}

// Message is one chat message of an OpenAI-compatible request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// DefaultPrompt returns the embedded prompt.json and the first 12 hex digits of its sha256, which LLM
// compressor ids carry.
func DefaultPrompt() (Prompt, string) {
	var p Prompt
	if err := json.Unmarshal(promptJSON, &p); err != nil || p.System == "" || !strings.Contains(p.User, "{document}") {
		panic(fmt.Sprintf("compress: embedded prompt.json is invalid (%v)", err)) // caught by every test run
	}
	sum := sha256.Sum256(promptJSON)
	return p, hex.EncodeToString(sum[:])[:12]
}

// Messages returns the system message and the user template with {title} and {document} replaced in one
// left-to-right pass (a title containing "{document}" stays as it is), as the Python side does.
func (p Prompt) Messages(title, text string) []Message {
	r := strings.NewReplacer("{title}", title, "{document}", text)
	return []Message{{Role: "system", Content: p.System}, {Role: "user", Content: r.Replace(p.User)}}
}

// LLMConfig configures an LLM compressor.
type LLMConfig struct {
	// URL is the base URL of an OpenAI-compatible API up to and including its version path, as OpenAI
	// clients take it ("http://127.0.0.1:8000/v1"); requests go to URL + "/chat/completions". Required.
	URL string
	// Model is the "model" field of each request, such as "Qwen/Qwen2.5-14B-Instruct". Required.
	Model string
	// APIKey is sent as "Authorization: Bearer <key>"; "" sends no Authorization header.
	APIKey string
	// Timeout bounds one attempt (request and response body). Default 60s.
	Timeout time.Duration
	// MaxRetries is how many times an attempt that failed with a transport error, 429 or 5xx is repeated;
	// 0 disables retries. Other statuses and malformed responses are not retried.
	MaxRetries int
	// MaxTokens is the request's max_tokens: the longest summary, in the LLM's tokens. Default 256.
	MaxTokens int
	// Backoff is the wait before the first retry, doubled before each next one and capped at 30s; a
	// Retry-After header (seconds) up to 60s replaces it. Default 1s.
	Backoff time.Duration
	// Client sends the requests. Default: a new http.Client (Timeout applies per attempt through ctx).
	Client *http.Client
}

// LLM asks an OpenAI-compatible /chat/completions endpoint for a summary of each document with the
// paper's prompt, at temperature 0. It is safe for concurrent use.
type LLM struct {
	cfg      LLMConfig
	endpoint string
	prompt   Prompt
	id       string
}

// NewLLM returns an LLM compressor for cfg, with defaults filled in; it fails when URL is not an http(s)
// URL or Model is empty.
func NewLLM(cfg LLMConfig) (*LLM, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm compressor: want an http or https base URL such as \"http://127.0.0.1:8000/v1\", got %q", cfg.URL)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("llm compressor: model must not be empty")
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("llm compressor: max retries must not be negative, got %d", cfg.MaxRetries)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 256
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	p, hash := DefaultPrompt()
	return &LLM{
		cfg:      cfg,
		endpoint: strings.TrimRight(cfg.URL, "/") + "/chat/completions",
		prompt:   p,
		id:       LLMID(cfg.Model, hash, cfg.MaxTokens),
	}, nil
}

// LLMID returns the id of an LLM compressor: "llm:<model>:<prompt hash>:<max tokens>".
func LLMID(model, promptHash string, maxTokens int) string {
	return fmt.Sprintf("llm:%s:%s:%d", model, promptHash, maxTokens)
}

// ID returns "llm:<model>:<prompt sha256 prefix>:<max tokens>".
func (l *LLM) ID() string { return l.id }

// StatusError is a non-2xx answer of the endpoint.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Body is the start of the response body (at most 512 bytes).
	Body string
}

// Error formats the status and the start of the body.
func (e *StatusError) Error() string {
	return fmt.Sprintf("llm endpoint answered %d: %s", e.Code, e.Body)
}

// ResponseError is a 2xx answer that is not a usable chat completion; Field names the JSON path at fault.
type ResponseError struct {
	// Field is the JSON path, such as "choices[0].message.content", or "(body)" for a body that is not JSON.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats the field and the problem.
func (e *ResponseError) Error() string {
	return fmt.Sprintf("llm response: field %s: %s", e.Field, e.Msg)
}

type chatRequest struct {
	Model       string    `json:"model"`
	Messages    []Message `json:"messages"`
	Temperature float64   `json:"temperature"`
	MaxTokens   int       `json:"max_tokens"`
}

// Compress returns the LLM's summary of the document, trimmed of surrounding white space ("" without a
// request for a blank text). It retries transport errors, 429 and 5xx up to MaxRetries times; it returns
// a *StatusError for other statuses and a *ResponseError for a malformed answer.
func (l *LLM) Compress(ctx context.Context, title, text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", nil
	}
	body, err := json.Marshal(chatRequest{Model: l.cfg.Model, Messages: l.prompt.Messages(title, text), Temperature: 0,
		MaxTokens: l.cfg.MaxTokens})
	if err != nil {
		return "", fmt.Errorf("encode llm request: %w", err)
	}
	wait := l.cfg.Backoff
	for attempt := 0; ; attempt++ {
		summary, retryAfter, err := l.attempt(ctx, body)
		if err == nil {
			return summary, nil
		}
		var re retryable
		if !errors.As(err, &re) || attempt >= l.cfg.MaxRetries || ctx.Err() != nil {
			if errors.As(err, &re) {
				err = re.err
			}
			return "", fmt.Errorf("compress %q with %s (attempt %d of %d): %w", title, l.cfg.Model, attempt+1, l.cfg.MaxRetries+1, err)
		}
		d := wait
		if retryAfter > 0 {
			d = retryAfter
		}
		wait = min(2*wait, 30*time.Second)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("compress %q with %s: %w", title, l.cfg.Model, ctx.Err())
		case <-t.C:
		}
	}
}

// retryable wraps an error worth another attempt.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }

// attempt sends one request; it returns the summary, or an error (retryable or not) and the server's
// Retry-After wait when it sent one.
func (l *LLM) attempt(ctx context.Context, body []byte) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", 0, fmt.Errorf("build llm request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if l.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.cfg.APIKey)
	}
	resp, err := l.cfg.Client.Do(req)
	if err != nil {
		return "", 0, retryable{fmt.Errorf("post %s: %w", l.endpoint, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", 0, retryable{fmt.Errorf("read llm response: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &StatusError{Code: resp.StatusCode, Body: string(raw[:min(len(raw), 512)])}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			var after time.Duration
			if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 && s <= 60 {
				after = time.Duration(s) * time.Second
			}
			return "", after, retryable{se}
		}
		return "", 0, se
	}
	s, err := Summary(raw)
	return s, 0, err
}

// Summary extracts choices[0].message.content from a chat completion body, trimmed; every way the body
// can fall short is a *ResponseError naming the field.
func Summary(body []byte) (string, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return "", &ResponseError{Field: "(body)", Msg: fmt.Sprintf("not JSON: %v", err)}
	}
	root, ok := v.(map[string]any)
	if !ok {
		return "", &ResponseError{Field: "(body)", Msg: fmt.Sprintf("want a JSON object, got %s", jsonKind(v))}
	}
	raw, ok := root["choices"]
	if !ok {
		return "", &ResponseError{Field: "choices", Msg: "missing"}
	}
	choices, ok := raw.([]any)
	if !ok {
		return "", &ResponseError{Field: "choices", Msg: fmt.Sprintf("want an array, got %s", jsonKind(raw))}
	}
	if len(choices) == 0 {
		return "", &ResponseError{Field: "choices", Msg: "empty"}
	}
	choice, ok := choices[0].(map[string]any)
	if !ok {
		return "", &ResponseError{Field: "choices[0]", Msg: fmt.Sprintf("want an object, got %s", jsonKind(choices[0]))}
	}
	raw, ok = choice["message"]
	if !ok {
		return "", &ResponseError{Field: "choices[0].message", Msg: "missing"}
	}
	msg, ok := raw.(map[string]any)
	if !ok {
		return "", &ResponseError{Field: "choices[0].message", Msg: fmt.Sprintf("want an object, got %s", jsonKind(raw))}
	}
	raw, ok = msg["content"]
	if !ok {
		return "", &ResponseError{Field: "choices[0].message.content", Msg: "missing"}
	}
	content, ok := raw.(string)
	if !ok {
		return "", &ResponseError{Field: "choices[0].message.content", Msg: fmt.Sprintf("want a string, got %s", jsonKind(raw))}
	}
	content = strings.TrimSpace(content)
	if content == "" {
		return "", &ResponseError{Field: "choices[0].message.content", Msg: "empty summary"}
	}
	return content, nil
}

// jsonKind names the JSON type of a value decoded into any.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
