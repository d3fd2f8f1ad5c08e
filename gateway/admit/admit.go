package admit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"warren/meta"
)

// RetryAfter is what a refused client is told to wait before it tries
// again: places come free as fast as requests end.
const RetryAfter = time.Second

// Admitter counts what clients hold, against its Limits. Make one with
// New; it is safe for concurrent use and runs no goroutine.
type Admitter struct {
	limits Limits // never changed

	mu sync.Mutex
	// count is how many of each kind are held, by scope; an entry of
	// uids or threads is deleted when it drops to zero, so the maps are
	// no larger than what is held.
	count [numKinds]counts
	// refused counts the refusals of each kind since New.
	refused [numKinds]uint64
}

type counts struct {
	total   int
	uids    map[uint32]int
	threads map[meta.ThreadKey]int
}

// New makes an Admitter over l, whose zero fields take their defaults for
// the open-file limit nofile (Limits.WithDefaults).
func New(l Limits, nofile uint64) *Admitter {
	a := &Admitter{limits: l.WithDefaults(nofile)}
	for k := range a.count {
		a.count[k] = counts{uids: make(map[uint32]int), threads: make(map[meta.ThreadKey]int)}
	}
	return a
}

// Limits returns the bounds in force, defaults filled in.
func (a *Admitter) Limits() Limits { return a.limits }

// LimitError is a refusal: Kind held Max at once in Scope already. It
// matches ErrLimit.
type LimitError struct {
	Kind  Kind
	Scope string // "in total", "by uid 1000", "for this thread"
	Max   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("too many %s at once %s (the limit is %d): try again in %v", e.Kind, e.Scope, e.Max, RetryAfter)
}

// Is makes a LimitError match ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Ticket is one place held; Release gives it back.
type Ticket struct {
	a      *Admitter
	kind   Kind
	uid    uint32
	thread meta.ThreadKey
	done   atomic.Bool
}

// Release gives the place back. Calling it again does nothing, so a
// caller may release early (a body at its end) and defer it as well.
func (t *Ticket) Release() {
	if t == nil || t.done.Swap(true) {
		return
	}
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &a.count[t.kind]
	c.total--
	if c.uids[t.uid]--; c.uids[t.uid] <= 0 {
		delete(c.uids, t.uid)
	}
	if t.thread != (meta.ThreadKey{}) {
		if c.threads[t.thread]--; c.threads[t.thread] <= 0 {
			delete(c.threads, t.thread)
		}
	}
}

// Enter takes a place of kind k for a client of uid, for thread (the zero
// key: a call of no thread, bounded in total and per uid only), or says
// which bound refused it (a *LimitError). Release the ticket when the
// request is answered.
func (a *Admitter) Enter(k Kind, uid uint32, thread meta.ThreadKey) (*Ticket, error) {
	b := a.limits.bound(k)
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &a.count[k]
	// The narrowest bound first: a thread at its own bound is told so,
	// not that the server is full.
	var err *LimitError
	switch {
	case thread != (meta.ThreadKey{}) && c.threads[thread] >= b.PerThread:
		err = &LimitError{Kind: k, Scope: "for this thread", Max: b.PerThread}
	case c.uids[uid] >= b.PerUID:
		err = &LimitError{Kind: k, Scope: fmt.Sprintf("by uid %d", uid), Max: b.PerUID}
	case c.total >= b.Total:
		err = &LimitError{Kind: k, Scope: "in total", Max: b.Total}
	}
	if err != nil {
		a.refused[k]++
		return nil, err
	}
	c.total++
	c.uids[uid]++
	if thread != (meta.ThreadKey{}) {
		c.threads[thread]++
	}
	return &Ticket{a: a, kind: k, uid: uid, thread: thread}, nil
}

// Usage is what is held and was refused, by kind.
type Usage struct {
	Kind    Kind
	Held    int
	Max     int // the total bound
	Refused uint64
}

// Usage returns what is held of each kind, for metrics and tests.
func (a *Admitter) Usage() []Usage {
	a.mu.Lock()
	defer a.mu.Unlock()
	us := make([]Usage, numKinds)
	for k := Conns; k < numKinds; k++ {
		us[k] = Usage{Kind: k, Held: a.count[k].total, Max: a.limits.bound(k).Total, Refused: a.refused[k]}
	}
	return us
}

// Held returns how many of kind k are held for thread, and in total.
func (a *Admitter) Held(k Kind, thread meta.ThreadKey) (forThread, total int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count[k].threads[thread], a.count[k].total
}
