package snapshot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// withoutSpreader opens a Repo that never spreads its logs: Close leaves
// them in tmp/, unlocked, as a crash after Build returned would.
func withoutSpreader() Option { return func(c *config) { c.noSpreader = true } }

// withSpreadHook has fn called by the spreader before each log.
func withSpreadHook(fn func(log string)) Option { return func(c *config) { c.spreadHook = fn } }

// heldRepo opens a Repo on dir whose spreader waits, before its first
// log, until release is called (at the latest at the test's end, before
// the Repo is closed).
func heldRepo(t testing.TB, dir string) (r *Repo, release func()) {
	t.Helper()
	gate := make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	r, err := Open(dir, withSpreadHook(func(string) { <-gate }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	t.Cleanup(release) // runs first
	return r, release
}

// logsIn returns the names of the logs in the repository dir's tmp/.
func logsIn(t testing.TB, dir string) []string {
	t.Helper()
	names, err := listTmp(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, n := range names {
		if isLogName(n) {
			logs = append(logs, n)
		}
	}
	return logs
}

// looseCount counts the loose objects of the repository dir, without
// waiting for any spreader.
func looseCount(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	for i := range 256 {
		ents, err := os.ReadDir(filepath.Join(dir, "objects", fmt.Sprintf("%02x", i)))
		if err != nil {
			t.Fatal(err)
		}
		n += len(ents)
	}
	return n
}

// readAll checks every way of reading the tree h from r: ReadTree and
// OpenBlob of every object (verifyAll), a Diff from the empty tree and
// an Apply of it into a new folder, which must equal want.
func readAll(t testing.TB, r *Repo, h Hash, want string) {
	t.Helper()
	verifyAll(t, r, h)
	dst := t.TempDir()
	restore(t, r, h, dst)
	sameDirs(t, dst, want)
}

// TestLogReadable: a build's objects are readable as soon as Build
// returns, from its log, before the spreader has spread them, and after.
func TestLogReadable(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	r, release := heldRepo(t, repoDir)
	src := t.TempDir()
	makeMixed(t, src)
	h, st := build(t, r, src, Hash{}, nil, true)
	if n := looseCount(t, repoDir); n != 0 {
		t.Fatalf("%d loose objects before spreading; want none (Build must make no object file)", n)
	}
	if logs := logsIn(t, repoDir); len(logs) != 1 {
		t.Fatalf("logs after one build: got %q, want one", logs)
	}
	readAll(t, r, h, src)

	// An incremental build reads its base from the log and dedups
	// against it: only the changed file, its folder and the root are new.
	write(t, filepath.Join(src, "a/b/c/deep.txt"), "changed", 0o644)
	h2, st2 := build(t, r, src, h, []Change{{Path: "a/b/c/deep.txt"}}, false)
	if want := int64(1 + 4); st2.NewObjects != want {
		t.Errorf("incremental build: got %d new objects, want %d", st2.NewObjects, want)
	}
	deltas, err := r.Diff(context.Background(), h, h2)
	if err != nil || len(deltas) != 1 || deltas[0].Path != "a/b/c/deep.txt" {
		t.Fatalf("Diff: got %v, %v; want a/b/c/deep.txt modified", deltas, err)
	}
	text, ok, err := r.TextDiff(context.Background(), deltas[0], 0)
	if err != nil || !ok || !strings.Contains(text, "+changed") {
		t.Errorf("TextDiff: got %q, %v, %v", text, ok, err)
	}
	// A build that finds everything in place makes no log.
	_, st3 := build(t, r, src, h2, []Change{{Path: "a/b/c/deep.txt"}}, false)
	if logs := logsIn(t, repoDir); st3.NewObjects != 0 || len(logs) != 2 {
		t.Errorf("a build with nothing new: %d new objects, logs %q; want 0 and the first two", st3.NewObjects, logs)
	}

	release()
	spreadAll(t, r)
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Errorf("logs left after spreading: %q", logs)
	}
	if n := looseCount(t, repoDir); int64(n) != st.NewObjects+st2.NewObjects {
		t.Errorf("loose objects after spreading: got %d, want %d", n, st.NewObjects+st2.NewObjects)
	}
	r.mu.Lock()
	pending := len(r.logs)
	r.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d logs left in the index", pending)
	}
	readAll(t, r, h2, src)
	// And from a fresh Repo, with nothing cached.
	r2, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	readAll(t, r2, h2, src)
}

// TestLogRecovery: a Repo that stops after Build returned, without
// spreading (as a crash would), leaves its log; the next Open spreads it.
func TestLogRecovery(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	src := t.TempDir()
	makeMixed(t, src)
	r, err := Open(repoDir, withoutSpreader())
	if err != nil {
		t.Fatal(err)
	}
	h, st := build(t, r, src, Hash{}, nil, true)
	r.Close()
	if logs := logsIn(t, repoDir); len(logs) != 1 || looseCount(t, repoDir) != 0 {
		t.Fatalf("after the crash: logs %q, %d loose objects; want one log, no object", logs, looseCount(t, repoDir))
	}
	r2, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Errorf("Open left the log: %q", logs)
	}
	if n := looseCount(t, repoDir); int64(n) != st.NewObjects {
		t.Errorf("loose objects: got %d, want %d", n, st.NewObjects)
	}
	readAll(t, r2, h, src)
}

