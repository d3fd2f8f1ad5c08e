package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// outputTotal is how much the big tests write: fifty times what is kept.
const outputTotal = 50 << 20

// outputPattern returns n bytes of a seeded random stream: the byte at
// each offset is fixed and has no period, so bytes returned at any
// offset but their own do not match (unlike a short repeating pattern).
func outputPattern(n int) []byte {
	b := make([]byte, n)
	var seed [32]byte
	copy(seed[:], "warren job output test pattern")
	_, _ = rand.NewChaCha8(seed).Read(b)
	return b
}

// unevenChunks cuts data into writes of the sizes, taken in turn.
func unevenChunks(data []byte, sizes []int) [][]byte {
	var chunks [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(data))
		chunks = append(chunks, data[:n])
		data = data[n:]
	}
	return chunks
}

// checkRead reads from off into a buffer of size bytes and compares with
// what Read must return.
func checkRead(t *testing.T, o *jobOutput, off int64, size int, want string, wantStart int64, wantEnded bool) {
	t.Helper()
	p := make([]byte, size)
	n, start, ended := o.Read(off, p)
	if string(p[:n]) != want || start != wantStart || ended != wantEnded {
		t.Errorf("Read(%d, [%d]) = %q, start %d, ended %v; want %q, start %d, ended %v",
			off, size, p[:n], start, ended, want, wantStart, wantEnded)
	}
}

func checkSize(t *testing.T, o *jobOutput, wantTotal, wantDropped int64) {
	t.Helper()
	if total, dropped := o.Size(); total != wantTotal || dropped != wantDropped {
		t.Errorf("Size() = %d, %d; want %d, %d", total, dropped, wantTotal, wantDropped)
	}
}

// TestJobOutputOffsets walks a tiny output through every case of Read's
// offsets: before, inside and past the kept bytes, negative, across the
// wrap of the ring, a write longer than the ring, and the end.
func TestJobOutputOffsets(t *testing.T) {
	o := newJobOutput(8)
	checkRead(t, o, 0, 4, "", 0, false)
	checkRead(t, o, -3, 4, "", 0, false)
	checkSize(t, o, 0, 0)

	if n, err := o.Write([]byte("abcde")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v; want 5, nil", n, err)
	}
	checkRead(t, o, 0, 3, "abc", 0, false)
	checkRead(t, o, 3, 100, "de", 3, false)
	checkRead(t, o, 5, 100, "", 5, false) // the end: nothing yet
	checkRead(t, o, 9, 100, "", 9, false) // past the end: nothing yet
	checkRead(t, o, 2, 0, "", 2, false)   // no room
	checkRead(t, o, -1, 100, "abcde", 0, false)

	// Three bytes drop; "ijk" wraps to the front of the ring.
	o.Write([]byte("fghijk"))
	checkSize(t, o, 11, 3)
	checkRead(t, o, 0, 100, "defghijk", 3, false)
	checkRead(t, o, -1, 100, "defghijk", 3, false)
	checkRead(t, o, 5, 100, "fghijk", 5, false)
	checkRead(t, o, 6, 4, "ghij", 6, false)
	checkRead(t, o, 9, 1, "j", 9, false)

	// Longer than the ring: only its tail stays, every byte counts.
	if n, err := o.Write([]byte("ABCDEFGHIJKLMNOPQRST")); n != 20 || err != nil {
		t.Fatalf("Write = %d, %v; want 20, nil", n, err)
	}
	checkSize(t, o, 31, 23)
	checkRead(t, o, 4, 100, "MNOPQRST", 23, false)
	if n, err := o.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) = %d, %v; want 0, nil", n, err)
	}
	checkSize(t, o, 31, 23)

	o.Close()
	checkRead(t, o, 23, 100, "MNOPQRST", 23, true)
	checkRead(t, o, 23, 4, "MNOP", 23, false) // the end is not reached yet
	checkRead(t, o, 27, 4, "QRST", 27, true)
	checkRead(t, o, 31, 4, "", 31, true)
	checkRead(t, o, 40, 4, "", 40, true)
	checkRead(t, o, 0, 0, "", 23, false)

	// After the end nothing is kept, so what readers were told holds.
	if n, err := o.Write([]byte("late")); n != 0 || !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write after Close = %d, %v; want 0, %v", n, err, io.ErrClosedPipe)
	}
	o.Close()
	checkSize(t, o, 31, 23)
	checkRead(t, o, 23, 100, "MNOPQRST", 23, true)

	// A job that writes little holds little.
	small := newJobOutput(jobOutputCapacity)
	small.Write([]byte("hello"))
	if cap(small.buf) >= jobOutputCapacity {
		t.Errorf("a 5-byte output holds a %d-byte buffer", cap(small.buf))
	}
}

