package fs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"warren/internal/diskquota"
	"warren/internal/testenv"
)

// patternReader gives size bytes of a pattern without holding them, and
// hashes what it gave.
type patternReader struct {
	left int64
	off  int64
	sum  [32]byte
	h    interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newPattern(size int64) *patternReader {
	return &patternReader{left: size, h: sha256.New()}
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		copy(p.sum[:], p.h.Sum(nil))
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.left, 128<<10))
	for i := range n {
		x := p.off + int64(i)
		b[i] = byte(x*7 + x>>11)
	}
	p.h.Write(b[:n])
	p.left -= int64(n)
	p.off += int64(n)
	return n, nil
}

// allocated runs fn and returns the bytes the Go heap gave out meanwhile.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestStreamBig: 64 MiB, four times the file API's bound, go in and out
// as streams: neither holds the content in memory (the heap gives out a
// few buffers, not the file), the bytes come back the same, and the
// version WriteFrom gives is the one ReadTo reads.
func TestStreamBig(t *testing.T) {
	const size = 64 << 20
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	f.TakeChanges()
	in := newPattern(size)
	var n int64
	var v uint64
	var err error
	heap := allocated(func() { n, v, err = f.WriteFrom(ctx, a, "big/blob.bin", in, nil) })
	if err != nil || n != size {
		t.Fatalf("WriteFrom: %d bytes, %v", n, err)
	}
	t.Logf("WriteFrom of %d MiB: %d KiB given out by the heap", size>>20, heap>>10)
	if heap > 8<<20 {
		t.Errorf("WriteFrom of %d MiB took %d MiB of heap: not streamed", size>>20, heap>>20)
	}
	st, err := os.Stat(filepath.Join(dir, "big/blob.bin"))
	if err != nil || st.Size() != size || st.Mode().Perm() != 0o644 {
		t.Fatalf("the file: %v, %v", st, err)
	}
	wantChanges(t, f, map[string]bool{"big": true, "big/blob.bin": false})

	h := sha256.New()
	var rv uint64
	heap = allocated(func() { n, rv, err = f.ReadTo(ctx, a, "big/blob.bin", h) })
	if err != nil || n != size || rv != v {
		t.Fatalf("ReadTo: %d bytes, version %d (written %d), %v", n, rv, v, err)
	}
	t.Logf("ReadTo of %d MiB: %d KiB given out by the heap", size>>20, heap>>10)
	if heap > 8<<20 {
		t.Errorf("ReadTo of %d MiB took %d MiB of heap: not streamed", size>>20, heap>>20)
	}
	if !bytes.Equal(h.Sum(nil), in.sum[:]) {
		t.Fatal("the content read differs from the content written")
	}
	// Read, with its bound, refuses it.
	var tooLarge *TooLargeError
	if _, _, err := f.Read(ctx, a, "big/blob.bin"); !errors.As(err, &tooLarge) {
		t.Errorf("Read of 64 MiB: %v, want too large", err)
	}
}

// countingReader says whether it was read.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(b []byte) (int, error) {
	c.reads++
	return c.r.Read(b)
}

// funcWriter calls fn on each write.
type funcWriter func(b []byte) (int, error)

func (fn funcWriter) Write(b []byte) (int, error) { return fn(b) }

