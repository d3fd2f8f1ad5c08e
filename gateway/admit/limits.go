package admit

import (
	"errors"
	"fmt"
)

// Kind is what a client holds while it is counted.
type Kind int

const (
	// Conns are open API connections, counted from accept to close.
	Conns Kind = iota
	// Requests are requests being answered, other than uploads and
	// streams.
	Requests
	// Bodies are request bodies still arriving (JSON calls; an upload is
	// counted as an upload), counted until the body's end or the answer.
	Bodies
	// Uploads are raw uploads (PUT .../files/raw) being answered.
	Uploads
	// Streams are long-lived answers being sent: events, exec output,
	// job output, a raw file's content.
	Streams
	numKinds
)

var kindNames = [numKinds]string{"connections", "requests", "request bodies", "uploads", "streams"}

// String names the kind in messages: "uploads".
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("kind %d", int(k))
	}
	return kindNames[k]
}

// Bound is how many of one kind may be held at once: in total, by one
// peer uid, and for one thread. Zero fields take their defaults
// (Limits.WithDefaults).
type Bound struct {
	Total, PerUID, PerThread int
}

// Limits are the bounds of every kind. The zero value means every
// default.
type Limits struct {
	// Conns has no per-thread bound: a connection names no thread.
	Conns, Requests, Bodies, Uploads, Streams Bound
}

func (l *Limits) bound(k Kind) *Bound {
	switch k {
	case Conns:
		return &l.Conns
	case Requests:
		return &l.Requests
	case Bodies:
		return &l.Bodies
	case Uploads:
		return &l.Uploads
	case Streams:
		return &l.Streams
	}
	panic(fmt.Sprintf("admit: no kind %d", k))
}

// The per-thread defaults: what one agent's thread needs at once, with
// room (a harness runs a few calls of a thread in parallel; a job's
// output followed, an exec, the events).
const (
	DefaultRequestsPerThread = 32
	DefaultBodiesPerThread   = 8
	DefaultUploadsPerThread  = 4
	DefaultStreamsPerThread  = 16
)

// WithDefaults fills the zero fields of l from the process's open-file
// limit nofile. Every API connection costs a descriptor, an upload one
// more (its temporary file); the totals keep them within about a fifth of
// the limit (connections an eighth, uploads and bodies a thirty-second
// each, streams a sixteenth), so that they, the mounts' own budget
// (fs.NewHub: at most three quarters) and the daemon's files stay below
// the limit together, and a flood of connections leaves the daemon at
// most some 80 % of it. Floors keep the per-uid bounds well above what
// one thread may hold (Check); ceilings bound the memory of idle
// connections (some 20 KiB each) where the limit is very high. The
// per-uid bound of each kind is three quarters of its total, so that one
// uid never holds all of it.
func (l Limits) WithDefaults(nofile uint64) Limits {
	n := int(min(nofile, 1<<30))
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&l.Requests.PerThread, DefaultRequestsPerThread)
	fill(&l.Bodies.PerThread, DefaultBodiesPerThread)
	fill(&l.Uploads.PerThread, DefaultUploadsPerThread)
	fill(&l.Streams.PerThread, DefaultStreamsPerThread)
	perThread := l.Requests.PerThread + l.Uploads.PerThread + l.Streams.PerThread

	fill(&l.Conns.Total, clamp(n/8, 8*perThread, 1<<15))
	fill(&l.Requests.Total, l.Conns.Total)
	fill(&l.Bodies.Total, clamp(n/32, 8*l.Bodies.PerThread, 1<<12))
	fill(&l.Uploads.Total, clamp(n/32, 8*l.Uploads.PerThread, 1<<12))
	fill(&l.Streams.Total, clamp(n/16, 8*l.Streams.PerThread, 1<<13))
	for k := Conns; k < numKinds; k++ {
		b := l.bound(k)
		fill(&b.PerUID, max(b.Total*3/4, 1))
	}
	return l
}

func clamp(v, lo, hi int) int { return min(max(v, lo), max(lo, hi)) }

// ErrLimit is what every *LimitError matches: a bound of this package
// refused the request.
var ErrLimit = errors.New("admit: over a limit")

// Check refuses limits that do not isolate threads: a per-uid or total
// bound that one thread alone could reach, within a kind, and a
// connection bound that one thread's requests could reach. Zero fields
// are checked as WithDefaults fills them; negative ones are refused.
func (l Limits) Check(nofile uint64) error {
	for k := Conns; k < numKinds; k++ {
		b := *l.bound(k)
		if b.Total < 0 || b.PerUID < 0 || b.PerThread < 0 {
			return fmt.Errorf("admit: %s bounds %+v: none may be negative", k, b)
		}
	}
	d := l.WithDefaults(nofile)
	for k := Conns; k < numKinds; k++ {
		b := *d.bound(k)
		if b.PerUID > b.Total {
			return fmt.Errorf("admit: %s per uid (%d) is more than in total (%d)", k, b.PerUID, b.Total)
		}
		if k != Conns && b.PerUID < 2*b.PerThread {
			return fmt.Errorf("admit: %s per uid (%d) must be at least twice per thread (%d): one thread would reach it", k, b.PerUID, b.PerThread)
		}
	}
	perThread := d.Requests.PerThread + d.Uploads.PerThread + d.Streams.PerThread
	if d.Conns.PerUID < 2*perThread {
		return fmt.Errorf("admit: connections per uid (%d) must be at least twice what one thread's requests, uploads and streams hold (%d)", d.Conns.PerUID, perThread)
	}
	return nil
}
