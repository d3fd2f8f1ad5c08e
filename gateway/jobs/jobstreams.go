package jobs

import (
	"context"
	"io"
	"math/bits"
	"sync"
)

// A job's output by stream. A reader follows stdout, stderr, or both
// merged in the order the gateway read them (the API's stream=all, its
// default), each with offsets of its own and each told what it lost.
//
// How it is kept, and why. Each stream has a ring of its own (a jobOutput
// of jobOutputCapacity), and the merged view has no bytes of its own: it
// is the newest jobOutputCapacity bytes of the two streams together, plus
// one bit per byte (marks) saying which stream it came from.
//
//   - The merged view's promise holds without a third ring: its window
//     is the newest 1 MiB of both streams together, so the part of it
//     that is one stream's is a suffix of that stream of at most 1 MiB,
//     which that stream's ring still holds.
//   - Each stream keeps its own newest 1 MiB: a job that floods stderr
//     does not push its stdout out of the stdout view (it does out of the
//     merged one, which keeps the newest 1 MiB of both).
//   - The marks are bits, not a list of runs: a job alternating one-byte
//     writes would make a run per byte, a list the size of the window
//     times a run's record; the bits are capacity/8 bytes whatever the
//     job does.
//
// So a job costs at most two rings and the marks: 2 MiB + 128 KiB. Each
// ring grows with its stream's output, and the marks are made at the
// first stderr byte (no bit set means stdout): a job that writes only to
// stdout costs what it cost when the output was one stream, its ring.
//
// The merged view's order between the streams is the order the gateway
// read them from their two pipes (one pipe for both, as a terminal has,
// could not tell them apart). Each stream's bytes are in the order they
// were written; between the two, jobPipes keeps the order of writes that
// a read separates, and of each pipe's first write since the last read
// (jobpipes_linux.go): writes to both that come while the gateway is busy
// come stream by stream.

// streamID names one of a job's output streams.
type streamID uint8

const (
	stdoutStream streamID = iota
	stderrStream
)

// String is the stream's name in the API.
func (s streamID) String() string {
	if s == stderrStream {
		return "stderr"
	}
	return "stdout"
}

// jobStreams keeps a job's output by stream (see above). Its methods are
// safe for concurrent use. Nothing a reader does makes Write wait but the
// copy of a Read under way.
type jobStreams struct {
	capacity int
	// rings are the streams' own outputs, by streamID. A reader of one
	// stream reads its ring alone, under the ring's mu; what changes them
	// (Write, Close) does so under mu.
	rings [2]*jobOutput

	// mu is held over a write to one ring and its marks, over a read of
	// the merged view, and to look at the state: never while anyone waits.
	// A ring's mu is taken under it, never the other way.
	mu sync.Mutex
	// total is the bytes of both streams written since the job started,
	// the merged view's end.
	total int64
	// marks has bit x%capacity set when the merged byte at offset x, while
	// it is kept, came from stderr. nil until the first stderr byte: no
	// bit set, every byte from stdout. It grows like a ring's buffer.
	marks []uint64
	ended bool // Close was called
	// more is closed by the next Write or Close to wake the readers of the
	// merged view that wait; made by the first one (as jobOutput.more).
	more chan struct{}
}

// newJobStreams returns an empty output that keeps the newest capacity
// bytes of each stream and of both merged; capacity must be positive.
func newJobStreams(capacity int) *jobStreams {
	return &jobStreams{capacity: capacity, rings: [2]*jobOutput{newJobOutput(capacity), newJobOutput(capacity)}}
}

// Write appends p to stream s, and to the merged view. It never fails
// before Close; after Close it fails with io.ErrClosedPipe and keeps
// nothing.
func (o *jobStreams) Write(s streamID, p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return 0, io.ErrClosedPipe
	}
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	o.rings[s].Write(p)
	// Of a write longer than the window only its tail is in the window.
	k := min(n, o.capacity)
	o.mark(o.total+int64(n-k), k, s == stderrStream)
	o.total += int64(n)
	if o.more != nil {
		close(o.more)
		o.more = nil
	}
	return n, nil
}

