package abtest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Arm is the side of the A/B experiment that answered a /v1/search request.
type Arm string

const (
	// ArmA is Elasticsearch BM25 over all documents: the baseline.
	ArmA Arm = "A"
	// ArmB is the sidecar's answer: /v1/search under policy.mode (default gate: the first stage's order,
	// the model's top promoted where its gate says so).
	ArmB Arm = "B"
	// ArmInterleaved is a team-draft interleaving of A and B, each result saying its team.
	ArmInterleaved Arm = "interleaved"
)

// Values of Experiment.Mode (config's ab.mode).
const (
	// ModeSplit gives each key one arm, B with probability SplitB.
	ModeSplit = "split"
	// ModeInterleave answers every request with a team-draft interleaving of both arms.
	ModeInterleave = "interleave"
)

// Where an assignment key came from, as the response and the impression log say.
const (
	// KeyFromHeader: the request sent its key (the key header).
	KeyFromHeader = "header"
	// KeyFromRequestID: it sent none and its request id stood in, so it was assigned per request.
	KeyFromRequestID = "request_id"
)

// Experiment is the A/B experiment as /v1/search runs it (config's ab section, docs/ab.md).
type Experiment struct {
	// Name salts the key hash (ab.experiment): a new name re-draws every key's arm.
	Name string
	// Mode is ModeSplit or ModeInterleave.
	Mode string
	// SplitB is the share of keys sent to arm B in split mode, 0..1.
	SplitB float64
}

// Assignment is one request's place in the experiment. The zero value is the experiment off: arm B,
// answered as every request is without the experiment.
type Assignment struct {
	// Experiment is the experiment's name (Experiment.Name).
	Experiment string
	// Arm is A, B or interleaved.
	Arm Arm
	// KeySource is KeyFromHeader or KeyFromRequestID.
	KeySource string
	// Seed is the interleaving's coin (Interleave), from SHA-256(experiment, 0, key, 0, request id); zero in
	// split mode.
	Seed [2]uint64
	key  [32]byte // SHA-256(experiment, 0, key): picks the arm; its first 16 bytes are the log's pseudonym
}

// Assign places a request in the experiment by its assignment key, or, when it sent none (key ""), by its
// request id: randomised per request rather than per user. In split mode the same key always gets the same
// arm; in interleave mode every request is interleaved, its coin seeded by the key and the request id, so
// that the same request interleaves the same way.
func (e Experiment) Assign(key, requestID string) Assignment {
	source := KeyFromHeader
	if key == "" {
		key, source = requestID, KeyFromRequestID
	}
	a := Assignment{Experiment: e.Name, KeySource: source, key: digest(e.Name, key)}
	if e.Mode == ModeInterleave {
		seed := digest(e.Name, key, requestID)
		a.Arm, a.Seed = ArmInterleaved, [2]uint64{binary.BigEndian.Uint64(seed[:8]), binary.BigEndian.Uint64(seed[8:16])}
	} else {
		a.Arm = armFor(a.key, e.SplitB)
	}
	return a
}

// KeyHash is the key's pseudonym in the impression log: hex of the first 16 bytes of
// SHA-256(experiment, 0x00, key), never the key itself.
func (a Assignment) KeyHash() string { return hex.EncodeToString(a.key[:16]) }

// digest hashes parts separated by zero bytes, so ("ab", "c") and ("a", "bc") differ.
func digest(parts ...string) [32]byte {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// armFor maps a key digest to an arm: its first 53 bits read as a uniform number in [0, 1), arm B below
// splitB. The same key always gets the same arm; a change of splitB moves only the keys between the old
// and the new threshold.
func armFor(key [32]byte, splitB float64) Arm {
	u := float64(binary.BigEndian.Uint64(key[:8])>>11) / (1 << 53)
	if u < splitB {
		return ArmB
	}
	return ArmA
}
