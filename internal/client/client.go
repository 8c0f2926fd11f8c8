// Package client is a typed client of the sidecar's HTTP API, for the commands that measure a running
// sidecar (icicle eval, calibrate, load, ab-simulate) and for tests.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/icicle-search/sidecar/plugin"
)

// Client speaks to a running sidecar: the typed requests and answers of its API (package plugin's wire
// types), an error naming the status and the sidecar's error text for any answer but 200.
type Client struct {
	base string
	http *http.Client
}

// New is a client of the sidecar at base (its URL), each request bounded by timeout, keeping up to conns
// connections open.
func New(base string, timeout time.Duration, conns int) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	return &Client{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: timeout, Transport: tr}}
}

// Search posts to /v1/search. An answer from an A/B arm other than B (the sidecar's own A/B experiment
// is on) is an error: it is not the ICICLE answer this arm measures.
func (c *Client) Search(ctx context.Context, req plugin.SearchRequest) (plugin.Response, error) {
	var out struct {
		plugin.Response
		// AB is read here rather than from plugin.Response so that this check does not depend on the
		// experiment's wire types.
		AB *struct {
			Arm string `json:"arm"`
		} `json:"ab"`
	}
	if err := c.Post(ctx, "/v1/search", req, &out); err != nil {
		return plugin.Response{}, err
	}
	if out.AB != nil && out.AB.Arm != "B" {
		return plugin.Response{}, fmt.Errorf("POST /v1/search: answered by A/B arm %q, not B: evaluate a sidecar with ab.enabled off", out.AB.Arm)
	}
	return out.Response, nil
}

// Rerank posts to /v1/rerank.
func (c *Client) Rerank(ctx context.Context, req plugin.RerankRequest) (plugin.Response, error) {
	var out plugin.Response
	err := c.Post(ctx, "/v1/rerank", req, &out)
	return out, err
}

// Post sends body as JSON to path and decodes a 200 answer into out.
func (c *Client) Post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, out)
}

// Get decodes the 200 answer of GET path into out.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

// do sends req and decodes a 200 answer into out.
func (c *Client) do(req *http.Request, out any) error {
	return DoJSON(c.http, req, http.StatusOK, out)
}

// DoJSON sends req with hc and decodes an answer of status want into out (nil: discard the body); any other
// status is an error naming it, the field the sidecar names and its error text.
func DoJSON(hc *http.Client, req *http.Request, want int, out any) error {
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		var e plugin.ErrorBody
		_ = json.Unmarshal(raw, &e)
		msg := cmp.Or(e.Error, strings.TrimSpace(string(raw)))
		if e.Field != "" {
			msg = "field " + e.Field + ": " + msg
		}
		return fmt.Errorf("%s %s: status %d: %s", req.Method, req.URL.Path, res.StatusCode, msg)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// Model reads GET /v1/model: what the sidecar serves.
func (c *Client) Model(ctx context.Context) (plugin.ModelEndpoint, error) {
	var m plugin.ModelEndpoint
	err := c.Get(ctx, "/v1/model", &m)
	return m, err
}
