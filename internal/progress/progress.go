// Package progress carries a report of how far long work got through a
// context, as net/http/httptrace carries its hooks: the work (a
// checkpoint's read of a workspace, a restore's writes, a delete) calls
// Report as it goes; a caller that wants to know (an API answer streamed
// as NDJSON frames) puts a Func in the context with With. Without one,
// Report costs a context lookup and nothing else.
//
// A Func is called on the working goroutine, often (once per file): it
// must be quick and must not block; keep the newest report and let
// another goroutine send it (Sink does).
package progress

import (
	"context"
	"sync"
)

// Frame is one report: done of total units of phase. Total 0 means the
// work does not know its total (it counts up only).
type Frame struct {
	Done  int64
	Total int64
	Phase string
}

// Func receives the reports of work under a context.
type Func func(Frame)

type key struct{}

// With returns ctx with f to receive the reports of work under it.
func With(ctx context.Context, f Func) context.Context {
	return context.WithValue(ctx, key{}, f)
}

// Of returns ctx's Func, or one that does nothing: for a loop that
// reports often, looked up once.
func Of(ctx context.Context) Func {
	if f, ok := ctx.Value(key{}).(Func); ok && f != nil {
		return f
	}
	return func(Frame) {}
}

// Report tells ctx's Func, if any, that done of total units of phase are
// done.
func Report(ctx context.Context, phase string, done, total int64) {
	if f, ok := ctx.Value(key{}).(Func); ok && f != nil {
		f(Frame{Done: done, Total: total, Phase: phase})
	}
}

// Sink keeps the newest report of work, for a goroutine other than the
// working one to send: its Report never blocks. The zero Sink is not
// ready; use NewSink.
type Sink struct {
	// Ready has a value when a report came that Take has not taken.
	Ready chan struct{}

	mu    sync.Mutex
	frame Frame // the newest report; guarded by mu
}

// NewSink returns an empty Sink.
func NewSink() *Sink { return &Sink{Ready: make(chan struct{}, 1)} }

// Report keeps f as the newest report and signals Ready. It is a Func.
func (s *Sink) Report(f Frame) {
	s.mu.Lock()
	s.frame = f
	s.mu.Unlock()
	select {
	case s.Ready <- struct{}{}:
	default: // a signal waits already: the reader takes the newest
	}
}

// Take returns the newest report.
func (s *Sink) Take() Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frame
}

// WithTotal returns ctx whose reports of an unknown total (0) carry
// total instead, an estimate (a checkpoint's count of files before the
// one being read), at least their done. Without a Func in ctx, it is ctx.
func WithTotal(ctx context.Context, total int64) context.Context {
	f, ok := ctx.Value(key{}).(Func)
	if !ok || f == nil || total <= 0 {
		return ctx
	}
	return With(ctx, func(fr Frame) {
		if fr.Total == 0 {
			fr.Total = max(total, fr.Done)
		}
		f(fr)
	})
}
