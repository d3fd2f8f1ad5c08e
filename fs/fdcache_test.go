package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestDescriptorBudget serves a tree far larger than the descriptor budget.
// Every operation still works (descriptors are reopened by handle), and the
// process never holds more node descriptors than the budget allows.
func TestDescriptorBudget(t *testing.T) {
	const budget = 16
	hub := newHub(HubConfig{}, budget, 0)
	t.Cleanup(hub.Close)
	backing, mnt := mountTemp(t, Options{Hub: hub, EntryTimeout: -1, AttrTimeout: -1})
	for d := 0; d < 10; d++ {
		dir := filepath.Join(mnt, fmt.Sprintf("d%d", d), "sub")
		must(t, os.MkdirAll(dir, 0o755))
		for f := 0; f < 30; f++ {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), []byte(fmt.Sprint(d, f)), 0o644))
		}
	}
	check := func(when string) {
		t.Helper()
		open, _ := hub.fds.counts()
		if open > budget {
			t.Errorf("%s: %d node descriptors open, budget %d", when, open, budget)
		}
	}
	check("after writing 300 files")
	for round := 0; round < 2; round++ {
		for d := 0; d < 10; d++ {
			for f := 0; f < 30; f++ {
				p := filepath.Join(mnt, fmt.Sprintf("d%d", d), "sub", fmt.Sprintf("f%d", f))
				got, err := os.ReadFile(p)
				if err != nil || string(got) != fmt.Sprint(d, f) {
					t.Fatalf("round %d: read %s: %q, %v", round, p, got, err)
				}
				must(t, os.Chmod(p, 0o600))
			}
		}
		check(fmt.Sprintf("after reading round %d", round))
	}
	// Renames and removals work on reopened descriptors too.
	must(t, os.Rename(filepath.Join(mnt, "d0", "sub", "f0"), filepath.Join(mnt, "d9", "moved")))
	must(t, os.RemoveAll(filepath.Join(mnt, "d1")))
	if _, err := os.Stat(filepath.Join(backing, "d9", "moved")); err != nil {
		t.Errorf("rename did not reach the backing folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(backing, "d1")); !os.IsNotExist(err) {
		t.Errorf("removal did not reach the backing folder: %v", err)
	}
	check("after renames")
}

// pathFdsUnder counts this process's O_PATH descriptors of dir and what is
// below it: the node descriptors (not the files open for reading or
// writing, nor the actors' pidfds and the pipes).
func pathFdsUnder(t testing.TB, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != dir && !strings.HasPrefix(target, dir+"/") {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			if flags, ok := strings.CutPrefix(line, "flags:"); ok {
				if f, err := strconv.ParseUint(strings.TrimSpace(flags), 8, 64); err == nil && f&unix.O_PATH != 0 {
					n++
				}
			}
		}
	}
	return n
}

// heldDeleted lists this process's descriptors of files under dir that
// were deleted: each holds its inode, and its disk space, alive.
func heldDeleted(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") && strings.HasSuffix(target, " (deleted)") {
			held = append(held, target)
		}
	}
	return held
}

// TestDescriptorBudgetNewNodes makes inodes every way a node gets a
// descriptor without an operation using it afterwards: create, mkdir,
// mknod, symlink, link, and lookups of names made behind the mount (stat
// of every file, as du or find does). None of them may take the node
// descriptors beyond the budget, counted by the cache and by the kernel.
func TestDescriptorBudgetNewNodes(t *testing.T) {
	const budget = 32
	hub := newHub(HubConfig{}, budget, 0)
	t.Cleanup(hub.Close)
	backing, mnt := mountTemp(t, Options{Hub: hub})
	base := pathFdsUnder(t, backing)
	check := func(when string) {
		t.Helper()
		open, _ := hub.fds.counts()
		if open > budget {
			t.Errorf("%s: %d node descriptors open, budget %d", when, open, budget)
		}
		if n := pathFdsUnder(t, backing) - base; n > budget {
			t.Errorf("%s: the process holds %d more O_PATH descriptors than before, budget %d", when, n, budget)
		}
	}
	const n = 500
	for i := range n {
		f, err := os.Create(filepath.Join(mnt, fmt.Sprintf("f%d", i)))
		must(t, err)
		must(t, f.Close())
	}
	check("after create")
	for i := range n {
		must(t, os.Mkdir(filepath.Join(mnt, fmt.Sprintf("d%d", i)), 0o755))
	}
	check("after mkdir")
	for i := range n {
		must(t, unix.Mkfifo(filepath.Join(mnt, fmt.Sprintf("p%d", i)), 0o644))
	}
	check("after mknod")
	for i := range n {
		must(t, os.Symlink(fmt.Sprintf("f%d", i), filepath.Join(mnt, fmt.Sprintf("s%d", i))))
	}
	check("after symlink")
	for i := range n {
		must(t, os.Link(filepath.Join(mnt, fmt.Sprintf("f%d", i)), filepath.Join(mnt, fmt.Sprintf("l%d", i))))
	}
	check("after link")
	must(t, os.Mkdir(filepath.Join(backing, "behind"), 0o755))
	for i := range n {
		must(t, os.WriteFile(filepath.Join(backing, "behind", fmt.Sprintf("b%d", i)), nil, 0o644))
	}
	for i := range n {
		_, err := os.Lstat(filepath.Join(mnt, "behind", fmt.Sprintf("b%d", i)))
		must(t, err)
	}
	check("after lookups")
	// The evicted descriptors come back by handle.
	for i := range n {
		must(t, os.WriteFile(filepath.Join(mnt, fmt.Sprintf("l%d", i)), []byte("x"), 0o644))
	}
	check("after writes")
}

