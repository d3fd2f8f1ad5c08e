package resolver

import (
	"context"
	"sync"
)

// waitFactor bounds a client's queries waiting or running to waitFactor
// times its slots; past that it is flooding, and a query is answered at
// once rather than adding a goroutine that waits.
const waitFactor = 4

// limiter bounds each client's queries at the upstream servers to max
// at once. A client's entry lives while it has a query waiting or
// running, so the map holds only clients busy now.
type limiter struct {
	max int

	mu      sync.Mutex
	clients map[string]*slots // guarded by mu
}

type slots struct {
	sem  chan struct{} // a token per query running
	refs int           // queries waiting or running; guarded by limiter.mu
}

// acquire waits for one of id's slots, at most until ctx ends; ok is
// false when it got none. Call release when the query is done.
func (l *limiter) acquire(ctx context.Context, id string) (release func(), ok bool) {
	l.mu.Lock()
	s := l.clients[id]
	if s == nil {
		if l.clients == nil {
			l.clients = make(map[string]*slots)
		}
		s = &slots{sem: make(chan struct{}, l.max)}
		l.clients[id] = s
	}
	if s.refs >= waitFactor*l.max {
		l.mu.Unlock()
		return nil, false
	}
	s.refs++
	l.mu.Unlock()

	select {
	case s.sem <- struct{}{}:
		return func() {
			<-s.sem
			l.put(id, s)
		}, true
	case <-ctx.Done():
		l.put(id, s)
		return nil, false
	}
}

// put gives back a reference to s, and drops it when it was the last.
func (l *limiter) put(id string, s *slots) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.refs--
	if s.refs == 0 {
		delete(l.clients, id)
	}
}
