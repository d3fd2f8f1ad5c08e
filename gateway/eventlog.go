package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"warren/api"
)

// The event log keeps the newest events, so that a reader that comes back
// (GET /v1/events?since=N) is given what it missed, across restarts too.
// It is a file of JSON lines in the data folder (events.log), and a ring
// of the same events in memory. When the file holds twice the ring's
// bound it is rewritten with the ring alone (a new file renamed over it).
//
// Events are written by group commit. publish, which runs in the path of
// the change it tells (a FUSE request, often under the path's lock), only
// queues the event's line; a goroutine the log owns writes what is queued
// in one write(2), at once, as a burst goes on. An untar's thousands of
// file events cost a few writes, not one journaled append each, which made
// an untar a third slower. An event still reaches the page cache before
// any reader is sent it: an event stream writes the log out (flush) before
// it sends anything. So a daemon killed at any moment keeps every event a
// reader saw, and loses at most the few it queued in the moment before
// that no one saw; a machine that loses power may lose the last ones.

// DefaultEventLog is how many events the log keeps unless the daemon says
// otherwise (Config.EventLog).
const DefaultEventLog = 10_000

// eventLog is the log. Lock order: writeMu, then mu; broker.mu, then mu
// (the broker calls add, since, oldest and last under its own lock).
type eventLog struct {
	path string
	max  int

	// writeMu serializes writes to the file, in the order the lines were
	// queued; it guards f and lines.
	writeMu sync.Mutex
	f       *os.File
	lines   int // lines in the file

	mu      sync.Mutex  // a leaf
	ring    []api.Event // oldest first, at most max; guarded by mu
	pending []byte      // lines queued, not yet written; guarded by mu
	queued  int         // lines in pending; guarded by mu
	err     error       // the first failed write; guarded by mu

	kick chan struct{} // a line was queued (capacity 1)
	stop chan struct{} // closed by close
	done chan struct{} // closed when the writer ended
}

// openEventLog reads the log at path, keeping its newest max events, and
// opens it for appending, with its writer running until close. A line
// that does not parse (a torn last write) is dropped.
func openEventLog(path string, max int) (*eventLog, error) {
	l := &eventLog{path: path, max: max, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the event log: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var ev api.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Seq == 0 {
			continue
		}
		if n := len(l.ring); n > 0 && ev.Seq <= l.ring[n-1].Seq {
			continue // not newer: a log from before a reset
		}
		l.ring = append(l.ring, ev)
		if len(l.ring) > 2*max {
			l.ring = append(l.ring[:0], l.ring[len(l.ring)-max:]...)
		}
	}
	if len(l.ring) > max {
		l.ring = append([]api.Event(nil), l.ring[len(l.ring)-max:]...)
	}
	if err := l.rewrite(l.ring); err != nil {
		return nil, err
	}
	go l.writer()
	return l, nil
}

// last is the newest event's seq, 0 if none.
func (l *eventLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) == 0 {
		return 0
	}
	return l.ring[len(l.ring)-1].Seq
}

// oldest is the oldest kept event's seq, 0 if none.
func (l *eventLog) oldest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) == 0 {
		return 0
	}
	return l.ring[0].Seq
}

// add keeps ev and queues its line for the writer.
func (l *eventLog) add(ev api.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode an event for the log: %w", err)
	}
	l.mu.Lock()
	l.ring = append(l.ring, ev)
	if len(l.ring) > l.max {
		// The oldest goes; append copies the live part when it grows.
		l.ring = l.ring[len(l.ring)-l.max:]
	}
	l.pending = append(append(l.pending, b...), '\n')
	l.queued++
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default: // the writer is due already
	}
	return nil
}

// since returns the kept events after seq, oldest first.
func (l *eventLog) since(seq uint64) []api.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := len(l.ring)
	for i > 0 && l.ring[i-1].Seq > seq {
		i--
	}
	return slices.Clone(l.ring[i:])
}

// writer writes what is queued whenever something is, until close.
func (l *eventLog) writer() {
	defer close(l.done)
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		}
		l.flush()
	}
}

// flush writes the queued lines, or, once the file holds twice the bound,
// rewrites it with the ring. A failed write is kept as the log's error;
// the events stay in memory.
func (l *eventLog) flush() {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.f == nil {
		return // closed
	}
	l.mu.Lock()
	if l.queued == 0 {
		l.mu.Unlock()
		return
	}
	var err error
	if l.lines+l.queued >= 2*l.max {
		ring := slices.Clone(l.ring) // the queued lines are in it
		l.pending, l.queued = l.pending[:0], 0
		l.mu.Unlock()
		err = l.rewrite(ring)
	} else {
		buf, n := l.pending, l.queued
		l.pending, l.queued = nil, 0
		l.mu.Unlock()
		if _, err = l.f.Write(buf); err != nil {
			err = fmt.Errorf("append to the event log: %w", err)
		}
		l.lines += n
		l.mu.Lock()
		if l.pending == nil {
			l.pending = buf[:0] // used again
		}
		l.mu.Unlock()
	}
	if err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
	}
}

// rewrite writes events to a new file and renames it over the log.
// writeMu is held (or the log is not yet shared).
func (l *eventLog) rewrite(events []api.Event) error {
	tmp := l.path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("write the event log: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			f.Close()
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write the event log: %w", err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		f.Close()
		return fmt.Errorf("write the event log: %w", err)
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.lines = f, len(events)
	return nil
}

// error returns the first failed write, if any.
func (l *eventLog) error() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// close stops the writer, writes what is queued and closes the file. It
// returns the log's first error.
func (l *eventLog) close() error {
	select {
	case <-l.stop:
		return l.error() // closed already
	default:
	}
	close(l.stop)
	<-l.done
	l.flush()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	err := l.f.Close()
	l.f = nil
	if first := l.error(); first != nil {
		return first
	}
	return err
}

// eventLogPath is where the log of a gateway with dataDir lives.
func eventLogPath(dataDir string) string { return filepath.Join(dataDir, "events.log") }
