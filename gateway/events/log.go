package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"warren/api"
)

// The event log keeps the newest events, so that a reader that comes back
// (GET /v1/events?since=N) is given what it missed, across restarts too.
// It is a file in the data folder (events.log) of JSON lines, one per
// event, and a ring of the same events in memory.
//
// The file is made at its full size and mapped into memory (shared), and
// an event's line is copied into the mapping: publishing an event, which
// a FUSE request does under its path lock, costs a copy, not a system
// call. The copy is in the page cache once it is done, as a write(2)
// would be, so a daemon killed at any moment keeps every event a reader
// saw, and every event of a change that returned; a machine that loses
// power may lose the last ones. After the lines the file holds zero
// bytes. When the next line does not fit, the file is made anew with the
// ring alone (a new file, renamed over it) and room for as many again.
//
// The file's blocks are allocated when it is made (fallocate), so a copy
// into the mapping never needs a new block. Should one still fault (an
// I/O error, a file cut short by someone else), the fault is caught and
// the log goes on with pwrite(2) on the same file.

// DefaultLogSize is how many events the log keeps unless the daemon says
// otherwise (Config.LogSize).
const DefaultLogSize = 10_000

// eventLogLineRoom is the room the file keeps per event kept: lines are
// about 250 bytes, and the file is remade once it is full.
const eventLogLineRoom = 512

// eventLog is the log; its methods are called under broker.mu.
type eventLog struct {
	path string
	max  int
	ring eventRing // the newest max events
	f    *os.File
	// mem is f mapped shared, nil once a fault made the log fall back to
	// pwrite; off is where the next line goes, in both cases; size is
	// the file's size.
	mem  []byte
	off  int
	size int
}

// openEventLog reads the log at path, keeping its newest max events, and
// makes it anew with them. A line that does not parse (a torn last copy)
// is dropped.
func openEventLog(path string, max int) (*eventLog, error) {
	l := &eventLog{path: path, max: max}
	var kept []api.Event // oldest first
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the event log: %w", err)
	}
	for len(data) > 0 {
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		data = rest
		// The zero bytes after the last line; a line cut short by a
		// crash has no newline.
		line = bytes.TrimLeft(line, "\x00")
		if !complete || len(line) == 0 {
			continue
		}
		var ev api.Event
		if json.Unmarshal(line, &ev) != nil || ev.Seq == 0 {
			continue
		}
		if n := len(kept); n > 0 && ev.Seq <= kept[n-1].Seq {
			continue // not newer: a log from before a reset
		}
		kept = append(kept, ev)
		if len(kept) > 2*max {
			kept = append(kept[:0], kept[len(kept)-max:]...)
		}
	}
	l.ring = newEventRing(max)
	for _, ev := range kept {
		// Encoded anew: the line in the file may have been torn and
		// still parsed, or written by an older daemon.
		line, err := encodeEvent(ev)
		if err != nil {
			continue
		}
		l.ring.push(ev.Seq, line)
	}
	if err := l.rewrite(0); err != nil {
		return nil, err
	}
	return l, nil
}

// last is the newest event's seq, 0 if none.
func (l *eventLog) last() uint64 {
	if l.ring.n == 0 {
		return 0
	}
	return l.ring.seqAt(l.ring.n - 1)
}

// oldest is the oldest kept event's seq, 0 if none.
func (l *eventLog) oldest() uint64 {
	if l.ring.n == 0 {
		return 0
	}
	return l.ring.seqAt(0)
}

// add appends the event numbered seq, whose line (encodeEvent) is given.
// A failed write is returned; the event stays in memory.
func (l *eventLog) add(seq uint64, line []byte) error {
	l.ring.push(seq, line)
	if l.f == nil {
		return errors.New("append to the event log: it is closed")
	}
	if l.off+len(line) > l.size {
		return l.rewrite(len(line)) // the ring holds ev: the new file has it
	}
	if l.mem != nil {
		if err := l.copyLine(line); err == nil {
			return nil
		}
		// The mapping faulted: the log goes on with writes.
		unix.Munmap(l.mem)
		l.mem = nil
	}
	if _, err := l.f.WriteAt(line, int64(l.off)); err != nil {
		return fmt.Errorf("append to the event log: %w", err)
	}
	l.off += len(line)
	return nil
}

// copyLine copies line into the mapping at off, and turns a fault in the
// copy into an error instead of the end of the daemon.
func (l *eventLog) copyLine(line []byte) error {
	if err := faultless(func() { copy(l.mem[l.off:], line) }); err != nil {
		return fmt.Errorf("append to the event log: %w", err)
	}
	l.off += len(line)
	return nil
}

