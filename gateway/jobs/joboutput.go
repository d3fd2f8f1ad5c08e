package jobs

import (
	"context"
	"io"
	"sync"
)

// One stream of a background job's output (stdout or stderr: a job keeps
// each in a jobOutput of its own, and both merged, jobstreams.go), kept in
// memory for clients to read and follow while it runs.
//
// The job must never wait for a client. So the output keeps only its
// newest bytes, and a client that falls further behind than that loses
// the bytes in between rather than holding the job back. Offsets are
// absolute, counted from the job's first byte: they mean the same to every
// reader and survive drops, and a reader that asked for offset off and got
// bytes from start knows it lost exactly start-off of them.
//
// A reader is a loop of Wait (for bytes past its offset) and Read (copy
// what is there). Nothing a reader does makes Write wait: readers hold the
// mutex only to copy kept bytes out, and a waiting or stalled reader holds
// nothing at all.

// jobOutputCapacity is how much of a job's output the gateway keeps: the
// newest 1 MiB, enough for the tail of a build log or a server's recent
// requests, and bounded so that many jobs cannot fill the gateway's memory.
const jobOutputCapacity = 1 << 20

// jobOutput keeps the newest capacity bytes of a job's output and wakes
// the readers that wait for more. Its methods are safe for concurrent use.
type jobOutput struct {
	capacity int

	// mu is a leaf, held only to copy bytes in or out (at most capacity of
	// them) and to look at the state: never while anyone waits.
	mu sync.Mutex
	// buf is the ring: the byte at absolute offset x, while it is kept, is
	// at buf[x%capacity]. It grows to capacity as output comes, so a job
	// that writes little holds little.
	buf   []byte
	total int64 // bytes written since the job started
	ended bool  // Close was called
	// more is closed by the next Write or Close to wake the readers that
	// wait. It is made by the first waiter and dropped when closed, so a
	// write that nobody waits for allocates nothing.
	more chan struct{}
}

// newJobOutput returns an empty output that keeps the newest capacity
// bytes; capacity must be positive.
func newJobOutput(capacity int) *jobOutput {
	if capacity <= 0 {
		panic("gateway: job output capacity must be positive")
	}
	return &jobOutput{capacity: capacity}
}

// Write appends p to the output and wakes the waiting readers. Only the
// newest capacity bytes stay; of a p longer than that only its tail is
// copied. It never waits for a reader to read: at most for a Read's copy
// under way to finish. It never fails before Close; after Close it fails
// with io.ErrClosedPipe and keeps nothing, since readers may already have
// been told the output ended.
func (o *jobOutput) Write(p []byte) (int, error) {
	n := len(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return 0, io.ErrClosedPipe
	}
	if n == 0 {
		return 0, nil
	}
	if n > o.capacity {
		// The head of p would be pushed out by its own tail: count it,
		// never copy it.
		o.total += int64(n - o.capacity)
		p = p[n-o.capacity:]
	}
	o.grow(len(p))
	at := int(o.total % int64(o.capacity))
	k := copy(o.buf[at:], p)
	copy(o.buf, p[k:])
	o.total += int64(len(p))
	o.wake()
	return n, nil
}

// grow makes buf long enough for n more bytes at their ring positions
// (n <= capacity). Before the ring is full no byte has wrapped, so a
// plain copy keeps every byte at its position.
func (o *jobOutput) grow(n int) {
	need := o.total + int64(n)
	if need <= int64(len(o.buf)) || len(o.buf) == o.capacity {
		return
	}
	size := o.capacity
	if need < int64(size) {
		size = min(max(int(need), 2*len(o.buf)), o.capacity)
	}
	buf := make([]byte, size)
	copy(buf, o.buf)
	o.buf = buf
}

// wake wakes every reader waiting in Wait; mu is held.
func (o *jobOutput) wake() {
	if o.more != nil {
		close(o.more)
		o.more = nil
	}
}

// Close marks the end of the output: waiting readers wake, and a reader
// that has read up to the end is told it ended. Calling it again does
// nothing.
func (o *jobOutput) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	o.wake()
}

// Read copies kept output, from absolute offset off on, into p; it never
// waits. It returns how many bytes it copied (at most len(p)), the offset
// of the first of them, and whether the output ended and those bytes reach
// its end.
//
// start is off when the byte at off is still kept. When it was dropped,
// start is the oldest kept byte, and start-off bytes are lost to this
// reader. A negative off reads from the oldest kept byte (the API checks
// offsets; this is the "from wherever the output now starts" of a reader
// that does not care). An off at or past the end copies nothing and
// returns start == off: the bytes are not written yet, and the reader
// waits for them.
func (o *jobOutput) Read(off int64, p []byte) (n int, start int64, ended bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	start = max(off, o.total-int64(min(o.total, int64(o.capacity))))
	if start < o.total {
		n = int(min(int64(len(p)), o.total-start))
		at := int(start % int64(o.capacity))
		k := copy(p[:n], o.buf[at:])
		copy(p[k:n], o.buf)
	}
	return n, start, o.ended && start+int64(n) >= o.total
}

// Wait blocks until the output holds a byte at off or later, or it ended;
// then Read has something to say. A negative off waits for any byte, like
// Read's oldest kept one. Once ctx is done Wait returns ctx.Err(), even if
// there are bytes: a reader that keeps up still stops when told to. A
// waiter that gives up leaves nothing behind: it waits on a channel that
// the next Write closes, and starts no goroutine.
func (o *jobOutput) Wait(ctx context.Context, off int64) error {
	return waitPast(ctx, &o.mu, &o.total, &o.ended, &o.more, off)
}

// waitPast is the wait of an output whose state mu guards: until more
// than max(off, 0) bytes were written (total) or the output ended, waking
// at each close of more, which the next write or close makes (the first
// waiter makes the channel). It returns ctx.Err() once ctx is done.
func waitPast(ctx context.Context, mu *sync.Mutex, total *int64, ended *bool, more *chan struct{}, off int64) error {
	off = max(off, 0)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		mu.Lock()
		if *total > off || *ended {
			mu.Unlock()
			return nil
		}
		if *more == nil {
			*more = make(chan struct{})
		}
		ch := *more
		mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Size returns how many bytes the job wrote, and how many of them are no
// longer kept.
func (o *jobOutput) Size() (total, dropped int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total, o.total - min(o.total, int64(o.capacity))
}
