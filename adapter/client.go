package adapter

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/elastic/elastic-transport-go/v8/elastictransport"
)

// esClient is the adapter's Elasticsearch client: go-elasticsearch's transport (connection pool, node
// selection, credentials, certificate fingerprint, interceptors) under the esapi request types. It takes
// the place of go-elasticsearch's root package, whose client also carries the typed API: 858 generated
// packages that a cold build of the sidecar compiled for nothing (the adapter speaks esapi only).
//
// Like that client it checks, on the first successful answer, that the server says it is Elasticsearch
// (the X-Elastic-Product header, sent since 7.14), so a proxy or another product on the port fails at once
// with a clear error instead of with undecodable answers later.
type esClient struct {
	tp      *elastictransport.Client
	closed  atomic.Bool
	genuine atomic.Bool
}

// errClosed is returned by Perform after Close.
var errClosed = errors.New("elasticsearch client is closed")

// errNotElasticsearch is returned when the first successful answer lacks the X-Elastic-Product header.
var errNotElasticsearch = errors.New("the server did not identify itself as Elasticsearch (no X-Elastic-Product header on a successful answer): check the address, or what listens at it")

// esConfig is what newESClient needs from Options.
type esConfig struct {
	addresses    []string
	cloudID      string
	apiKey       string
	username     string
	password     string
	fingerprint  string
	transport    http.RoundTripper
	interceptors []elastictransport.InterceptorFunc
}

func newESClient(c esConfig) (*esClient, error) {
	addrs := c.addresses
	switch {
	case len(addrs) > 0 && c.cloudID != "":
		return nil, errors.New("both Addresses and CloudID are set")
	case c.cloudID != "":
		a, err := addrFromCloudID(c.cloudID)
		if err != nil {
			return nil, fmt.Errorf("parse CloudID: %w", err)
		}
		addrs = []string{a}
	case len(addrs) == 0:
		addrs = []string{"http://localhost:9200"}
	}
	urls := make([]*url.URL, 0, len(addrs))
	for _, a := range addrs {
		u, err := url.Parse(strings.TrimRight(a, "/"))
		if err != nil {
			return nil, fmt.Errorf("parse address %q: %w", a, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("address %q: want http://host:port or https://host:port", a)
		}
		urls = append(urls, u)
	}
	opts := []elastictransport.Option{
		elastictransport.WithURLs(urls...),
		elastictransport.WithUserAgent(fmt.Sprintf("icicle-sidecar (%s %s; %s)", runtime.GOOS, runtime.GOARCH, runtime.Version())),
		// One attempt per request: the adapter's retrier retries, knowing the request's deadline.
		elastictransport.WithDisableRetry(),
		elastictransport.WithTransport(c.transport),
		elastictransport.WithInterceptors(c.interceptors...),
	}
	switch {
	case c.apiKey != "":
		opts = append(opts, elastictransport.WithAPIKey(c.apiKey))
	case c.username != "":
		opts = append(opts, elastictransport.WithBasicAuth(c.username, c.password))
	}
	if c.fingerprint != "" {
		opts = append(opts, elastictransport.WithCertificateFingerprint(c.fingerprint))
	}
	tp, err := elastictransport.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &esClient{tp: tp}, nil
}

// Perform sends one attempt of req (esapi.Transport).
func (c *esClient) Perform(req *http.Request) (*http.Response, error) {
	if c.closed.Load() {
		return nil, errClosed
	}
	res, err := c.tp.Perform(req)
	if err != nil {
		return nil, err
	}
	if !c.genuine.Load() && res.StatusCode >= 200 && res.StatusCode < 300 {
		if res.Header.Get("X-Elastic-Product") != "Elasticsearch" {
			_ = res.Body.Close()
			return nil, errNotElasticsearch
		}
		c.genuine.Store(true)
	}
	return res, nil
}

// Close stops the transport's background work; later calls to Perform fail with errClosed. Idempotent.
func (c *esClient) Close(ctx context.Context) error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.tp.Close(ctx)
}

// addrFromCloudID is the deployment's Elasticsearch URL from an Elastic Cloud id, "name:base64(host$es$kibana)"
// (https://www.elastic.co/guide/en/cloud/current/ec-cloud-id.html).
func addrFromCloudID(id string) (string, error) {
	name, enc, ok := strings.Cut(id, ":")
	if !ok || name == "" || strings.Contains(enc, ":") {
		return "", fmt.Errorf("%q: want name:base64", id)
	}
	data, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("%q: %w", id, err)
	}
	parts := strings.Split(string(data), "$")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", fmt.Errorf("%q: the encoded part is not host$es-id[$kibana-id]", id)
	}
	return "https://" + parts[1] + "." + parts[0], nil
}
