// Package rank turns a query into a ranking: the first stage (package retrieve), then, where a reader is
// configured and the policy says so, the reader under the guard, then the policy's answer. It knows nothing
// of HTTP; package plugin decodes requests into a Request and writes the Response.
//
// A request reads top to bottom in Pipeline.Run:
//
//	first stage (FirstStage.Search over the index, or Rescore of the caller's hits)
//	-> the policy decides whether the reader runs (Policy.Reads; FirstStagePolicy never, GatePolicy only
//	   when its gate can promote, ModelPolicy and FusionPolicy always)
//	-> the reader reads the first stage's top candidates under the guard (Guard.Run: admission within
//	   the request's budget, the circuit breaker, a typed fallback reason)
//	-> transforms over the reading (RouteByFirstStage, the confidence floors)
//	-> the policy answers from the first stage's order and the reading (Policy.Answer)
//
// Every Response says how it was ranked (Mode) and, when no reader answered, why (ModelSkipped: none
// configured, the policy, a gate that never promotes; FallbackReason: the reader failed, was slow, shed or
// doubted). A Reader is any model that reads a query and candidates and scores them (reader.go): the ICICLE
// engine (ICICLE, its copy and memory routes behind the interface) and the dense encoder (DenseReader) are the
// two kinds here.
package rank
