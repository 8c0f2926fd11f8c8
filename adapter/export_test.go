package adapter

import "time"

// SetSeenPageSize shrinks ListSeen's page so that small fixtures span several pages.
func (a *Adapter) SetSeenPageSize(n int) { a.seenPageSize = n }

// SetBackoff replaces the retry backoff of requests and of shed bulk actions, so that tests choose the
// waits instead of drawing them.
func (a *Adapter) SetBackoff(f func(attempt int) time.Duration) { a.backoff, a.rt.backoff = f, f }
