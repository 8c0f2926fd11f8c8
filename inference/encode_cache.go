package inference

import (
	"container/list"
	"slices"
	"sync"
)

// encodeCache memoises Tokenizer.Encode for the engine's own segments (summaries, titles, candidate
// block pieces), which repeat across requests for the same stored documents. It is a bounded LRU safe
// for concurrent use. The slices it returns are shared: they are clipped (cap == len) so that an
// append copies, and callers must not modify them in place.
type encodeCache struct {
	tok     Tokenizer
	max     int
	mu      sync.Mutex
	order   *list.List // front = most recently used; values are *encodeEntry
	entries map[string]*list.Element
}

type encodeEntry struct {
	text string
	ids  []int64
}

func newEncodeCache(tok Tokenizer, maxEntries int) *encodeCache {
	return &encodeCache{tok: tok, max: maxEntries, order: list.New(), entries: make(map[string]*list.Element)}
}

// Encode returns the cached ids of text, encoding it on a miss.
func (c *encodeCache) Encode(text string) ([]int64, error) {
	c.mu.Lock()
	if el, ok := c.entries[text]; ok {
		c.order.MoveToFront(el)
		ids := el.Value.(*encodeEntry).ids
		c.mu.Unlock()
		return ids, nil
	}
	c.mu.Unlock()
	ids, err := c.tok.Encode(text) // outside the lock: tokenisation is the slow part
	if err != nil {
		return nil, err
	}
	ids = slices.Clip(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[text]; !ok {
		c.entries[text] = c.order.PushFront(&encodeEntry{text: text, ids: ids})
		for c.order.Len() > c.max {
			old := c.order.Remove(c.order.Back()).(*encodeEntry)
			delete(c.entries, old.text)
		}
	}
	return ids, nil
}

// Close does nothing: the engine does not own the tokenizer.
func (c *encodeCache) Close() error { return nil }