// TestStreamStale: ReadTo records a read once the whole content went
// out; WriteFrom is refused for a stale read before it takes any content,
// and again, after it took it, if the file changed meanwhile; a file that
// changed while it streamed out counts as read at the version it started
// from.
func TestStreamStale(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a, b := RunActor("a"), RunActor("b")
	must(t, os.WriteFile(filepath.Join(dir, "x"), []byte("one\n"), 0o644))
	var stale *StaleError

	if _, _, err := f.ReadTo(ctx, a, "x", io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, b, "x", []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	body := &countingReader{r: strings.NewReader("a's\n")}
	if _, _, err := f.WriteFrom(ctx, a, "x", body, nil); !errors.As(err, &stale) {
		t.Fatalf("a's WriteFrom after b's write: %v, want stale", err)
	}
	if body.reads != 0 {
		t.Errorf("the refused write read its content %d times", body.reads)
	}
	if got := readString(t, filepath.Join(dir, "x")); got != "two\n" {
		t.Fatalf("x: %q", got)
	}

	// A read cut short records nothing: c never read x.
	c := RunActor("c")
	cut := funcWriter(func([]byte) (int, error) { return 0, errors.New("the client went away") })
	if _, _, err := f.ReadTo(ctx, c, "x", cut); err == nil {
		t.Fatal("ReadTo to a failing writer succeeded")
	}
	if _, err := f.Write(ctx, b, "x", []byte("three\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteFrom(ctx, c, "x", strings.NewReader("c's\n"), nil); err != nil {
		t.Fatalf("a write of a run whose read was cut: %v", err)
	}

	// Changed while it streamed out: a's read counts for the version it
	// started from.
	if _, _, err := f.ReadTo(ctx, a, "x", funcWriter(func(p []byte) (int, error) {
		if _, err := f.Write(ctx, RunActor("d"), "x", []byte("four\n")); err != nil {
			t.Error(err)
		}
		return len(p), nil
	})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteFrom(ctx, a, "x", strings.NewReader("a's\n"), nil); !errors.As(err, &stale) {
		t.Fatalf("a's write after a read that a change overtook: %v, want stale", err)
	}

	// Changed while it streamed in: the second check refuses, and the
	// file keeps the change.
	if _, _, err := f.Read(ctx, a, "x"); err != nil {
		t.Fatal(err)
	}
	racing := io.MultiReader(strings.NewReader("a's "), readerFunc(func([]byte) (int, error) {
		if _, err := f.Write(ctx, RunActor("e"), "x", []byte("five\n")); err != nil {
			t.Error(err)
		}
		return 0, io.EOF
	}))
	if _, _, err := f.WriteFrom(ctx, a, "x", racing, nil); !errors.As(err, &stale) {
		t.Fatalf("a's WriteFrom overtaken by b's write: %v, want stale", err)
	}
	if got := readString(t, filepath.Join(dir, "x")); got != "five\n" {
		t.Fatalf("x after the refused write: %q", got)
	}
	noTemps(t, dir)

	// A fresh read clears it; the write is as good as a read.
	if _, _, err := f.ReadTo(ctx, a, "x", io.Discard); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := f.WriteFrom(ctx, a, "x", strings.NewReader("a's\n"), nil); err != nil {
			t.Fatalf("a's write after a fresh read: %v", err)
		}
	}
}

// readerFunc is a reader of one function.
type readerFunc func(b []byte) (int, error)

func (fn readerFunc) Read(b []byte) (int, error) { return fn(b) }

// noTemps fails the test for a temporary file of the file API left in
// dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		if IsTempName(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestStreamWriteFrom: modes and owners, links followed inside only, a
// file with several names written in place, a folder in the way, and a
// content that fails half way, which leaves the old file whole.
func TestStreamWriteFrom(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	outside := t.TempDir()
	p := func(s string) string { return filepath.Join(dir, s) }
	must(t, os.Mkdir(p("owned"), 0o755))
	must(t, os.Chown(p("owned"), 1234, 5678))
	must(t, os.WriteFile(p("kept"), []byte("old\r\n"), 0o600))
	must(t, os.Chown(p("kept"), 4321, 8765))
	must(t, os.WriteFile(p("linked"), []byte("old"), 0o640))
	must(t, os.Link(p("linked"), p("other-name")))
	must(t, os.Symlink("kept", p("alias")))
	must(t, os.Symlink(outside, p("out")))
	f.TakeChanges()
	f.TakeChanges()

	mode := uint32(0o600)
	for _, c := range []struct {
		path    string
		mode    *uint32
		file    string
		perm    uint32
		uid     uint32
		content string
	}{
		{"owned/new/f", nil, "owned/new/f", 0o644, 1234, "new\n"}, // new folders too
		{"owned/g", nil, "owned/g", 0o644, 1234, "g\n"},
		{"owned/h", &mode, "owned/h", 0o600, 1234, "h\n"},
		{"kept", nil, "kept", 0o600, 4321, "line\n"}, // no CRLF added: raw bytes
		{"alias", nil, "kept", 0o600, 4321, "via the link\n"},
		{"linked", &mode, "other-name", 0o600, 0, "in place\n"},
	} {
		n, _, err := f.WriteFrom(ctx, a, c.path, strings.NewReader(c.content), c.mode)
		if err != nil || n != int64(len(c.content)) {
			t.Errorf("WriteFrom %s: %d, %v", c.path, n, err)
			continue
		}
		var st syscall.Stat_t
		must(t, syscall.Lstat(p(c.file), &st))
		if got := readString(t, p(c.file)); got != c.content || st.Mode&0o7777 != c.perm || st.Uid != c.uid {
			t.Errorf("%s: %q mode %o owner %d, want %q %o %d", c.file, got, st.Mode&0o7777, st.Uid, c.content, c.perm, c.uid)
		}
	}
	if fi, err := os.Lstat(p("alias")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("alias is no longer a link: %v", err)
	}
	changes, complete := takeMap(t, f)
	if complete {
		t.Errorf("a file with several names changed, yet the change set is complete: %v", changes)
	}

	var out *OutsideError
	for _, bad := range []string{"out/x", "../x", "/tmp/x", "x\x00"} {
		if _, _, err := f.WriteFrom(ctx, a, bad, strings.NewReader("no"), nil); !errors.As(err, &out) {
			t.Errorf("WriteFrom %q: %v, want outside", bad, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside: %v", ents)
	}
	var notFile *NotFileError
	if _, _, err := f.WriteFrom(ctx, a, "owned", strings.NewReader("no"), nil); !errors.As(err, &notFile) {
		t.Errorf("WriteFrom over a folder: %v", err)
	}

	// A content that fails half way: nothing changes.
	failing := io.MultiReader(strings.NewReader("half"), readerFunc(func([]byte) (int, error) {
		return 0, io.ErrUnexpectedEOF
	}))
	var ce *ContentError
	if _, _, err := f.WriteFrom(ctx, a, "kept", failing, nil); !errors.As(err, &ce) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("WriteFrom of a failing content: %v, want a content error", err)
	}
	if got := readString(t, p("kept")); got != "via the link\n" {
		t.Errorf("kept after a failed write: %q", got)
	}
	noTemps(t, dir)
	noTemps(t, p("owned"))
}

// TestStreamQuota: on a btrfs subvolume with a quota, a WriteFrom past it
// is refused with a *SpaceError that matches EDQUOT, and the old file is
// whole; on a full ext4, one that matches ENOSPC. No temporary file is
// left.
func TestStreamQuota(t *testing.T) {
	ctx := context.Background()
	a := RunActor("r")
	check := func(t *testing.T, dir string, want syscall.Errno, size int64) {
		t.Helper()
		hub := NewHub(HubConfig{})
		t.Cleanup(hub.Close)
		f, err := hub.Files(dir, "test/full", nil)
		must(t, err)
		t.Cleanup(func() { f.Close() })
		_, _, err = f.WriteFrom(ctx, a, "old.bin", newPattern(size), nil)
		var se *SpaceError
		if !errors.As(err, &se) || !errors.Is(err, want) || se.Path != "old.bin" {
			t.Fatalf("WriteFrom of %d MiB: %v, want a space error matching %v", size>>20, err, want)
		}
		if got := readString(t, filepath.Join(dir, "old.bin")); got != "the old content\n" {
			t.Fatalf("old.bin after the refused write: %d bytes", len(got))
		}
		noTemps(t, dir)
		// The JSON write says the same.
		if _, err := f.Write(ctx, a, "old.bin", bytes.Repeat([]byte("x"), MaxFileBytes)); !errors.As(err, &se) || !errors.Is(err, want) {
			t.Fatalf("Write of 16 MiB: %v, want a space error matching %v", err, want)
		}
	}
	t.Run("quota", func(t *testing.T) {
		mnt := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
		q, err := diskquota.Open(mnt)
		must(t, err)
		dir := filepath.Join(mnt, "ws")
		must(t, diskquota.MakeSubvolume(dir))
		must(t, q.Limit(dir, 8<<20))
		must(t, os.WriteFile(filepath.Join(dir, "old.bin"), []byte("the old content\n"), 0o644))
		check(t, dir, syscall.EDQUOT, 64<<20)
	})
	t.Run("full disk", func(t *testing.T) {
		mnt := testenv.LoopFS(t, 32<<20, "mkfs.ext4", []string{"-q"}, "")
		dir := filepath.Join(mnt, "ws")
		must(t, os.Mkdir(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "old.bin"), []byte("the old content\n"), 0o644))
		testenv.FillDisk(t, mnt)
		check(t, dir, syscall.ENOSPC, 64<<20)
	})
}

// TestUploadHoldsOnlyItsTempFile: while an upload's content comes, it
// holds one descriptor, its temporary file, and nothing of the Files
// that started it (closed meanwhile); another Files of the workspace
// finishes it, into a folder that was renamed meanwhile, and the sweep
// of that folder leaves the new content alone.
func TestUploadHoldsOnlyItsTempFile(t *testing.T) {
	ctx := context.Background()
	hub, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	must(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	f2, err := hub.Files(dir, "test/thread", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := openFds(t)
	u, err := f2.StartUpload(ctx, a, "a/b/up.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	f2.Close()
	if got := openFds(t) - before; got != 0 {
		// The Files' folder was closed: one less, one more.
		t.Errorf("an upload under way holds %d descriptors more than its Files did, want 0 (its temporary file in place of the folder)", got)
	}
	if _, err := u.ReadFrom(ctx, strings.NewReader("first part, ")); err != nil {
		t.Fatal(err)
	}
	if _, err := u.ReadFrom(ctx, strings.NewReader("second part\n")); err != nil {
		t.Fatal(err)
	}
	must(t, os.Rename(filepath.Join(dir, "a/b"), filepath.Join(dir, "a/c")))
	must(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	if _, err := f.FinishUpload(u, nil); err != nil {
		t.Fatalf("finish: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "a/b/up.txt"))
	if err != nil || string(got) != "first part, second part\n" {
		t.Fatalf("the uploaded file: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a/c/up.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the upload landed in the folder that moved away: %v", err)
	}
	u.Close()
	if got := openFds(t) - before; got != -1 {
		t.Errorf("after the upload: %d descriptors more than before, want -1 (the Files closed)", got)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "a/b"))
	if len(ents) != 1 {
		t.Errorf("folder after the upload: %v, want up.txt alone", ents)
	}
}

func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