// Close marks the end of every view: waiting readers wake, and a reader
// that read to the end is told it ended. Calling it again does nothing.
func (o *jobStreams) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	for _, r := range o.rings {
		r.Close()
	}
	if o.more != nil {
		close(o.more)
		o.more = nil
	}
}

// Size returns how many bytes the job wrote to both streams, and how many
// of them the merged view no longer keeps.
func (o *jobStreams) Size() (total, dropped int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total, o.total - min(o.total, int64(o.capacity))
}

// stream returns the view of stream s alone.
func (o *jobStreams) stream(s streamID) outputView { return streamView{o.rings[s], s} }

// merged returns a view of both streams merged, for one reader: it
// remembers where the reader is, so that following costs no more than
// the bytes read.
func (o *jobStreams) merged() outputView { return &mergedView{o: o} }

// outputView is what a reader of a job's output reads: one stream, or
// both merged. Read and Wait are as jobOutput's, with offsets of the
// view, and Read also says which stream the bytes it copied came from
// (all from one). Size is the view's total and dropped bytes.
type outputView interface {
	Read(off int64, p []byte) (n int, start int64, s streamID, ended bool)
	Wait(ctx context.Context, off int64) error
	Size() (total, dropped int64)
}

// streamView is one stream's ring as a view.
type streamView struct {
	r *jobOutput
	s streamID
}

func (v streamView) Read(off int64, p []byte) (int, int64, streamID, bool) {
	n, start, ended := v.r.Read(off, p)
	return n, start, v.s, ended
}

func (v streamView) Wait(ctx context.Context, off int64) error { return v.r.Wait(ctx, off) }
func (v streamView) Size() (int64, int64)                      { return v.r.Size() }

// mergedView is the merged view for one reader, who uses it from one
// goroutine. at and out say that out of the merged bytes before offset at,
// out came from stdout (a fact that stays true as the window moves on);
// known says they are set.
type mergedView struct {
	o       *jobStreams
	known   bool
	at, out int64
}

// Read copies merged output from off on into p, as jobOutput.Read does,
// but only bytes of one stream, s: it stops where the other stream's
// bytes begin.
func (v *mergedView) Read(off int64, p []byte) (n int, start int64, s streamID, ended bool) {
	o := v.o
	o.mu.Lock()
	defer o.mu.Unlock()
	low := o.total - min(o.total, int64(o.capacity))
	start = max(off, low)
	if start >= o.total || len(p) == 0 {
		return 0, start, stdoutStream, o.ended && start >= o.total
	}
	if o.marked(start) {
		s = stderrStream
	}
	end := o.change(start, min(o.total, start+int64(len(p))), s == stderrStream)
	// How many stdout bytes precede start: counted from where this
	// reader was, if that is still in the window, else back from the end.
	var out int64
	if v.known && v.at >= low && v.at <= start {
		out = v.out + (start - v.at) - o.countErr(v.at, start)
	} else {
		outTotal, _ := o.rings[stdoutStream].Size()
		out = outTotal - ((o.total - start) - o.countErr(start, o.total))
	}
	at := out // the offset of start in stream s
	if s == stderrStream {
		at = start - out
	}
	want := int(end - start)
	got, from, _ := o.rings[s].Read(at, p[:want])
	if got != want || from != at {
		// The window is within each ring (see above): this is a bug.
		panic("gateway: the merged view of a job's output lost bytes its stream still keeps")
	}
	v.known, v.at, v.out = true, end, out
	if s == stdoutStream {
		v.out += int64(want)
	}
	return want, start, s, o.ended && end >= o.total
}

// Wait blocks until the merged view holds a byte at off or later, or the
// output ended, as jobOutput.Wait.
func (v *mergedView) Wait(ctx context.Context, off int64) error {
	o := v.o
	return waitPast(ctx, &o.mu, &o.total, &o.ended, &o.more, off)
}

func (v *mergedView) Size() (int64, int64) { return v.o.Size() }

// The marks, one bit per merged byte in the window, at bit x%capacity
// for offset x. Ranges of offsets are at most capacity long, so they
// cover at most two spans of bits: up to the end of the bits and from
// their start. o.mu must be held by each of these.

