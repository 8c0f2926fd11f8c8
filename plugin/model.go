package plugin

import (
	"github.com/gin-gonic/gin"

	"github.com/icicle-search/sidecar/rank"
	"github.com/icicle-search/sidecar/retrieve"
)

// ModelEndpoint is the body of GET /v1/model: the serving model, and how the server runs it.
type ModelEndpoint struct {
	ModelInfo
	// Concurrency is the admission control: sessions (max_inflight), the queue, and what a run costs now
	// at each level of concurrency (from the server's own runs; the warm-up's until they exist).
	Concurrency ConcurrencyInfo `json:"concurrency"`
	// FirstStage is the first stage's encoder and fusion.
	FirstStage FirstStageInfo `json:"first_stage"`
	// Index is the Elasticsearch index the sidecar serves (elasticsearch.index): a client measuring against the
	// same cluster (`icicle eval`'s BM25 arm) checks that it searches the same one.
	Index string `json:"index"`
	// Reader is false when the sidecar serves no model (model.dir empty): every answer is the first stage's.
	Reader bool `json:"reader"`
	// Policy is the configured policy (policy.mode) and whether requests may ask for another.
	Policy PolicyInfo `json:"policy"`
	// Profile names the reader profile loaded (config/profiles); absent for none.
	Profile string `json:"profile,omitempty"`
	// Experimental lists the experimental settings in force (config's experimental section), by key.
	Experimental map[string]string `json:"experimental,omitempty"`
}

// PolicyInfo is the configured policy as /v1/model shows it.
type PolicyInfo struct {
	Mode          string `json:"mode"`
	AllowOverride bool   `json:"allow_override"`
}

// ConcurrencyInfo is the admission control as /v1/model shows it.
type ConcurrencyInfo struct {
	MaxInflight    int              `json:"max_inflight"`
	QueueSize      int              `json:"queue_size"`
	QueueTimeoutMS float64          `json:"queue_timeout_ms"`
	Cost           []rank.CostLevel `json:"cost"`
}

// FirstStageInfo is the first stage as /v1/model shows it.
type FirstStageInfo struct {
	Encoder string          `json:"encoder,omitempty"`
	Params  retrieve.Params `json:"params"`
}

// modelEndpoint serves GET /v1/model.
func (s *Server) modelEndpoint(*gin.Context) (answer, error) {
	inflight, queue, wait := s.pipe.Guard().Admission()
	first := s.pipe.FirstStage()
	return answer{body: ModelEndpoint{
		ModelInfo: s.modelInfo().withBlocks(),
		Concurrency: ConcurrencyInfo{MaxInflight: inflight, QueueSize: queue, QueueTimeoutMS: ms(wait),
			Cost: s.pipe.Costs()},
		FirstStage: FirstStageInfo{Encoder: first.Encoder(), Params: first.Params()},
		Index:      s.es.Index(),
		Reader:     s.pipe.HasReader(),
		Policy:     PolicyInfo{Mode: s.pipe.Policy(), AllowOverride: s.opts.AllowPolicyOverride},
		Profile:    s.opts.Profile, Experimental: s.opts.Experimental,
	}}, nil
}