// TestLogRecoveryKilled runs a build in a child process, kills it with
// SIGKILL once Build has returned (its spreader held back), and checks
// that another Repo reads the objects from the live child's log and
// leaves it alone, and that once the child is dead an Open spreads it.
func TestLogRecoveryKilled(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	src := t.TempDir()
	makeMixed(t, src)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=build", "SNAPSHOT_CHILD_REPO="+repoDir, "SNAPSHOT_CHILD_SRC="+src)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the child's tree: %v", err)
	}
	h, err := ParseHash(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}

	// The child lives: its log is its own.
	other, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	if logs := logsIn(t, repoDir); len(logs) != 1 {
		t.Fatalf("with the child alive: logs %q, want its one", logs)
	}
	readAll(t, other, h, src)
	if _, err := other.Collect(context.Background(), roots()); err != nil {
		t.Fatal(err)
	}
	if logs := logsIn(t, repoDir); len(logs) != 1 {
		t.Fatalf("Collect removed the live child's log: logs %q", logs)
	}
	readAll(t, other, h, src)
	other.Close()

	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	r, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Errorf("Open left the dead child's log: %q", logs)
	}
	if looseCount(t, repoDir) == 0 {
		t.Errorf("no loose object after the recovery")
	}
	readAll(t, r, h, src)
}

// childEnv names the variable that makes the test binary a child
// (TestMain): "build" opens SNAPSHOT_CHILD_REPO with its spreader held,
// builds SNAPSHOT_CHILD_SRC, prints the tree and waits to be killed.
const childEnv = "SNAPSHOT_TEST_CHILD"