// mark sets (stderr) or clears the marks of the n merged bytes from
// offset from (n <= capacity).
func (o *jobStreams) mark(from int64, n int, stderr bool) {
	if o.marks == nil && !stderr {
		return // no mark made yet: every byte is stdout's already
	}
	o.growMarks(from + int64(n))
	o.spans(from, from+int64(n), func(a, b int) bool {
		setBits(o.marks, a, b, stderr)
		return true
	})
}

// growMarks makes the marks long enough for the offsets before end. Until
// the window is full no offset has wrapped, and a bit keeps its place in
// a longer slice.
func (o *jobStreams) growMarks(end int64) {
	full := (o.capacity + 63) / 64
	need := int((min(end, int64(o.capacity)) + 63) / 64)
	if need <= len(o.marks) {
		return
	}
	size := min(max(need, 2*len(o.marks)), full)
	marks := make([]uint64, size)
	copy(marks, o.marks)
	o.marks = marks
}

// marked says whether the merged byte at offset x came from stderr.
func (o *jobStreams) marked(x int64) bool {
	i := int(x % int64(o.capacity))
	return i/64 < len(o.marks) && o.marks[i/64]&(1<<(i%64)) != 0
}

// countErr counts the stderr bytes of the merged offsets [from, to).
func (o *jobStreams) countErr(from, to int64) int64 {
	var n int64
	o.spans(from, to, func(a, b int) bool {
		n += int64(countBits(o.marks, a, b))
		return true
	})
	return n
}

// change returns the first merged offset in [from, to) whose byte is not
// of the stream stderr says, or to.
func (o *jobStreams) change(from, to int64, stderr bool) int64 {
	at := to
	pos := from
	o.spans(from, to, func(a, b int) bool {
		if i := findBit(o.marks, a, b, !stderr); i < b {
			at = pos + int64(i-a)
			return false
		}
		pos += int64(b - a)
		return true
	})
	return at
}

// spans calls fn with the spans of bit indexes, in order, that hold the
// merged offsets [from, to) (to-from <= capacity), until fn returns false.
func (o *jobStreams) spans(from, to int64, fn func(a, b int) bool) {
	if from >= to {
		return
	}
	a := int(from % int64(o.capacity))
	n := int(to - from)
	if a+n <= o.capacity {
		fn(a, a+n)
		return
	}
	if fn(a, o.capacity) {
		fn(0, a+n-o.capacity)
	}
}

// setBits sets (v) or clears bits [a, b) of w, which must hold them.
func setBits(w []uint64, a, b int, v bool) {
	for a < b {
		i, lo := a/64, a%64
		hi := min(64, lo+(b-a))
		m := maskBits(lo, hi)
		if v {
			w[i] |= m
		} else {
			w[i] &^= m
		}
		a += hi - lo
	}
}

// countBits counts the set bits [a, b) of w; bits past w's end are clear.
func countBits(w []uint64, a, b int) int {
	n := 0
	for a < b {
		i, lo := a/64, a%64
		hi := min(64, lo+(b-a))
		if i >= len(w) {
			break
		}
		n += bits.OnesCount64(w[i] & maskBits(lo, hi))
		a += hi - lo
	}
	return n
}

// findBit returns the first index in [a, b) whose bit is v, or b; bits
// past w's end are clear.
func findBit(w []uint64, a, b int, v bool) int {
	for a < b {
		i, lo := a/64, a%64
		hi := min(64, lo+(b-a))
		var word uint64
		if i < len(w) {
			word = w[i]
		}
		if !v {
			word = ^word
		}
		if m := word & maskBits(lo, hi); m != 0 {
			return i*64 + bits.TrailingZeros64(m)
		}
		a += hi - lo
	}
	return b
}

// maskBits has bits [lo, hi) set, 0 <= lo < hi <= 64.
func maskBits(lo, hi int) uint64 {
	m := ^uint64(0) << lo
	if hi < 64 {
		m &= (1 << hi) - 1
	}
	return m
}