// faultless runs copyIn, a copy into a file's mapping, and returns a
// fault in it (an I/O error, a file cut short) as an error.
func faultless(copyIn func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("a fault in its mapping: %v", r)
		}
	}()
	copyIn()
	return nil
}

// since returns the lines of the kept events after seq, oldest first, in
// a slice of their own (the lines are shared and read-only).
func (l *eventLog) since(seq uint64) [][]byte {
	i := l.ring.n
	for i > 0 && l.ring.seqAt(i-1) > seq {
		i--
	}
	out := make([][]byte, 0, l.ring.n-i)
	for ; i < l.ring.n; i++ {
		out = append(out, l.ring.lineAt(i))
	}
	return out
}

// eventRing holds the newest events, at most len(buf), as their lines
// (the stream sends them, the file is remade from them, a replay decodes
// them): pushing one more overwrites the oldest, in place. An untar
// publishes an event for every file it makes; a slice that shifted would
// copy the whole ring.
//
// Lines, not api.Events: the ring lives as long as the daemon, and the
// garbage collector walks every pointer of it at each cycle. An Event has
// a dozen strings; a line is one allocation without pointers. With
// Events kept here the collector had 5.8% of a daemon's perf samples
// during an untar followed by a reader; with lines, 2.7% (2.2% with no
// reader, so no events at all).
type eventRing struct {
	buf   []keptEvent
	start int // the oldest
	n     int // how many are kept
}

type keptEvent struct {
	seq  uint64
	line []byte // encodeEvent of the event, shared with the streams, read-only
}

func newEventRing(max int) eventRing { return eventRing{buf: make([]keptEvent, max)} }

func (r *eventRing) push(seq uint64, line []byte) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = keptEvent{seq, line}
		r.n++
		return
	}
	r.buf[r.start] = keptEvent{seq, line}
	r.start = (r.start + 1) % len(r.buf)
}

// seqAt is the seq of the i-th kept event, oldest first; i < n.
func (r *eventRing) seqAt(i int) uint64 { return r.buf[(r.start+i)%len(r.buf)].seq }

// lineAt is the line of the i-th kept event.
func (r *eventRing) lineAt(i int) []byte { return r.buf[(r.start+i)%len(r.buf)].line }

// rewrite makes the file anew with the ring's lines, with room for about
// as many again and at least need more bytes, and renames it over the log.
// On failure the old file stays as it was.
//
// It runs under the broker's lock, inside the FUSE request whose event
// filled the file, so it copies the lines straight into the new file's
// mapping rather than into a buffer and through a write(2); the buffer
// and the write are only for a file that cannot be mapped.
func (l *eventLog) rewrite(need int) error {
	used := 0
	for i := range l.ring.n {
		used += len(l.ring.lineAt(i))
	}
	size := max(2*used, l.max*eventLogLineRoom, used+2*need)
	size = (size + 4095) &^ 4095

	tmp := l.path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("write the event log: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write the event log: %w", err)
	}
	if err := allocate(f, size); err != nil {
		return fail(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		mem = nil // the log works with writes alone
	}
	if mem != nil && faultless(func() { l.copyKept(mem) }) != nil {
		unix.Munmap(mem)
		mem = nil
	}
	if mem == nil {
		var buf bytes.Buffer
		buf.Grow(used)
		for i := range l.ring.n {
			buf.Write(l.ring.lineAt(i))
		}
		if _, err := f.WriteAt(buf.Bytes(), 0); err != nil {
			return fail(err)
		}
	}
	off := used // where the next line goes
	if err := os.Rename(tmp, l.path); err != nil {
		if mem != nil {
			unix.Munmap(mem)
		}
		return fail(err)
	}
	l.unmap()
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.mem, l.off, l.size = f, mem, off, size
	return nil
}

// copyKept copies the ring's lines to the start of mem, a new file's
// mapping (under faultless).
func (l *eventLog) copyKept(mem []byte) {
	off := 0
	for i := range l.ring.n {
		off += copy(mem[off:], l.ring.lineAt(i))
	}
}

// allocate gives f its blocks up to size, so that no later copy into its
// mapping needs one; a filesystem without fallocate gets zeros written.
func allocate(f *os.File, size int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, int64(size))
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	zeros := make([]byte, 64<<10)
	for off := st.Size(); off < int64(size); off += int64(len(zeros)) {
		n := min(int64(len(zeros)), int64(size)-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// unmap drops the mapping, if there is one.
func (l *eventLog) unmap() {
	if l.mem != nil {
		unix.Munmap(l.mem)
		l.mem = nil
	}
}

// close drops the mapping and closes the file. What was copied into the
// mapping is in the page cache already; nothing is lost.
func (l *eventLog) close() error {
	l.unmap()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