func runChild(what string) int {
	if what != "build" {
		fmt.Fprintf(os.Stderr, "unknown child %q\n", what)
		return 2
	}
	r, err := Open(os.Getenv("SNAPSHOT_CHILD_REPO"), withSpreadHook(func(string) { select {} }))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root, err := os.Open(os.Getenv("SNAPSHOT_CHILD_SRC"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, _, err := r.Build(context.Background(), int(root.Fd()), Hash{}, nil, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h)
	time.Sleep(time.Hour)
	return 0
}

// crashedLog builds src with a Repo that leaves its log as a crash
// would, and returns the tree, the log's path and its records in order.
func crashedLog(t *testing.T, repoDir, src string) (Hash, string, []Hash, []loc) {
	t.Helper()
	r, err := Open(repoDir, withoutSpreader())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := build(t, r, src, Hash{}, nil, true)
	r.Close()
	logs := logsIn(t, repoDir)
	if len(logs) != 1 {
		t.Fatalf("logs: got %q, want one", logs)
	}
	path := filepath.Join(repoDir, "tmp", logs[0])
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Stat()
	s, ok, err := newLogScanner(f, info.Size())
	if err != nil || !ok {
		t.Fatalf("read the log: %v, %v", ok, err)
	}
	var hs []Hash
	var ls []loc
	for {
		h, l, ok := s.next()
		if !ok {
			break
		}
		hs, ls = append(hs, h), append(ls, l)
	}
	if s.off != info.Size() {
		t.Fatalf("the log's records end at %d of %d", s.off, info.Size())
	}
	return h, path, hs, ls
}

// TestLogTorn: a log cut short, or with a byte flipped in a record, is
// spread up to its last good record; what follows is not found, and no
// object is ever read with the wrong bytes.
func TestLogTorn(t *testing.T) {
	src := t.TempDir()
	for i := range 6 {
		write(t, filepath.Join(src, fmt.Sprintf("f%d", i)), strings.Repeat(fmt.Sprintf("file %d\n", i), 20*(i+1)), 0o644)
	}
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, path string, ls []loc) (good int) // returns how many records stay good
	}{
		{"last record cut", func(t *testing.T, path string, ls []loc) int {
			last := ls[len(ls)-1]
			if err := os.Truncate(path, last.off+last.size/2); err != nil {
				t.Fatal(err)
			}
			return len(ls) - 1
		}},
		{"last header cut", func(t *testing.T, path string, ls []loc) int {
			if err := os.Truncate(path, ls[len(ls)-1].off-recordHeader+5); err != nil {
				t.Fatal(err)
			}
			return len(ls) - 1
		}},
		{"byte flipped in the third record", func(t *testing.T, path string, ls []loc) int {
			flipByte(t, path, int(ls[2].off+ls[2].size/2))
			return 2
		}},
		{"size of the second record changed", func(t *testing.T, path string, ls []loc) int {
			flipByte(t, path, int(ls[1].off-2))
			return 1
		}},
		{"header only", func(t *testing.T, path string, ls []loc) int {
			if err := os.Truncate(path, int64(len(logMagic))); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
		{"empty", func(t *testing.T, path string, ls []loc) int {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repoDir := filepath.Join(t.TempDir(), "repo")
			_, path, hs, ls := crashedLog(t, repoDir, src)
			if len(hs) != 7 { // six files and the root
				t.Fatalf("got %d records, want 7", len(hs))
			}
			good := tc.spoil(t, path, ls)
			r, err := Open(repoDir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if logs := logsIn(t, repoDir); len(logs) != 0 {
				t.Errorf("Open left the log: %q", logs)
			}
			if n := looseCount(t, repoDir); n != good {
				t.Errorf("loose objects: got %d, want %d", n, good)
			}
			for i, h := range hs {
				data, err := r.readObject(h)
				switch {
				case i < good && err != nil:
					t.Errorf("record %d (%s), before the cut: %v", i, h, err)
				case i >= good && !errors.Is(err, ErrNotFound):
					t.Errorf("record %d (%s), after the cut: got %d bytes, %v; want ErrNotFound", i, h, len(data), err)
				}
			}
		})
	}
}

// TestLogCorruptNeverServed flips a byte in a pending log, in place: its
// Repo and another read the object as corrupt, never its wrong bytes;
// the spreader refuses the log and keeps it (Close says so), and the next
// Open cuts it at the last good record.
func TestLogCorruptNeverServed(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	r, release := heldRepo(t, repoDir)
	src := t.TempDir()
	write(t, filepath.Join(src, "a"), "the first file", 0o644)
	write(t, filepath.Join(src, "b"), strings.Repeat("the second file\n", 100), 0o644)
	h, _ := build(t, r, src, Hash{}, nil, true)
	logs := logsIn(t, repoDir)
	if len(logs) != 1 {
		t.Fatalf("logs: %q", logs)
	}
	bh := sum([]byte(strings.Repeat("the second file\n", 100)))
	r.mu.Lock()
	l := r.logs[0].recs[bh]
	r.mu.Unlock()
	// Flipped in place: the readers' descriptors see it.
	f, err := os.OpenFile(filepath.Join(repoDir, "tmp", logs[0]), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	f.ReadAt(b[:], l.off+l.size-3)
	b[0] ^= 0x40
	f.WriteAt(b[:], l.off+l.size-3)
	f.Close()

	other, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for name, repo := range map[string]*Repo{"owner": r, "other": other} {
		rc, err := repo.OpenBlob(bh)
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: read of the spoiled record: got %v, want ErrCorrupt", name, err)
		}
		if _, err := repo.readObject(sum([]byte("the first file"))); err != nil {
			t.Errorf("%s: read of a good record: %v", name, err)
		}
	}
	release()
	if err := r.waitSpread(context.Background()); !errors.Is(err, ErrCorrupt) {
		t.Errorf("spreading the spoiled log: got %v, want ErrCorrupt", err)
	}
	if logs := logsIn(t, repoDir); len(logs) != 1 {
		t.Errorf("the spreader removed a log it could not spread whole: logs %q", logs)
	}
	if err := r.Close(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Close: got %v, want ErrCorrupt", err)
	}
	other.Close()
	r3, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if _, err := r3.readObject(sum([]byte("the first file"))); err != nil {
		t.Errorf("after recovery, the record before the spoiled one: %v", err)
	}
	if _, err := r3.readObject(bh); !errors.Is(err, ErrNotFound) {
		t.Errorf("after recovery, the spoiled record: got %v, want ErrNotFound", err)
	}
	if _, err := r3.ReadTree(h); !errors.Is(err, ErrNotFound) {
		t.Errorf("after recovery, the root (after the cut): got %v, want ErrNotFound", err)
	}
}

// TestLogTwoRepos: two Repos on one folder, as two daemons. Each reads
// what the other built at once, from the other's log, and after it is
// spread; neither Open nor Collect of one takes the other's live log.
func TestLogTwoRepos(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	one, releaseOne := heldRepo(t, repoDir)
	two, releaseTwo := heldRepo(t, repoDir)
	srcOne, srcTwo := t.TempDir(), t.TempDir()
	makeMixed(t, srcOne)
	write(t, filepath.Join(srcTwo, "two"), "built by two", 0o644)
	write(t, filepath.Join(srcTwo, "sub/plain.txt"), "hello\n", 0o644) // one has it too
	h1, _ := build(t, one, srcOne, Hash{}, nil, true)
	h2, _ := build(t, two, srcTwo, Hash{}, nil, true)
	if logs := logsIn(t, repoDir); len(logs) != 2 {
		t.Fatalf("logs: got %q, want two", logs)
	}
	readAll(t, two, h1, srcOne)
	readAll(t, one, h2, srcTwo)

	// A third Repo's Open recovers nothing; its Collect keeps both logs
	// and every object they hold, reachable or not.
	third, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if _, err := third.Collect(context.Background(), roots(h2)); err != nil {
		t.Fatal(err)
	}
	if logs := logsIn(t, repoDir); len(logs) != 2 {
		t.Fatalf("after another Repo's Open and Collect: logs %q, want both", logs)
	}
	readAll(t, third, h1, srcOne)

	releaseOne()
	spreadAll(t, one)
	if logs := logsIn(t, repoDir); len(logs) != 1 {
		t.Fatalf("after one spread: logs %q, want two's only", logs)
	}
	readAll(t, two, h1, srcOne)
	readAll(t, one, h2, srcTwo)
	releaseTwo()
	spreadAll(t, two)
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Fatalf("after both spread: logs %q", logs)
	}
	readAll(t, one, h2, srcTwo)
	readAll(t, third, h1, srcOne)

	// The collection of a tree built meanwhile: only h2 lives now.
	if _, err := third.Collect(context.Background(), roots(h2)); err != nil {
		t.Fatal(err)
	}
	readAll(t, one, h2, srcTwo)
	if _, err := third.ReadTree(h1); !errors.Is(err, ErrNotFound) {
		t.Errorf("the dropped tree after a collection: got %v, want ErrNotFound", err)
	}
}

// TestCollectWaitsForSpread: Collect, in the Repo that built, waits for
// its logs to be spread and then collects what no root reaches among
// their objects.
func TestCollectWaitsForSpread(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo")
	r, err := Open(repoDir, withSpreadHook(func(string) { time.Sleep(30 * time.Millisecond) }))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "only-a"), "only in a", 0o644)
	write(t, filepath.Join(b, "only-b"), "only in b", 0o644)
	_, _ = build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	st, err := r.Collect(context.Background(), roots(hb))
	if err != nil {
		t.Fatal(err)
	}
	if st.Removed != 2 || st.Kept != 2 {
		t.Errorf("Collect: got %+v, want 2 removed (a's blob and root), 2 kept", st)
	}
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Errorf("logs after Collect: %q", logs)
	}
	verifyAll(t, r, hb)
}

// TestCloseWaitsForSpreader: Close spreads what is left and returns once
// the spreader has ended; no goroutine stays.
func TestCloseWaitsForSpreader(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	repoDir := filepath.Join(t.TempDir(), "repo")
	r, err := Open(repoDir, withSpreadHook(func(string) { time.Sleep(50 * time.Millisecond) }))
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	makeMixed(t, src)
	h, st := build(t, r, src, Hash{}, nil, true)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if logs := logsIn(t, repoDir); len(logs) != 0 {
		t.Errorf("logs after Close: %q", logs)
	}
	if n := looseCount(t, repoDir); int64(n) != st.NewObjects {
		t.Errorf("loose objects after Close: got %d, want %d", n, st.NewObjects)
	}
	goleak.VerifyNone(t, ignore)
	r2, err := Open(repoDir, withoutSpreader())
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	readAll(t, r2, h, src)
}