// TestJobOutputKeepsNewest writes 50 MiB in uneven writes, some longer
// than the 1 MiB ring, and checks after each that exactly the newest
// bytes are kept, byte for byte, at their offsets, with the right count
// of dropped ones.
func TestJobOutputKeepsNewest(t *testing.T) {
	want := outputPattern(outputTotal)
	o := newJobOutput(jobOutputCapacity)
	p := make([]byte, 2*jobOutputCapacity)
	var total int64
	// Tiny writes, odd ones, ones around the capacity and ones several
	// times it.
	sizes := []int{1, 4093, 65536, 3, 300_001, 1<<20 + 1, 17, 1 << 20, 700_001, 3<<20 + 5, 1<<20 - 1, 250_000}
	for _, c := range unevenChunks(want, sizes) {
		if n, err := o.Write(c); n != len(c) || err != nil {
			t.Fatalf("Write of %d bytes = %d, %v", len(c), n, err)
		}
		total += int64(len(c))
		kept := min(total, jobOutputCapacity)
		checkSize(t, o, total, total-kept)
		n, start, ended := o.Read(-1, p)
		if int64(n) != kept || start != total-kept || ended {
			t.Fatalf("after %d bytes: Read(-1) = %d bytes from %d, ended %v; want %d from %d, not ended",
				total, n, start, ended, kept, total-kept)
		}
		if !bytes.Equal(p[:n], want[start:total]) {
			t.Fatalf("after %d bytes: the kept bytes are not the newest %d", total, kept)
		}
	}

	const dropped = outputTotal - jobOutputCapacity
	checkSize(t, o, outputTotal, dropped)
	n, start, ended := o.Read(0, p)
	if start != dropped || n != jobOutputCapacity || ended {
		t.Fatalf("Read(0) = %d bytes from %d, ended %v; want %d from %d, not ended", n, start, ended, jobOutputCapacity, dropped)
	}
	if !bytes.Equal(p[:n], want[dropped:]) {
		t.Fatal("Read(0) did not return the newest 1 MiB")
	}
	o.Close()
	if _, _, ended := o.Read(dropped, p); !ended {
		t.Error("reading the whole ring after Close does not tell the end")
	}
}

// follower is what one reader saw of an output.
type follower struct {
	got, missed int64 // bytes read, bytes reported lost
	gaps        int   // reads that started after the offset asked
	end         int64 // the offset where it saw the end
}

// followOutput reads o from offset 0 to its end the way a client does
// (Wait, then Read into a buffer of size bytes) and checks every byte
// against want at the offset Read gives it.
func followOutput(ctx context.Context, o *jobOutput, want []byte, size int) (follower, error) {
	var f follower
	p := make([]byte, size)
	var off int64
	for {
		if err := o.Wait(ctx, off); err != nil {
			return f, err
		}
		n, start, ended := o.Read(off, p)
		if start < off || start+int64(n) > int64(len(want)) {
			return f, fmt.Errorf("Read(%d) returned %d bytes from %d", off, n, start)
		}
		if !bytes.Equal(p[:n], want[start:start+int64(n)]) {
			return f, fmt.Errorf("Read(%d): the %d bytes from %d are not the bytes written there", off, n, start)
		}
		if start > off {
			f.gaps++
		}
		f.missed += start - off
		f.got += int64(n)
		off = start + int64(n)
		if ended {
			f.end = off
			return f, nil
		}
	}
}

