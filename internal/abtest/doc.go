// Package abtest is the online A/B experiment on /v1/search (docs/ab.md), both of its ends, so that what
// the sidecar logs and what the report reads are one format.
//
// Serving: Experiment.Assign places a request in an arm by its assignment key (split mode: the same key,
// the same arm; interleave mode: every request both arms); Arms answers the arm (A: Elasticsearch's BM25
// over all documents, B: the sidecar's ranking, interleaved: both merged by team-draft interleaving,
// TeamDraft and Interleave); each answer becomes an Impression and each click a Click, appended to their
// JSONL logs (ImpressionLog, ClickLog) by one writer each, never in the request's way. Package plugin
// serves it over HTTP.
//
// Reporting (icicle ab-report): Analyse joins the two logs (ReadJSONL) and reports, for team-draft
// interleaving, wins, losses and ties per arm with an exact two-sided sign test, and for split mode each
// arm's click-through rate and mean reciprocal rank of clicks with 95% confidence intervals; Simulate draws
// synthetic clicks from qrels, to check the loop end to end.
package abtest
