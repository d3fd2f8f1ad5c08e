package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamModel is everything written to a jobStreams, to compare with
// what it keeps.
type streamModel struct {
	capacity int
	merged   []byte     // both streams, in write order
	from     []streamID // the stream of each merged byte
	streams  [2][]byte
}

func (m *streamModel) write(s streamID, p []byte) {
	m.merged = append(m.merged, p...)
	for range p {
		m.from = append(m.from, s)
	}
	m.streams[s] = append(m.streams[s], p...)
}

// wantRead is what a Read of view (nil: merged) from off into a buffer of
// size bytes must return.
func (m *streamModel) wantRead(view *streamID, off int64, size int) (data string, start int64, s streamID) {
	all := m.merged
	if view != nil {
		all = m.streams[*view]
	}
	total := int64(len(all))
	start = max(off, total-min(total, int64(m.capacity)))
	if start >= total || size == 0 {
		return "", start, stdoutStream
	}
	end := min(total, start+int64(size))
	if view != nil {
		return string(all[start:end]), start, *view
	}
	s = m.from[start]
	for i := start; i < end; i++ {
		if m.from[i] != s {
			end = i
			break
		}
	}
	return string(all[start:end]), start, s
}

// checkStreamsRead reads o's view (nil: merged, through mv, whose reader
// may be anywhere) and compares with the model.
func checkStreamsRead(t *testing.T, o *jobStreams, m *streamModel, view *streamID, mv outputView, off int64, size int) {
	t.Helper()
	v := mv
	name := "merged"
	if view != nil {
		v, name = o.stream(*view), view.String()
	}
	p := make([]byte, size)
	n, start, s, _ := v.Read(off, p)
	wantData, wantStart, wantS := m.wantRead(view, off, size)
	if string(p[:n]) != wantData || start != wantStart || (n > 0 && s != wantS) {
		t.Fatalf("%s: Read(%d, [%d]) = %q from %d of %s; want %q from %d of %s",
			name, off, size, p[:n], start, s, wantData, wantStart, wantS)
	}
}

// TestJobStreamsModel writes random runs to both streams of small outputs
// and checks after each write that every view keeps exactly its newest
// capacity bytes at their offsets: one stream alone, and both merged in
// write order, each read holding one stream's bytes and as many of them
// as the buffer and the run allow. Merged readers read from anywhere and
// also follow, as a client does, across writes and drops.
func TestJobStreamsModel(t *testing.T) {
	for _, capacity := range []int{1, 7, 64, 100, 1000} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 42))
			o := newJobStreams(capacity)
			m := &streamModel{capacity: capacity}
			// Followers of the merged view, each with its own view and
			// offset, reading in buffers of their size.
			type follower struct {
				v    outputView
				off  int64
				size int
			}
			followers := []*follower{{o.merged(), 0, 1}, {o.merged(), 0, 5}, {o.merged(), 0, capacity}, {o.merged(), 0, 3 * capacity}}
			views := []*streamID{nil, new(stdoutStream), new(stderrStream)}
			for w := range 400 {
				s := streamID(rng.IntN(2))
				if w%50 < 10 {
					s = stdoutStream // runs of one stream
				}
				size := 1 + rng.IntN(3*capacity+1)
				if rng.IntN(4) == 0 {
					size = 1 + rng.IntN(3)
				}
				p := make([]byte, size)
				for i := range p {
					p[i] = byte('a' + rng.IntN(26))
					if s == stderrStream {
						p[i] -= 'a' - 'A'
					}
				}
				if n, err := o.Write(s, p); n != size || err != nil {
					t.Fatalf("Write(%s, %d bytes) = %d, %v", s, size, n, err)
				}
				m.write(s, p)
				total := int64(len(m.merged))
				if got, dropped := o.Size(); got != total || dropped != total-min(total, int64(capacity)) {
					t.Fatalf("Size() = %d, %d after %d bytes", got, dropped, total)
				}
				for _, view := range views {
					vt := total
					if view != nil {
						vt = int64(len(m.streams[*view]))
					}
					for range 4 {
						off := rng.Int64N(vt + 2)
						checkStreamsRead(t, o, m, view, o.merged(), off, 1+rng.IntN(2*capacity))
					}
					checkStreamsRead(t, o, m, view, o.merged(), -1, 4*capacity)
				}
				// The followers read a little, so that some fall behind.
				for _, f := range followers {
					for range rng.IntN(3) {
						checkStreamsRead(t, o, m, nil, f.v, f.off, f.size)
						n, start, _, _ := f.v.Read(f.off, make([]byte, f.size))
						f.off = start + int64(n)
					}
				}
			}
			o.Close()
			for _, f := range followers {
				for {
					want, _, _ := m.wantRead(nil, f.off, f.size)
					n, start, _, ended := f.v.Read(f.off, make([]byte, f.size))
					if n != len(want) {
						t.Fatalf("follower at %d: read %d bytes, want %d", f.off, n, len(want))
					}
					f.off = start + int64(n)
					if ended {
						break
					}
				}
				if f.off != int64(len(m.merged)) {
					t.Errorf("a follower ended at %d of %d", f.off, len(m.merged))
				}
			}
		})
	}
}

