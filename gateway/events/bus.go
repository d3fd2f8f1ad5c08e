package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/meta"
)

// Config is what a Bus needs.
type Config struct {
	// LogPath is the event log's file (log.go), made if it is missing;
	// LogSize is how many of the newest events it keeps: 0 means
	// DefaultLogSize, a negative number none (no file either).
	LogPath string
	LogSize int
	// Buffer bounds the events queued for one subscriber; 0 means
	// DefaultBuffer.
	Buffer int
	// Refusals counts the refusals the mounts report through OnRefusal
	// and OnStale.
	Refusals Refusals
	// Logger logs the streams' beginnings and ends.
	Logger hclog.Logger
}

// Refusals counts refusals by kind; package metrics' Metrics is one.
type Refusals interface {
	Refused(kind string)
}

// The kinds of refusal the mounts' callbacks count: the kinds of
// warren_refusals_total (metrics.RefusedEscape, metrics.RefusedStale),
// spelled here because events imports no other room.
const (
	refusedEscape = "escape"
	refusedStale  = "stale"
)

// Bus is the daemon's event stream: its broker, its log and its file
// events. New makes one; Close ends it.
type Bus struct {
	// run names this run of the daemon's events (api.HeaderEventRun):
	// a new one at each start. Never changed.
	run       string
	b         *broker     // never changed
	files     *fileEvents // never changed
	refusals  Refusals
	log       hclog.Logger
	closeOnce sync.Once
}

// New opens the event log, if cfg asks for one, numbering on from its
// newest event, and starts the file events' window goroutine.
func New(cfg Config) (*Bus, error) {
	if cfg.Buffer == 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.LogSize == 0 {
		cfg.LogSize = DefaultLogSize
	}
	var run [8]byte
	rand.Read(run[:])
	bus := &Bus{run: hex.EncodeToString(run[:]), b: newBroker(cfg.Buffer), refusals: cfg.Refusals, log: cfg.Logger}
	if cfg.LogSize > 0 {
		l, err := openEventLog(cfg.LogPath, cfg.LogSize)
		if err != nil {
			return nil, err
		}
		bus.b.attachLog(l)
	}
	bus.files = newFileEvents(bus.b.Emit)
	return bus, nil
}

// Emit tells every interested subscriber about ev. It never blocks: a
// subscriber that is behind loses the event (see broker.Emit). The
// broker sets Seq and Time. After Close it does nothing.
func (bus *Bus) Emit(ev api.Event) { bus.b.Emit(ev) }

// Wants says whether any subscriber would take an event of thread k (or
// one that left lately might come back for it), so that a costly event
// (a job's output, a file's change) is only built for someone.
func (bus *Bus) Wants(k meta.ThreadKey) bool { return bus.b.Wants(k) }

// OnChange returns the change callback of thread k's mounts and file API
// (fs.Options.OnChange, fs.Files.WatchChanges): each change becomes a
// file event, a burst of changes of one path one per window (files.go).
func (bus *Bus) OnChange(k meta.ThreadKey) func(fs.EntryChange) { return bus.files.of(k) }

// OnRefusal returns the fs.Options.OnRefusal of a mount of thread k:
// each refused escape is counted and becomes an escape.refused event of
// that thread. fs calls it on its request goroutines; Emit does not
// block them.
func (bus *Bus) OnRefusal(k meta.ThreadKey) func(fs.Refusal) {
	return func(r fs.Refusal) {
		bus.refusals.Refused(refusedEscape)
		msg := fmt.Sprintf("%s of %s refused: %s", r.Op, r.Path, r.Reason)
		if r.Target != "" {
			msg += fmt.Sprintf(" (link target %q)", r.Target)
		}
		bus.Emit(api.Event{Type: api.EventEscapeRefused, Tenant: k.Tenant, Thread: k.Thread, Path: r.Path, Message: msg})
	}
}

// OnStale returns the fs.Options.OnStale of thread k (and of its file
// API): a refused stale write, logged by fs, is counted and sent as a
// write.stale event here.
func (bus *Bus) OnStale(k meta.ThreadKey) func(fs.Stale) {
	return func(s fs.Stale) {
		bus.refusals.Refused(refusedStale)
		bus.Emit(api.Event{
			Type:    api.EventWriteStale,
			Tenant:  k.Tenant,
			Thread:  k.Thread,
			Actor:   s.Actor.String(),
			Path:    s.Path,
			Message: s.Message(),
		})
	}
}

// Stats returns the subscribers now and the events dropped so far for a
// subscriber's full queue.
func (bus *Bus) Stats() (subscribers int, missed uint64) { return bus.b.stats() }

// Close ends every subscription (a stream sends what its queue holds,
// then ends) and refuses new ones, stops the file events' window
// goroutine and waits for it (changes held back are dropped: nobody
// reads them any more), and closes the log. Emit does nothing after it.
// Calling it again does nothing.
func (bus *Bus) Close() {
	bus.closeOnce.Do(func() {
		bus.b.close()
		bus.files.close()
	})
}

// LogError returns the event log's first error (a write or its close),
// if it had one.
func (bus *Bus) LogError() error { return bus.b.logError() }

// Subscription is an in-process reader of the live events of one tenant
// and thread.
type Subscription struct {
	s    *subscription
	held *api.Event // the event after a missed event Next returned
}

// Subscribe follows the events of tenant and thread ("" matches any)
// emitted from now on. The caller must Cancel it. It fails with
// api.ErrClosed once the Bus is closed.
func (bus *Bus) Subscribe(tenant, thread string) (*Subscription, error) {
	s, err := bus.b.subscribe(eventFilter{tenant: tenant, thread: thread})
	if err != nil {
		return nil, err
	}
	return &Subscription{s: s}, nil
}

// Next returns the next event, as a stream would send it: a missed event
// first where the queue lost some. It returns api.ErrClosed once the
// subscription ended (Cancel, or the Bus closed) and its queue is empty,
// and ctx's error if ctx ends first.
func (sub *Subscription) Next(ctx context.Context) (api.Event, error) {
	if ev := sub.held; ev != nil {
		sub.held = nil
		return *ev, nil
	}
	select {
	case d, ok := <-sub.s.ch:
		if !ok {
			return api.Event{}, api.ErrClosed
		}
		ev, err := d.event()
		if err != nil {
			return api.Event{}, fmt.Errorf("decode an event: %w", err)
		}
		if d.missed > 0 {
			sub.held = &ev
			return sub.s.missedEvent(d), nil
		}
		return ev, nil
	case <-ctx.Done():
		return api.Event{}, ctx.Err()
	}
}

// Cancel ends the subscription. Calling it again does nothing.
func (sub *Subscription) Cancel() { sub.s.cancel() }
