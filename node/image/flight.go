package image

import (
	"context"
	"sync"
)

// flights shares work in progress: the first caller for a key does it,
// later callers for the same key wait for its result (or their own
// context's end).
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	val  any
	err  error
}

// do runs fn once per key at a time.
func (f *flights) do(ctx context.Context, key string, fn func() (any, error)) (any, error) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	if fl, ok := f.m[key]; ok {
		f.mu.Unlock()
		select {
		case <-fl.done:
			return fl.val, fl.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	fl := &flight{done: make(chan struct{})}
	f.m[key] = fl
	f.mu.Unlock()
	fl.val, fl.err = fn()
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
	close(fl.done)
	return fl.val, fl.err
}
