package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// The event stream: what happens to threads, told to whoever listens on
// GET /v1/events, as it happens.
//
// The gateway owns one broker. emit hands it an event; the broker numbers
// it, stamps it and queues it for every subscriber whose filter it passes.
// emit never waits for a subscriber: each has a bounded queue, and an event
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
// g.emit where it happens; fields that apply to every event go into Event.

// eventBuffer bounds the events queued for one subscriber. A reader that
// falls this far behind loses events (and is told how many) rather than
// making the gateway wait or grow without bound.
const eventBuffer = 1024

// streamCloseGrace is how long a stream may take to end once the gateway
// closes. A reader ends at once; a client that stopped reading leaves its
// handler stuck in a write, which only a write deadline ends.
const streamCloseGrace = time.Second

// streamBatch bounds the events a stream writes before it flushes, and
// streamLinger how long at most it waits for more while events keep
// coming (ServeStream).
const (
	streamBatch  = 256
	streamLinger = 10 * time.Millisecond
)

// emit tells every interested subscriber about ev. It never blocks: a
// subscriber that is behind loses the event (see broker.Emit). The
// broker sets Seq and Time.
func (g *Gateway) emit(ev api.Event) {
	g.events.Emit(ev)
}

// refusalEvents returns the fs.Options.OnRefusal of a mount of thread k:
// each refused escape becomes an escape.refused event of that thread.
// fs calls it on its request goroutines; emit does not block them.
func (g *Gateway) refusalEvents(k meta.ThreadKey) func(fs.Refusal) {
	return func(r fs.Refusal) {
		g.metrics.Refused(refusedEscape)
		msg := fmt.Sprintf("%s of %s refused: %s", r.Op, r.Path, r.Reason)
		if r.Target != "" {
			msg += fmt.Sprintf(" (link target %q)", r.Target)
		}
		g.emit(api.Event{Type: api.EventEscapeRefused, Tenant: k.Tenant, Thread: k.Thread, Path: r.Path, Message: msg})
	}
}

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

func (f eventFilter) match(ev api.Event) bool {
	if f.prefix != "" && (!strings.HasPrefix(string(ev.Type), "file.") ||
		!strings.HasPrefix(ev.Path, f.prefix) && (ev.From == "" || !strings.HasPrefix(ev.From, f.prefix))) {
		return false
	}
	return (f.tenant == "" || f.tenant == ev.Tenant) && (f.thread == "" || f.thread == ev.Thread)
}

// broker fans events out to subscribers. Start makes one per gateway;
// Close closes it, which ends every subscription.
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
	s := &subscription{b: b, filter: f, ch: make(chan delivery, b.buffer)}
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
			b.logErr = err // told once, by the gateway (closeLog)
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

// handleEvents answers GET /v1/events[?tenant=T][&thread=ID]: it checks
// the filter and subscribes, and the router then runs the stream it
// returns. Subscribing before the answer starts means that a client that
// has the response headers gets every event emitted after them.
func (g *Gateway) handleEvents(r *http.Request, _ call.Params) (any, error) {
	q, err := call.Query(r, "tenant", "thread", "prefix", "since")
	if err != nil {
		return nil, err
	}
	f, err := eventFilterOf(q)
	if err != nil {
		return nil, err
	}
	if p, ok := q["prefix"]; ok {
		if err := call.CheckPath("prefix", p[0]); err != nil {
			return nil, err
		}
		f.prefix = p[0]
		if !strings.HasPrefix(f.prefix, "/") {
			f.prefix = "/" + f.prefix
		}
	}
	var since *uint64
	if v, ok := q["since"]; ok {
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: since must be an event's seq, a number: %s", api.ErrInvalid, call.Quote(v[0]))
		}
		since = &n
	}
	sub, err := g.events.subscribeSince(f, since)
	if err != nil {
		return nil, fmt.Errorf("subscribe to events: %w", err)
	}
	return &eventStream{g: g, sub: sub}, nil
}

// eventFilterOf reads the filter of GET /v1/events. The ids follow the
// rules of every other call: a thread without a tenant is a thread of the
// default tenant, and an empty tenant is the default tenant. No parameter
// means every event.
func eventFilterOf(q url.Values) (eventFilter, error) {
	_, hasTenant := q["tenant"]
	thread, hasThread := q["thread"]
	switch {
	case hasThread:
		k, err := call.ThreadKey(q.Get("tenant"), thread[0])
		if err != nil {
			return eventFilter{}, err
		}
		return eventFilter{tenant: k.Tenant, thread: k.Thread}, nil
	case hasTenant:
		// threadKey checks and defaults the tenant; the placeholder thread
		// always passes, so any error is about the tenant.
		k, err := call.ThreadKey(q.Get("tenant"), "-")
		if err != nil {
			return eventFilter{}, err
		}
		return eventFilter{tenant: k.Tenant}, nil
	}
	return eventFilter{}, nil
}

