// Package adapter is everything in the sidecar that speaks to Elasticsearch.
//
// One index (default "icicle-docs") holds the corpus. Each document has
//
//	docid        keyword  the document identifier; in the NQ/BEIR corpora it is the Wikipedia title (exact match)
//	title        text     with a keyword subfield title.keyword
//	text         text     the passage body, searched but never returned
//	summary      text     the stored compressed summary that prompts show instead of the body
//	seen         boolean  true if the deployed model was trained on the document (D_train), false for D_new
//	ingested_at  date     when the document was last written
//
// The Elasticsearch _id is the lowercase hex SHA-1 of docid (see DocumentID), so ingesting the same corpus
// twice rewrites the same documents instead of duplicating them. The mapping is strict: unknown fields are
// rejected. EnsureIndex creates the index when it is absent and refuses to touch one whose mapping differs.
//
// That is the sidecar's own layout. A team's own index is used as it is instead when Options.Fields names
// its fields (fields.go): the docid may be the _id, the title, searched and body fields are the team's,
// and EnsureIndex checks them and adds only the sidecar's fields (summary, seen, vector, vector_model) to
// the mapping; Enrich fills those with partial updates, and Ingest refuses to write there.
//
// Retrieval is BM25 through a single multi_match (best_fields, tie_breaker 0.5, as in the BEIR Elasticsearch
// baseline) over the search fields (by default title and text). SearchNew restricts it to documents not seen (the candidates the
// model cannot know parametrically); SearchAll searches everything (arm A, and the fallback when the model is
// unavailable). Both return only docid, title and summary from _source.
//
// Errors wrap the sentinels ErrUnavailable (cluster unreachable, overloaded or failing after retries),
// ErrIndexMissing and ErrMappingMismatch, so callers map them with errors.Is; context cancellation and
// deadlines are passed through unchanged. Requests that fail to connect or get 429, 502, 503 or 504 are
// retried with exponential backoff and jitter, never waiting past the context's deadline; a deadline that
// ends such retries is ErrUnavailable (the cluster is down), not context.DeadlineExceeded (it is slow).
//
// ReadCorpus reads BEIR-style JSONL corpora (docid, title, text, optional summary), rejecting bad records
// with their line number while the rest flow on to Ingest.
package adapter
