// Package dropin is the sidecar's Elasticsearch drop-in, without HTTP: a search client pointed at the
// sidecar instead of the cluster gets Elasticsearch's answers, its searches reranked.
//
// A `_search` reads top to bottom in Proxy.Search: the body is refused where Elasticsearch would refuse it
// (CheckDuplicateKeys) or the operator does (scripts, the allow-list: Proxy.CheckIndex); the plan decides
// from the request alone whether to rerank, with which query text, over which rank window and which page
// of it (plan.go: a passthrough says why with a Reason* constant); Elasticsearch is asked for the window;
// the window's hits are read as /v1/rerank reads its request's (SourceFields.Hits) and ranked by the
// pipeline (Ranker); the ranking becomes the window again, each hit as Elasticsearch returned it with an
// "_icicle" object (HitInfo), documents the model named from memory fetched with the request's own source
// filter; the page is cut from it and the answer gets an "icicle" object (Info). Everything else of
// Elasticsearch's read API goes to the cluster unchanged behind the same checks (Proxy.Route,
// Proxy.Forward); nothing else does. The sidecar's own errors take Elasticsearch's shape (ErrorBody).
// Package plugin serves it over HTTP and maps errors to statuses.
package dropin