// eventStream is the answer of GET /v1/events: NDJSON, one event per
// line, until the client goes away or the gateway closes; a burst of
// events is flushed at most once per streamLinger.
type eventStream struct {
	g   *Gateway
	sub *subscription
}

func (s *eventStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	defer s.sub.cancel()
	log := s.g.log.With("tenant", s.sub.filter.tenant, "thread", s.sub.filter.thread, "peer_uid", call.PeerFrom(r.Context()).UID)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		log.Debug("event stream: send headers", "error", err)
		return
	}
	log.Debug("event stream opened")

	// The watcher below belongs to this stream: it is told to stop and
	// waited for when the stream ends.
	finished, watched := make(chan struct{}), make(chan struct{})
	defer func() {
		close(finished)
		<-watched
	}()
	go func() {
		defer close(watched)
		select {
		case <-finished:
			return
		case <-s.g.events.done:
		}
		select {
		case <-finished:
		case <-time.After(streamCloseGrace):
			// Stuck in a write to a client that does not read: cut it,
			// so that Close does not wait for it.
			_ = rc.SetWriteDeadline(time.Now())
		}
	}()

	write := func(ev api.Event) error {
		line, err := encodeEvent(ev)
		if err != nil {
			return err
		}
		_, err = w.Write(line)
		return err
	}
	deliver := func(d delivery) error {
		if d.missed > 0 {
			if err := write(s.sub.missedEvent(d)); err != nil {
				return err
			}
		}
		_, err := w.Write(d.line)
		return err
	}
	// What the reader missed since its since: first how many are no
	// longer kept, then the kept ones, then the live ones.
	if s.sub.lost > 0 {
		if err := write(api.Event{Time: time.Now().UTC(), Type: api.EventMissed, Tenant: s.sub.filter.tenant, Thread: s.sub.filter.thread,
			Missed: s.sub.lost, Message: fmt.Sprintf("events %d to %d are no longer kept", s.sub.lostFrom, s.sub.lostTo)}); err != nil {
			return
		}
	}
	for _, line := range s.sub.replay {
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			// The log's lines are the daemon's own encoding.
			log.Error("event stream: a kept event does not parse", "error", err)
			continue
		}
		if !s.sub.filter.match(ev) {
			continue
		}
		if _, err := w.Write(line); err != nil {
			log.Debug("event stream ended: write failed", "error", err)
			return
		}
	}
	s.sub.replay = nil
	if err := rc.Flush(); err != nil {
		log.Debug("event stream ended: write failed", "error", err)
		return
	}
	// The live events. The first after a quiet spell is sent at once.
	// While they keep coming, the stream flushes at most once per
	// streamLinger: it sleeps out the rest of the interval, not woken by
	// each new event (the queue holds them), then sends what came in one
	// write. A reader of a busy thread (an untar: thousands of events a
	// second) and this goroutine then wake a few hundred times a second,
	// not once per event, and no event waits more than streamLinger.
	var lastFlush time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		var d delivery
		var ok bool
		select {
		case d, ok = <-s.sub.ch:
		case <-r.Context().Done():
			log.Debug("event stream ended: the client went away")
			return
		}
		if !ok {
			log.Debug("event stream ended: the gateway is closing")
			return
		}
		err := deliver(d)
		if wait := streamLinger - time.Since(lastFlush); err == nil && wait > 0 {
			linger.Reset(wait)
			select {
			case <-linger.C:
			case <-s.g.events.done: // closing: send what is queued now
				linger.Stop()
			case <-r.Context().Done():
				log.Debug("event stream ended: the client went away")
				return
			}
		}
		n := 1
	batch:
		for ; err == nil && n < streamBatch; n++ {
			select {
			case d, ok = <-s.sub.ch:
				if !ok {
					break batch
				}
				err = deliver(d)
			default:
				break batch
			}
		}
		if err == nil {
			err = rc.Flush()
		}
		lastFlush = time.Now()
		if n == streamBatch {
			// More may be queued than one write takes: the next goes at
			// once, so a fast thread does not fill the queue.
			lastFlush = time.Time{}
		}
		if err != nil {
			log.Debug("event stream ended: write failed", "error", err)
			return
		}
		if !ok {
			log.Debug("event stream ended: the gateway is closing")
			return
		}
	}
}
