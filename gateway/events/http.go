package events

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
)

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

// Handlers are the event stream's API calls.
type Handlers struct {
	bus *Bus
}

// NewHandlers returns the API calls of bus.
func NewHandlers(bus *Bus) *Handlers { return &Handlers{bus: bus} }

// Events answers GET /v1/events[?tenant=T][&thread=ID]: it checks
// the filter and subscribes, and the router then runs the stream it
// returns. Subscribing before the answer starts means that a client that
// has the response headers gets every event emitted after them.
func (h *Handlers) Events(r *http.Request, _ call.Params) (any, error) {
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
	sub, err := h.bus.b.subscribeSince(f, since)
	if err != nil {
		return nil, fmt.Errorf("subscribe to events: %w", err)
	}
	return &eventStream{log: h.bus.log, done: h.bus.b.done, sub: sub, run: h.bus.run}, nil
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
	log  hclog.Logger
	done <-chan struct{} // the broker's: closed when the Bus closes
	sub  *subscription
	run  string // the Bus's
}

func (s *eventStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	defer s.sub.cancel()
	log := s.log.With("tenant", s.sub.filter.tenant, "thread", s.sub.filter.thread, "peer_uid", call.PeerFrom(r.Context()).UID)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(api.HeaderEventSeq, strconv.FormatUint(s.sub.at, 10))
	w.Header().Set(api.HeaderEventRun, s.run)
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
		case <-s.done:
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
			case <-s.done: // closing: send what is queued now
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
