package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/meta"
)

// The event stream: what happens to threads, told to whoever listens on
// GET /v1/events, as it happens.
//
// The Bus owns one broker. Emit hands it an event; the broker numbers
// it, stamps it and queues it for every subscriber whose filter it passes.
// Emit never waits for a subscriber: each has a bounded queue, and an event
// that finds it full is dropped and counted. The next event that does fit
// carries the count, and the stream writes one "missed" event before it,
// so a slow reader learns that it lost events and how many, and the
// threads never wait for it.
//
// Order: the broker numbers and queues under one mutex, so every
// subscriber sees events in the order of their seq. The thread operations
// emit while they hold their thread's lock, so the events of one thread
// are in the order of its operations.
//
// To add a kind of event (jobs, files), add its EventType constant and call
// Emit where it happens; fields that apply to every event go into Event.

// DefaultBuffer bounds the events queued for one subscriber, unless
// Config.Buffer says otherwise. A reader that falls this far behind loses
// events (and is told how many) rather than making the gateway wait or
// grow without bound.
const DefaultBuffer = 1024

// eventFilter chooses the events of a subscription; an empty field
// matches every value.
type eventFilter struct {
	tenant, thread string
	// prefix, if set, passes only the file events of paths that start
	// with it (a rename's old or new one).
	prefix string
}

// matchThread says whether f may pass events of thread k.
func (f eventFilter) matchThread(k meta.ThreadKey) bool {
	return (f.tenant == "" || f.tenant == k.Tenant) && (f.thread == "" || f.thread == k.Thread)
}

// match says whether ev passes f. With a prefix, only the events about
// files under it pass: the file events of a path (or a rename's old path)
// that starts with it, and the restores (thread.restored) that changed
// such a path, or may have (their list of paths is cut).
func (f eventFilter) match(ev api.Event) bool {
	if f.prefix != "" {
		switch {
		case strings.HasPrefix(string(ev.Type), "file."):
			if !strings.HasPrefix(ev.Path, f.prefix) && (ev.From == "" || !strings.HasPrefix(ev.From, f.prefix)) {
				return false
			}
		case ev.Type == api.EventThreadRestored:
			if len(ev.Paths) < api.MaxEventPaths && !slices.ContainsFunc(ev.Paths, func(p string) bool { return strings.HasPrefix("/"+p, f.prefix) }) {
				return false
			}
		default:
			return false
		}
	}
	return (f.tenant == "" || f.tenant == ev.Tenant) && (f.thread == "" || f.thread == ev.Thread)
}

// broker fans events out to subscribers. New makes one per Bus; Close
// closes it, which ends every subscription.
type broker struct {
	buffer int           // queue length of each subscriber
	done   chan struct{} // closed by close

	// mu is a leaf and is held only for non-blocking work: numbering an
	// event and offering it to each queue, or adding and removing a
	// subscriber.
	mu     sync.Mutex
	seq    uint64
	closed bool
	subs   map[*subscription]struct{}
	missed uint64 // events dropped for a full queue, all subscribers together
	// log keeps the newest events for replay (eventlog.go); nil keeps
	// none. logErr is its first write error, logged once.
	log    *eventLog
	logErr error
	// left are the filters of readers that left in the last wantGrace,
	// newest last: what they would take is still built (wants), so one
	// that comes back with since finds it in the log.
	left []leftReader
}

// leftReader is a reader that went away, and when.
type leftReader struct {
	filter eventFilter
	at     time.Time
}

// wantGrace is how long after a reader left the events only built for
// readers (file events) are still built for it.
const wantGrace = 10 * time.Minute

// attachLog makes b keep its events in l, numbering on from l's newest.
func (b *broker) attachLog(l *eventLog) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = l
	b.seq = l.last()
}

// stats returns the subscribers now and the events dropped so far for a
// subscriber's full queue.
func (b *broker) stats() (subscribers int, missed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs), b.missed
}

// delivery is one queued event, as the stream sends it, with the number
// of events this subscriber lost just before it. The line alone, not the
// api.Event: a queue's buffer is scanned by the garbage collector whole,
// and an Event has a dozen strings.
type delivery struct {
	missed uint64
	at     time.Time // the event's time, for a missed event before it
	line   []byte    // encodeEvent of the event; shared, read-only
}

// event decodes d's event from its line.
func (d delivery) event() (api.Event, error) {
	var ev api.Event
	err := json.Unmarshal(d.line, &ev)
	return ev, err
}

