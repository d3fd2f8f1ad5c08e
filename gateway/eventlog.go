package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"warren/api"
)

// The event log keeps the newest events, so that a reader that comes back
// (GET /v1/events?since=N) is given what it missed, across restarts too.
// It is a file of JSON lines in the data folder (events.log), appended to
// as events are published, and a ring of the same events in memory.
// When the file holds twice the ring's bound it is rewritten with the
// ring alone (a new file renamed over it). A write reaches the page cache
// before the event is delivered to anyone, so a daemon killed at any
// moment keeps every event a reader saw; a machine that loses power may
// lose the last ones.

// DefaultEventLog is how many events the log keeps unless the daemon says
// otherwise (Config.EventLog).
const DefaultEventLog = 10_000

// eventLog is the log; its methods are called under broker.mu.
type eventLog struct {
	path  string
	max   int
	ring  []api.Event // oldest first, at most max
	f     *os.File
	lines int // lines in the file
}

// openEventLog reads the log at path, keeping its newest max events, and
// opens it for appending. A line that does not parse (a torn last write)
// is dropped.
func openEventLog(path string, max int) (*eventLog, error) {
	l := &eventLog{path: path, max: max}
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
	if err := l.rewrite(); err != nil {
		return nil, err
	}
	return l, nil
}

// last is the newest event's seq, 0 if none.
func (l *eventLog) last() uint64 {
	if len(l.ring) == 0 {
		return 0
	}
	return l.ring[len(l.ring)-1].Seq
}

// oldest is the oldest kept event's seq, 0 if none.
func (l *eventLog) oldest() uint64 {
	if len(l.ring) == 0 {
		return 0
	}
	return l.ring[0].Seq
}

// add appends ev, whose line (encodeEvent) is given. A failed write is
// returned; the event stays in memory.
func (l *eventLog) add(ev api.Event, line []byte) error {
	l.ring = append(l.ring, ev)
	if len(l.ring) > l.max {
		// The oldest goes; append copies the live part when it grows.
		l.ring = l.ring[len(l.ring)-l.max:]
	}
	if l.lines >= 2*l.max {
		if err := l.rewrite(); err != nil {
			return err
		}
		return nil // the rewrite wrote ev too
	}
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("append to the event log: %w", err)
	}
	l.lines++
	return nil
}

// since returns the kept events after seq, oldest first.
func (l *eventLog) since(seq uint64) []api.Event {
	i := len(l.ring)
	for i > 0 && l.ring[i-1].Seq > seq {
		i--
	}
	return l.ring[i:]
}

// rewrite writes the ring to a new file and renames it over the log.
func (l *eventLog) rewrite() error {
	tmp := l.path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("write the event log: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, ev := range l.ring {
		b, err := encodeEvent(ev)
		if err != nil {
			f.Close()
			return err
		}
		w.Write(b)
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
	l.f, l.lines = f, len(l.ring)
	return nil
}

// close closes the file.
func (l *eventLog) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// eventLogPath is where the log of a gateway with dataDir lives.
func eventLogPath(dataDir string) string { return filepath.Join(dataDir, "events.log") }