// TestUnmountClosesDescriptors: once a mount stopped serving, none of its
// nodes' descriptors stays open, so deleting the backing files gives
// their space back at once (no wait for a restart, or a collection that
// may never come while the Mount is kept).
func TestUnmountClosesDescriptors(t *testing.T) {
	testenv.RequireRootFUSE(t)
	hub := newHub(HubConfig{}, 1<<20, 0)
	t.Cleanup(hub.Close)
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(backing, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	m, err := serveTest(context.Background(), backing, mnt, Options{Hub: hub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	const n = 300
	for i := range n {
		must(t, os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%d", i)), make([]byte, 4096), 0o644))
	}
	if got := pathFdsUnder(t, backing); got < n {
		t.Fatalf("only %d descriptors more while %d files are known: the test shows nothing", got, n)
	}
	must(t, m.Close())
	<-m.Done()
	if got := pathFdsUnder(t, backing); got > 0 {
		t.Errorf("%d O_PATH descriptors of the backing folder open after the unmount", got)
	}
	must(t, os.RemoveAll(backing))
	if held := heldDeleted(t, backing); len(held) > 0 {
		t.Errorf("%d deleted files still held open after the unmount, e.g. %s", len(held), held[0])
	}
	runtime.KeepAlive(m)
}

// TestNodesBounded walks a tree of many more files than the node bound:
// the kernel is told to forget the least recently used nodes, so the nodes
// the daemon keeps fall back under the bound, and every file is still
// there to be read. Both ways of telling the kernel are tried: prune
// notifications and, as on kernels without them, entry invalidations.
func TestNodesBounded(t *testing.T) {
	for _, prune := range []bool{true, false} {
		t.Run(fmt.Sprintf("prune=%v", prune), func(t *testing.T) {
			const maxNodes, dirs, files = 300, 20, 150
			hub := newHub(HubConfig{MaxNodes: maxNodes}, 1<<20, 0)
			hub.fds.noPrune = !prune
			t.Cleanup(hub.Close)
			backing, mnt := mountTemp(t, Options{Hub: hub})
			for d := range dirs {
				sub := filepath.Join(backing, fmt.Sprintf("d%d", d))
				must(t, os.Mkdir(sub, 0o755))
				for f := range files {
					must(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", f)), []byte(fmt.Sprint(d, f)), 0o644))
				}
			}
			walk := func() int {
				seen := 0
				must(t, filepath.WalkDir(mnt, func(p string, e os.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if _, err := os.Lstat(p); err != nil {
						return err
					}
					seen++
					return nil
				}))
				return seen
			}
			if seen := walk(); seen != 1+dirs+dirs*files {
				t.Fatalf("walk saw %d entries, want %d", seen, 1+dirs+dirs*files)
			}
			nodes := func() (int, int) {
				_, n := hub.fds.counts()
				hub.mu.Lock()
				defer hub.mu.Unlock()
				known := 0
				for r := range hub.mounts {
					r.mu.Lock()
					known += len(r.nodes)
					r.mu.Unlock()
				}
				return n, known
			}
			// The kernel forgets asynchronously: wait for the state.
			deadline := time.Now().Add(20 * time.Second)
			for {
				n, known := nodes()
				if n <= maxNodes && known <= maxNodes+1 { // +1: the root
					t.Logf("after a walk of %d files: %d nodes kept, %d known, bound %d", dirs*files, n, known, maxNodes)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after a walk of %d files: %d nodes kept, %d known, bound %d", dirs*files, n, known, maxNodes)
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Forgotten nodes are looked up again.
			for d := range dirs {
				p := filepath.Join(mnt, fmt.Sprintf("d%d", d), "f7")
				got, err := os.ReadFile(p)
				if err != nil || string(got) != fmt.Sprint(d, 7) {
					t.Fatalf("read %s after eviction: %q, %v", p, got, err)
				}
			}
		})
	}
}

// residentBytes returns this process's resident memory.
func residentBytes(t testing.TB) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkNodeMemory measures what the daemon keeps per node: the heap
// after a collection (and the growth of the resident memory), with every
// file of a tree of 200,000 (or WARREN_BENCH_NODES) looked up, over the
// heap before the mount, per node kept; with no bound, and with the
// default bound. Run each case once, in
// a process of its own (the resident memory does not shrink):
//
//	go test -run '^$' -bench NodeMemory/unbounded -benchtime 1x ./fs/
//	go test -run '^$' -bench NodeMemory/default-bound -benchtime 1x ./fs/
func BenchmarkNodeMemory(b *testing.B) {
	files := 200_000
	if v, err := strconv.Atoi(os.Getenv("WARREN_BENCH_NODES")); err == nil && v > 0 {
		files = v
	}
	const perDir = 1000
	backing0 := b.TempDir()
	for d := 0; d < files/perDir; d++ {
		sub := filepath.Join(backing0, fmt.Sprintf("d%d", d))
		must(b, os.Mkdir(sub, 0o755))
		for f := range perDir {
			must(b, unix.Mknod(filepath.Join(sub, fmt.Sprintf("f%d", f)), unix.S_IFREG|0o644, 0))
		}
	}
	for _, bc := range []struct {
		name     string
		maxNodes int
	}{{"unbounded", -1}, {"default-bound", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				testenv.RequireRootFUSE(b)
				hub := NewHub(HubConfig{MaxNodes: bc.maxNodes})
				mnt := b.TempDir()
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				rssBefore := residentBytes(b)
				m, err := serveTest(context.Background(), backing0, mnt, Options{Hub: hub})
				if err != nil {
					b.Fatal(err)
				}
				must(b, filepath.WalkDir(mnt, func(p string, e os.DirEntry, err error) error {
					if err != nil {
						return err
					}
					_, err = os.Lstat(p)
					return err
				}))
				// Forgetting is asynchronous: wait until the bound holds.
				for hub.fds.maxNodes > 0 {
					if _, n := hub.fds.counts(); n <= hub.fds.maxNodes {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				var after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&after)
				_, nodes := hub.fds.counts()
				heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
				b.ReportMetric(float64(nodes), "nodes")
				b.ReportMetric(heap/float64(nodes), "B/node")
				b.ReportMetric(heap/(1<<20), "MiB")
				b.ReportMetric((residentBytes(b)-rssBefore)/float64(nodes), "RSS-B/node")
				runtime.KeepAlive(m)
				must(b, m.Close())
				<-m.Done()
				hub.Close()
			}
		})
	}
}

// TestOpenFilesCapped: the files the mounts' users hold open, each of
// which the daemon holds open too, are capped; past the cap an open, a
// create and an O_TMPFILE fail with ENFILE, and each close gives a place
// back.
func TestOpenFilesCapped(t *testing.T) {
	const maxFiles = 10
	hub := newHub(HubConfig{}, 1<<20, maxFiles)
	t.Cleanup(hub.Close)
	backing, mnt := mountTemp(t, Options{Hub: hub})
	for i := range maxFiles + 1 {
		must(t, os.WriteFile(filepath.Join(backing, fmt.Sprintf("f%d", i)), []byte("x"), 0o644))
	}
	var held []*os.File
	t.Cleanup(func() {
		for _, f := range held {
			f.Close()
		}
	})
	for i := range maxFiles {
		f, err := os.Open(filepath.Join(mnt, fmt.Sprintf("f%d", i)))
		must(t, err)
		held = append(held, f)
	}
	if f, err := os.Open(filepath.Join(mnt, fmt.Sprint("f", maxFiles))); !errors.Is(err, unix.ENFILE) {
		t.Errorf("open past the cap: %v, want ENFILE", err)
		if err == nil {
			f.Close()
		}
	}
	if f, err := os.Create(filepath.Join(mnt, "new")); !errors.Is(err, unix.ENFILE) {
		t.Errorf("create past the cap: %v, want ENFILE", err)
		if err == nil {
			f.Close()
		}
	}
	if fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600); !errors.Is(err, unix.ENFILE) {
		t.Errorf("O_TMPFILE past the cap: %v, want ENFILE", err)
		if err == nil {
			unix.Close(fd)
		}
	}
	// A close gives its place back once its RELEASE was served, which
	// the kernel sends after close returned: wait for it.
	must(t, held[0].Close())
	held = held[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := os.Open(filepath.Join(mnt, fmt.Sprint("f", maxFiles)))
		if err == nil {
			held = append(held, f)
			break
		}
		if !errors.Is(err, unix.ENFILE) || time.Now().After(deadline) {
			t.Fatalf("open after a close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every place comes back once every file is closed.
	for _, f := range held {
		must(t, f.Close())
	}
	held = nil
	for {
		hub.fds.mu.Lock()
		files := hub.fds.files
		hub.fds.mu.Unlock()
		if files == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files still counted open after every file was closed", files)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
