package plugin

import (
	"cmp"
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/internal/abtest"
)

// ABOptions configure the A/B experiment on /v1/search (package abtest, docs/ab.md). The zero value is off.
type ABOptions struct {
	// Enabled turns the experiment on; off, /v1/search is arm B without an "ab" section.
	Enabled bool
	// Mode is abtest.ModeSplit (default) or abtest.ModeInterleave.
	Mode string
	// SplitB is the share of keys sent to arm B in split mode, 0..1.
	SplitB float64
	// KeyHeader is the request header holding the assignment key (default "X-ICICLE-AB-Key"). A request
	// without it is assigned by its request id: randomised per request rather than per user.
	KeyHeader string
	// Experiment salts the key hash (default "icicle"): a new value re-draws every key's arm.
	Experiment string
}

func (o ABOptions) withDefaults() ABOptions {
	o.Mode = cmp.Or(o.Mode, abtest.ModeSplit)
	o.KeyHeader = cmp.Or(o.KeyHeader, "X-ICICLE-AB-Key")
	o.Experiment = cmp.Or(o.Experiment, "icicle")
	return o
}

// impressionIDHeader carries the impression id of a /v1/search answer, as its body's impression_id does.
const impressionIDHeader = "X-ICICLE-Impression-ID"

// searchAB answers /v1/search from the request's arm (abtest.Arms) and logs the impression: the arm is
// the key header's (abtest.Experiment.Assign). With the experiment off it is arm B without an "ab"
// section.
func (s *Server) searchAB(ctx context.Context, c *gin.Context, req SearchRequest) (Response, error) {
	o := s.opts.AB
	var a abtest.Assignment // the experiment off: arm B
	if o.Enabled {
		a = abtest.Experiment{Name: o.Experiment, Mode: o.Mode, SplitB: o.SplitB}.Assign(c.GetHeader(o.KeyHeader), requestID(c))
	}
	ranked, err := s.arms.Answer(ctx, a, req.Query, req.Size, req.Policy)
	if err != nil {
		return Response{}, err
	}
	resp := Response{RequestID: requestID(c), Response: ranked}
	var assigned *abtest.Assignment // the impression's: nil with the experiment off
	if o.Enabled {
		assigned = &a
		s.metrics.abArms.WithLabelValues(string(a.Arm)).Inc()
		resp.AB = &ABInfo{Arm: a.Arm, Experiment: a.Experiment, KeySource: a.KeySource}
	}
	if a.Arm == abtest.ArmInterleaved {
		for _, r := range resp.Results {
			s.metrics.interleaved.WithLabelValues(r.Team).Inc()
		}
	}
	if s.opts.Impressions != nil {
		// Its own id, never the request id: a client that reuses X-Request-ID must not merge two
		// impressions (and their clicks) into one.
		resp.ImpressionID = abtest.NewImpressionID()
		c.Header(impressionIDHeader, resp.ImpressionID)
		s.opts.Impressions.Log(abtest.NewImpression(time.Now(), resp.ImpressionID, resp.RequestID, resp.Response, assigned))
	}
	return resp, nil
}