// TestJobStreamsApart: a flood of stderr pushes stdout out of the merged
// view, never out of the stdout view; each view says what it dropped.
func TestJobStreamsApart(t *testing.T) {
	o := newJobStreams(8)
	o.Write(stdoutStream, []byte("out"))
	o.Write(stderrStream, []byte("0123456789"))
	o.Write(stderrStream, []byte("abcdefghijklmnopqrstuvwxyz"))
	if total, dropped := o.stream(stdoutStream).Size(); total != 3 || dropped != 0 {
		t.Errorf("stdout: %d bytes, %d dropped; want 3, 0", total, dropped)
	}
	if total, dropped := o.stream(stderrStream).Size(); total != 36 || dropped != 28 {
		t.Errorf("stderr: %d bytes, %d dropped; want 36, 28", total, dropped)
	}
	if total, dropped := o.Size(); total != 39 || dropped != 31 {
		t.Errorf("merged: %d bytes, %d dropped; want 39, 31", total, dropped)
	}
	p := make([]byte, 100)
	if n, start, s, _ := o.stream(stdoutStream).Read(0, p); string(p[:n]) != "out" || start != 0 || s != stdoutStream {
		t.Errorf("stdout: %q from %d of %s", p[:n], start, s)
	}
	if n, start, s, _ := o.stream(stderrStream).Read(0, p); string(p[:n]) != "stuvwxyz" || start != 28 || s != stderrStream {
		t.Errorf("stderr: %q from %d of %s", p[:n], start, s)
	}
	if n, start, s, _ := o.merged().Read(0, p); string(p[:n]) != "stuvwxyz" || start != 31 || s != stderrStream {
		t.Errorf("merged: %q from %d of %s", p[:n], start, s)
	}
	// Each view ends at its own end once the output ends.
	o.Close()
	for _, c := range []struct {
		v   outputView
		off int64
	}{{o.stream(stdoutStream), 3}, {o.stream(stderrStream), 36}, {o.merged(), 39}} {
		if n, start, _, ended := c.v.Read(c.off, p); n != 0 || start != c.off || !ended {
			t.Errorf("Read(%d) at the end = %d bytes from %d, ended %v", c.off, n, start, ended)
		}
		if err := c.v.Wait(context.Background(), c.off); err != nil {
			t.Errorf("Wait(%d) after Close = %v", c.off, err)
		}
	}
	if _, err := o.Write(stdoutStream, []byte("late")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write after Close: %v", err)
	}
}

// TestJobStreamsMemory: stdout alone costs its ring and no marks; the
// marks come with stderr's first byte, and grow with the output up to a
// bit a byte of the window.
func TestJobStreamsMemory(t *testing.T) {
	o := newJobStreams(jobOutputCapacity)
	o.Write(stdoutStream, make([]byte, 3<<20))
	if o.marks != nil {
		t.Errorf("stdout alone made %d words of marks", len(o.marks))
	}
	o = newJobStreams(jobOutputCapacity)
	o.Write(stdoutStream, []byte("hello "))
	o.Write(stderrStream, []byte("oops"))
	if len(o.marks) != 1 {
		t.Errorf("10 bytes have %d words of marks, want 1", len(o.marks))
	}
	o.Write(stderrStream, make([]byte, 3<<20))
	if got, want := len(o.marks)*8, jobOutputCapacity/8; got != want {
		t.Errorf("a full window has %d bytes of marks, want %d", got, want)
	}
}