// writeAll writes chunks to o, closes it and returns how long it took.
func writeAll(t *testing.T, o *jobOutput, chunks [][]byte) time.Duration {
	begin := time.Now()
	for _, c := range chunks {
		if _, err := o.Write(c); err != nil {
			t.Errorf("Write: %v", err)
			break
		}
	}
	o.Close()
	return time.Since(begin)
}

// TestJobOutputFollowers writes 50 MiB as fast as it can while two
// followers read it, one in small reads and one in large ones, each of
// which must see only true bytes at their true offsets and be told of
// exactly the bytes it lost; meanwhile one reader read once and then
// stalls until the writer is done, and one waits for an offset never
// reached. The writer must finish regardless: if Write waited on any
// reader it would hang here, since the stalled one lets go only after.
func TestJobOutputFollowers(t *testing.T) {
	want := outputPattern(outputTotal)
	// Mostly small writes, so that the followers race with thousands of
	// them, and now and then one longer than the ring.
	chunks := unevenChunks(want, []int{4093, 1, 16411, 65536, 512, 8191, 1<<20 + 1, 32768, 3, 100_003, 2048})
	alone := writeAll(t, newJobOutput(jobOutputCapacity), chunks)

	o := newJobOutput(jobOutputCapacity)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The stalled reader got what was there at first and will read again
	// only after the writer finished. It reads before any other reader
	// runs, so that this first write cannot wait on one.
	o.Write(chunks[0])
	stalledBuf := make([]byte, jobOutputCapacity)
	stalledN, _, _ := o.Read(0, stalledBuf)
	release := make(chan struct{})
	stalled := make(chan error, 1)
	go func() {
		<-release
		off := int64(stalledN)
		n, start, ended := o.Read(off, stalledBuf)
		switch {
		case start != outputTotal-jobOutputCapacity || n != jobOutputCapacity || !ended:
			stalled <- fmt.Errorf("stalled reader: Read(%d) = %d bytes from %d, ended %v; want %d from %d, ended",
				off, n, start, ended, jobOutputCapacity, outputTotal-jobOutputCapacity)
		case !bytes.Equal(stalledBuf[:n], want[start:]):
			stalled <- errors.New("stalled reader: the bytes after its gap are wrong")
		default:
			stalled <- nil
		}
	}()
	sizes := []int{4 << 10, 256 << 10}
	results := make([]follower, len(sizes))
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	for i, size := range sizes {
		wg.Go(func() { results[i], errs[i] = followOutput(ctx, o, want, size) })
	}
	// The far waiter wakes on every write and goes back to sleep.
	farCtx, farCancel := context.WithCancel(context.Background())
	far := make(chan error, 1)
	go func() { far <- o.Wait(farCtx, 1<<50) }()

	wrote := make(chan time.Duration, 1)
	go func() { wrote <- writeAll(t, o, chunks[1:]) }()
	var followed time.Duration
	select {
	case followed = <-wrote:
	case <-time.After(60 * time.Second):
		close(release)
		t.Fatal("the writer did not finish in 60s while a reader stalled: Write waits on readers")
	}
	t.Logf("writing 50 MiB took %v alone, %v with two followers, a stalled reader and a waiter", alone, followed)

	close(release)
	if err := <-stalled; err != nil {
		t.Error(err)
	}
	// Close woke the far waiter; it waits no more for an output that ended.
	if err := <-far; err != nil {
		t.Errorf("far waiter: Wait = %v after Close; want nil", err)
	}
	farCancel()
	wg.Wait()
	for i, f := range results {
		if errs[i] != nil {
			t.Errorf("follower with %d-byte reads: %v", sizes[i], errs[i])
			continue
		}
		t.Logf("follower with %d-byte reads: got %d bytes, missed %d in %d gaps", sizes[i], f.got, f.missed, f.gaps)
		if f.end != outputTotal || f.got+f.missed != outputTotal {
			t.Errorf("follower with %d-byte reads: ended at %d having got %d and missed %d; want the end at %d = got + missed",
				sizes[i], f.end, f.got, f.missed, outputTotal)
		}
		if f.got < jobOutputCapacity {
			t.Errorf("follower with %d-byte reads got only %d bytes; the last 1 MiB at least was there for it", sizes[i], f.got)
		}
	}
}

