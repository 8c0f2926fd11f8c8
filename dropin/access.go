package dropin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// What the drop-in lets through to the cluster: every index a request names must be on the allow-list,
// and request bodies may not carry scripts unless Options.AllowScripts (docs/api.md, "Drop-in: what is
// proxied").

// allowList is the set of index names the drop-in and /v1/search may address.
type allowList struct {
	names map[string]bool
	list  []string // sorted, for messages
}

func newAllowList(names []string) *allowList {
	a := &allowList{names: make(map[string]bool, len(names))}
	for _, n := range names {
		if n != "" && !a.names[n] {
			a.names[n] = true
			a.list = append(a.list, n)
		}
	}
	slices.Sort(a.list)
	return a
}

// denied returns the first part of the index expression expr ("a,b") that is not on the list, or "" when
// every part is. A wildcard, _all, an exclusion, date math or a remote cluster is never on the list: the
// list holds plain names, so such an expression could reach other indices and is refused.
func (a *allowList) denied(expr string) string {
	for _, part := range strings.Split(expr, ",") {
		if !a.names[part] {
			return cmp.Or(part, `""`)
		}
	}
	return ""
}

// allowed returns the current allow-list. The first request to need it resolves the default list (cmd's
// start-up readiness wait usually has done it through /readyz); until that succeeds it is the configured
// index alone.
func (p *Proxy) allowed() *allowList {
	if a := p.allow.Load(); a != nil {
		return a
	}
	p.RefreshAllowList()
	if a := p.allow.Load(); a != nil {
		return a
	}
	return newAllowList([]string{p.es.Index()})
}

// RefreshAllowList resolves the default allow-list (the configured index, the indices behind it and their
// aliases that point only at them) unless Options.AllowedIndices set it. On failure the last list stays.
// It is the sidecar's own work: it runs on a context of its own (2s), never with a caller's credentials
// or cancellation, whatever request needed it.
func (p *Proxy) RefreshAllowList() {
	if len(p.opts.AllowedIndices) > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	names, err := p.es.IndexNames(ctx)
	if err != nil {
		p.log.Warn("resolve the drop-in's allowed indices", "err", err)
		return
	}
	p.allow.Store(newAllowList(names))
}

// CheckIndex refuses (a *ForbiddenError) an index expression outside the allow-list, for Elasticsearch's
// action (named in the refusal).
func (p *Proxy) CheckIndex(action, expr string) error {
	al := p.allowed()
	if bad := al.denied(expr); bad != "" {
		return &ForbiddenError{Reason: fmt.Sprintf("action [%s] is unauthorized for index [%s] through the icicle sidecar "+
			"(elasticsearch.allowed_indices)", action, bad)}
	}
	return nil
}

// scriptKeys are the request-body keys that run Painless (or another script language) on the cluster.
var scriptKeys = map[string]bool{
	"script": true, "script_fields": true, "runtime_mappings": true, "script_score": true, "_script": true,
	"scripted_metric": true, "bucket_script": true, "bucket_selector": true, "params_script": true,
}

// checkScripts refuses a body with scripts unless Options.AllowScripts.
func (p *Proxy) checkScripts(body []byte) error {
	if p.opts.AllowScripts || len(body) == 0 {
		return nil
	}
	if key := scriptKeyIn(body); key != "" {
		return &ForbiddenError{Reason: fmt.Sprintf("scripts are disabled through the icicle sidecar: the request body has [%s] (dropin.allow_scripts)", key)}
	}
	return nil
}

// scriptKeyIn walks every JSON value in body (one document, or NDJSON lines) for a key in scriptKeys.
func scriptKeyIn(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		if k := scriptKeyInValue(v); k != "" {
			return k
		}
	}
}

func scriptKeyInValue(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if scriptKeys[k] {
				return k
			}
			if found := scriptKeyInValue(x); found != "" {
				return found
			}
		}
	case []any:
		for _, x := range v {
			if found := scriptKeyInValue(x); found != "" {
				return found
			}
		}
	}
	return ""
}

// checkMsearch checks every header line of an _msearch body against the allow-list (a header without
// an index uses the path's, which was checked) and every search line for scripts.
func (p *Proxy) checkMsearch(body []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	header := true
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if header {
			var h struct {
				Index json.RawMessage `json:"index"`
			}
			if json.Unmarshal(line, &h) == nil && h.Index != nil {
				var one string
				var many []string
				switch {
				case json.Unmarshal(h.Index, &one) == nil:
					many = []string{one}
				case json.Unmarshal(h.Index, &many) == nil:
				default:
					many = []string{string(h.Index)}
				}
				if err := p.CheckIndex("indices:data/read/msearch", strings.Join(many, ",")); err != nil {
					return err
				}
			}
		} else if err := p.checkScripts(line); err != nil {
			return err
		}
		header = !header
	}
	return nil
}

// checkMget checks the _index of every document an _mget body names.
func (p *Proxy) checkMget(body []byte) error {
	var req struct {
		Docs []struct {
			Index string `json:"_index"`
		} `json:"docs"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil // Elasticsearch will say what is wrong
	}
	for _, d := range req.Docs {
		if d.Index == "" {
			continue
		}
		if err := p.CheckIndex("indices:data/read/mget", d.Index); err != nil {
			return err
		}
	}
	return nil
}