// TestJobStreamsFollowers: two goroutines write stdout and stderr as fast
// as they can, as a job's two pipes do, while a reader of each view
// follows. Each stream's follower gets exactly its stream's bytes at
// their offsets, or is told it lost them; the merged follower's frames
// each hold one stream's bytes (stdout writes lower case letters, stderr
// upper case), and if it lost none, put end to end they are each
// stream's bytes in order (TestJobStreamsModel checks every byte of the
// merged view against the writes, with drops).
func TestJobStreamsFollowers(t *testing.T) {
	const perStream = 8 << 20
	want := [2][]byte{letters(perStream, 'a'), letters(perStream, 'A')}
	o := newJobStreams(jobOutputCapacity)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var readers sync.WaitGroup
	errs := make(chan error, 3)
	for _, s := range []streamID{stdoutStream, stderrStream} {
		readers.Go(func() {
			f, err := followView(ctx, o.stream(s), want[s], 64<<10)
			if err == nil && f.got+f.missed != perStream {
				err = fmt.Errorf("%s: got %d and missed %d of %d", s, f.got, f.missed, perStream)
			}
			errs <- err
		})
	}
	readers.Go(func() {
		v := o.merged()
		p := make([]byte, 64<<10)
		var off, missed int64
		var got [2]strings.Builder
		for {
			if err := v.Wait(ctx, off); err != nil {
				errs <- err
				return
			}
			n, start, s, ended := v.Read(off, p)
			if i := bytes.IndexFunc(p[:n], func(r rune) bool { return (r >= 'a') != (s == stdoutStream) }); i >= 0 {
				errs <- fmt.Errorf("merged: a frame of %s at %d holds %q", s, start, p[i])
				return
			}
			missed += start - off
			got[s].Write(p[:n])
			off = start + int64(n)
			if ended {
				break
			}
		}
		if off != 2*perStream {
			errs <- fmt.Errorf("merged: ended at %d, want %d", off, 2*perStream)
			return
		}
		if n := int64(got[0].Len() + got[1].Len()); n+missed != 2*perStream {
			errs <- fmt.Errorf("merged: got %d and missed %d of %d", n, missed, 2*perStream)
			return
		}
		// A follower that lost nothing has both streams whole, in order.
		for s := range got {
			if missed == 0 && got[s].String() != string(want[s]) {
				errs <- fmt.Errorf("merged: the %s frames are not its bytes in order", streamID(s))
				return
			}
		}
		t.Logf("merged follower: missed %d of %d bytes", missed, 2*perStream)
		errs <- nil
	})

	var writers sync.WaitGroup
	for _, s := range []streamID{stdoutStream, stderrStream} {
		writers.Go(func() {
			for _, c := range unevenChunks(want[s], []int{4093, 1, 16411, 512, 3, 65536}) {
				o.Write(s, c)
			}
		})
	}
	writers.Wait()
	o.Close()
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// letters returns n bytes of letters from first ('a' or 'A') on, in an
// order with no short period, so that bytes read at a wrong offset do not
// match.
func letters(n int, first byte) []byte {
	b := outputPattern(n)
	for i := range b {
		b[i] = first + b[i]%26
	}
	return b
}

// followView is followOutput for a view.
func followView(ctx context.Context, v outputView, want []byte, size int) (follower, error) {
	var f follower
	p := make([]byte, size)
	var off int64
	for {
		if err := v.Wait(ctx, off); err != nil {
			return f, err
		}
		n, start, _, ended := v.Read(off, p)
		if start < off || start+int64(n) > int64(len(want)) {
			return f, fmt.Errorf("Read(%d) returned %d bytes from %d", off, n, start)
		}
		if !bytes.Equal(p[:n], want[start:start+int64(n)]) {
			return f, fmt.Errorf("Read(%d): the %d bytes from %d are not the bytes written there", off, n, start)
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

// BenchmarkJobStreamsWrite is BenchmarkJobOutputWrite with both streams:
// 64 KiB writes alternating between them, nobody reading.
func BenchmarkJobStreamsWrite(b *testing.B) {
	o := newJobStreams(jobOutputCapacity)
	p := outputPattern(64 << 10)
	b.SetBytes(int64(len(p)))
	s := stdoutStream
	for b.Loop() {
		o.Write(s, p)
		s ^= 1
	}
}