// waiting reports whether some reader waits in o.Wait: only a waiter
// makes o.more.
func waiting(o *jobOutput) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.more != nil
}

// waitWaiting waits until some reader waits in o.Wait, so that what the
// test does next wakes it rather than finding bytes already there.
func waitWaiting(t *testing.T, o *jobOutput) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !waiting(o) {
		if time.Now().After(deadline) {
			t.Fatal("no reader waits")
		}
		time.Sleep(time.Millisecond)
	}
}

// startWaiters starts n calls of o.Wait(ctx, off); their results come on
// the channel.
func startWaiters(ctx context.Context, o *jobOutput, off int64, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- o.Wait(ctx, off) }()
	}
	return errs
}

// collect takes n results from errs, failing if they are slow to come.
func collect(t *testing.T, what string, errs <-chan error, n int, want error) {
	t.Helper()
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, want) {
				t.Errorf("%s: Wait = %v; want %v", what, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Wait did not return", what)
		}
	}
}

// TestJobOutputWait checks that Wait returns at once when there are bytes,
// that one write wakes every waiter for them, that Close wakes the rest,
// and that a waiter whose context ends returns its error and leaves no
// goroutine behind.
func TestJobOutputWait(t *testing.T) {
	ctx := context.Background()
	o := newJobOutput(8)
	o.Write([]byte("abc"))
	for _, off := range []int64{-5, 0, 2} {
		if err := o.Wait(ctx, off); err != nil {
			t.Errorf("Wait(%d) with 3 bytes = %v; want nil", off, err)
		}
	}

	// Waiters at the end; one write wakes them all.
	const n = 20
	errs := startWaiters(ctx, o, 3, n)
	waitWaiting(t, o)
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-errs:
		t.Fatalf("Wait(3) returned %v with no byte at 3", err)
	default:
	}
	o.Write([]byte("d"))
	collect(t, "woken by a write", errs, n, nil)

	// Waiters for a byte far past the end wake on writes but wait on.
	errs = startWaiters(ctx, o, 100, n)
	waitWaiting(t, o)
	o.Write([]byte("efghijklmno")) // wraps and drops, still short of 100
	waitWaiting(t, o)
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-errs:
		t.Fatalf("Wait(100) returned %v with %d bytes written", err, 15)
	default:
	}
	// Close wakes them: the output ended, and Read says so.
	o.Close()
	collect(t, "woken by Close", errs, n, nil)
	if err := o.Wait(ctx, 1000); err != nil {
		t.Errorf("Wait(1000) after Close = %v; want nil", err)
	}
	checkRead(t, o, 100, 8, "", 100, true)

	// Giving up: a cancelled waiter, a waiter past its deadline, and a
	// waiter whose context was done before, even though bytes are there.
	// None may leave a goroutine behind.
	before := runtime.NumGoroutine()
	o = newJobOutput(8)
	cctx, cancel := context.WithCancel(ctx)
	errs = startWaiters(cctx, o, 0, n)
	waitWaiting(t, o)
	cancel()
	collect(t, "cancelled", errs, n, context.Canceled)

	dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer dcancel()
	errs = startWaiters(dctx, o, 0, n)
	collect(t, "past its deadline", errs, n, context.DeadlineExceeded)

	// Counted before any write, which could release what a waiter left.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the waiters gave up; %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}

	o.Write([]byte("x"))
	if err := o.Wait(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context and a byte there = %v; want %v", err, context.Canceled)
	}
}

// BenchmarkJobOutputWrite measures Write in 64 KiB writes to a full 1 MiB
// ring, with nobody reading: the cost that every job pays for its output.
func BenchmarkJobOutputWrite(b *testing.B) {
	o := newJobOutput(jobOutputCapacity)
	p := outputPattern(64 << 10)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		o.Write(p)
	}
}