// subscription is one subscriber's queue. Only the broker sends on ch, and
// only under its mutex, so a send that finds room never blocks; ch is
// closed by cancel or by the broker's close.
type subscription struct {
	b      *broker
	filter eventFilter
	ch     chan delivery
	missed uint64 // events dropped since the last delivery; guarded by b.mu
	// replay are the lines of the kept events after the reader's since,
	// to be sent before ch's, those that pass the filter (the stream
	// decodes them to tell, outside the broker's lock); lost is how many
	// events after since the log no longer keeps (a missed event says so
	// first), and lostFrom, lostTo their seqs. Set by subscribe, read by
	// the stream.
	replay           [][]byte
	lost             uint64
	lostFrom, lostTo uint64
	// at is the seq of the newest event when it subscribed: the stream
	// brings every event after it (or after since), so a reader that
	// saw none yet resumes from it (api.HeaderEventSeq).
	at uint64
}

func newBroker(buffer int) *broker {
	return &broker{
		buffer: buffer,
		done:   make(chan struct{}),
		subs:   make(map[*subscription]struct{}),
	}
}

// subscribe starts a subscription to the events that pass f. The caller
// must cancel it. It fails with ErrClosed once the broker is closed.
func (b *broker) subscribe(f eventFilter) (*subscription, error) {
	return b.subscribeSince(f, nil)
}

// subscribeSince is subscribe for a reader that saw the events up to
// *since (nil: none to replay): the kept events after it come first, and
// the count of those no longer kept. Registered under the same lock as
// the replay is taken, the reader gets every event after since once.
func (b *broker) subscribeSince(f eventFilter, since *uint64) (*subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, api.ErrClosed
	}
	s := &subscription{b: b, filter: f, ch: make(chan delivery, b.buffer), at: b.seq}
	if since != nil && *since < b.seq {
		first := b.seq + 1 // the oldest kept; none kept: all lost
		if b.log != nil && b.log.oldest() != 0 {
			first = b.log.oldest()
		}
		if *since+1 < first {
			s.lost, s.lostFrom, s.lostTo = first-*since-1, *since+1, first-1
		}
		if b.log != nil {
			s.replay = b.log.since(*since)
		}
	}
	b.subs[s] = struct{}{}
	return s, nil
}

// cancel ends the subscription and closes its queue. Calling it again, or
// after the broker closed, does nothing.
func (s *subscription) cancel() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if _, ok := s.b.subs[s]; ok {
		delete(s.b.subs, s)
		close(s.ch)
		if s.b.log != nil {
			// One entry per filter, the newest.
			s.b.left = slices.DeleteFunc(s.b.left, func(l leftReader) bool { return l.filter == s.filter })
			s.b.left = append(s.b.left, leftReader{s.filter, time.Now()})
		}
	}
}

// missedEvent is the missed event that precedes d.
func (s *subscription) missedEvent(d delivery) api.Event {
	return api.Event{Time: d.at, Type: api.EventMissed, Tenant: s.filter.tenant, Thread: s.filter.thread, Missed: d.missed}
}

// Emit numbers ev, stamps it and queues it for every subscriber whose
// filter it passes. A full queue drops it and counts the loss, which the
// next delivery to that subscriber carries. After close it does nothing.
func (b *broker) Emit(ev api.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.seq++
	ev.Seq = b.seq
	// Stamped under the lock, so time order is seq order.
	ev.Time = time.Now().UTC()
	// Encoded once, here, for the log and for every stream.
	line, err := encodeEvent(ev)
	if err != nil {
		// An Event is plain data: this cannot fail while it stays so.
		panic(fmt.Sprintf("encode event %s: %v", ev.Type, err))
	}
	if b.log != nil {
		if err := b.log.add(ev.Seq, line); err != nil && b.logErr == nil {
			b.logErr = err // told once, by the gateway (Bus.LogError)
		}
	}
	for s := range b.subs {
		if !s.filter.match(ev) {
			continue
		}
		// Only Emit sends, under b.mu, and the reader only takes out:
		// room seen here is still there for the send.
		if len(s.ch) == cap(s.ch) {
			s.missed++
			b.missed++
			continue
		}
		s.ch <- delivery{missed: s.missed, at: ev.Time, line: line}
		s.missed = 0
	}
}

// wants says whether any subscriber would take an event of thread k, so a
// costly event (a job's output) is only built for someone.
func (b *broker) Wants(k meta.ThreadKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.filter.matchThread(k) {
			return true
		}
	}
	// Readers that left lately, newest last; the expired ones go.
	now := time.Now()
	n := 0
	for n < len(b.left) && now.Sub(b.left[n].at) > wantGrace {
		n++
	}
	b.left = b.left[n:]
	for _, l := range b.left {
		if l.filter.matchThread(k) {
			return true
		}
	}
	return false
}

// close ends every subscription (their queues are closed after the events
// already in them) and refuses new ones. Calling it again does nothing.
func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	close(b.done)
	for s := range b.subs {
		delete(b.subs, s)
		close(s.ch)
	}
	if b.log != nil {
		if err := b.log.close(); err != nil && b.logErr == nil {
			b.logErr = err
		}
	}
}

// logError returns the event log's first error, if it had one.
func (b *broker) logError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logErr
}
