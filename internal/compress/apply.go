package compress

import (
	"context"
	"iter"
	"sync"
)

// Apply returns in with summaries filled in by c, in the order of in, and a function that reports the
// first compression error once the returned sequence has been consumed (or abandoned). need reports
// whether an item needs a summary and gives its title and text; set stores the summary on it. With
// workers > 1, up to workers calls of c run at once and in is read at most workers items ahead of the
// consumer (from another goroutine); with workers <= 1 everything runs on the consumer's goroutine. The
// first error stops the sequence: items after the failed one are not yielded.
func Apply[T any](ctx context.Context, c Compressor, workers int, in iter.Seq[T],
	need func(*T) (title, text string, ok bool), set func(*T, string)) (iter.Seq[T], func() error) {
	var firstErr error
	compress := func(ctx context.Context, item *T) error {
		title, text, ok := need(item)
		if !ok {
			return nil
		}
		s, err := c.Compress(ctx, title, text)
		if err != nil {
			return err
		}
		set(item, s)
		return nil
	}
	seq := func(yield func(T) bool) {
		if workers <= 1 {
			for item := range in {
				if err := compress(ctx, &item); err != nil {
					firstErr = err
					return
				}
				if !yield(item) {
					return
				}
			}
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type slot struct {
			item T
			done chan error
		}
		slots := make(chan *slot, workers) // in input order; the consumer waits on the head
		sem := make(chan struct{}, workers)
		var wg sync.WaitGroup
		go func() {
			defer close(slots)
			for item := range in {
				if ctx.Err() != nil {
					return
				}
				s := &slot{item: item, done: make(chan error, 1)}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				select {
				case slots <- s:
				case <-ctx.Done():
					<-sem
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := compress(ctx, &s.item)
					<-sem
					s.done <- err
				}()
			}
		}()
		for s := range slots {
			if err := <-s.done; err != nil {
				firstErr = err
				break
			}
			if !yield(s.item) {
				break
			}
		}
		cancel()
		for range slots { // let the reader goroutine see the cancellation and end
		}
		wg.Wait()
	}
	return seq, func() error { return firstErr }
}
