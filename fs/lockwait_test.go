package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestStuckThreadLeavesOthersServed: on one shared connection, thread A
// has 64 processes' lock waits stuck behind a lock it holds and another
// process flooding it with requests; thread B's I/O goes on, and the
// daemon holds no OS thread per waiting lock (with the blocking call it
// held 64 more, one per waiter). A waiter that dies ends its wait in the
// daemon at once, and when the lock is let go every waiter gets it.
func TestStuckThreadLeavesOthersServed(t *testing.T) {
	p := newTestPool(t)
	hub := p.cfg.Hub
	dir := t.TempDir()
	a := mountPooled(t, p, dir, "a").Mountpoint()
	b := mountPooled(t, p, dir, "b").Mountpoint()
	if p.Conns() != 1 {
		t.Fatalf("%d connections, want both threads on one", p.Conns())
	}
	locked := filepath.Join(a, "locked")
	must(t, os.WriteFile(locked, []byte("x"), 0o644))
	holder, err := os.OpenFile(locked, os.O_RDWR, 0)
	must(t, err)
	defer holder.Close()
	whole := unix.Flock_t{Type: unix.F_WRLCK}
	must(t, unix.FcntlFlock(holder.Fd(), unix.F_OFD_SETLK, &whole))
	must(t, unix.Flock(int(holder.Fd()), unix.LOCK_EX|unix.LOCK_NB))

	// Warm the connection up, so its readers are counted before.
	ioRound(t, b, 0)
	threads0 := testenv.OSThreads(t)

	const waiters = 64
	ofd, ofdOut, err := startChild("lock-wait", "ofd", locked, strconv.Itoa(waiters/2))
	must(t, err)
	fl, flOut, err := startChild("lock-wait", "flock", locked, strconv.Itoa(waiters/2))
	must(t, err)
	ended := map[*os.Process]chan error{}
	for _, c := range []*os.Process{ofd.Process, fl.Process} {
		ended[c] = make(chan error, 1)
	}
	go func() { ended[ofd.Process] <- ofd.Wait() }()
	go func() { ended[fl.Process] <- fl.Wait() }()
	t.Cleanup(func() {
		for c, ch := range ended {
			c.Kill()
			<-ch
		}
	})
	waitFor(t, "every lock request to wait in the daemon", func() bool { return hub.LockWaits() == waiters })
	// Counted before the flood, whose requests run side by side and may
	// have OS threads of their own while they are in system calls.
	if grew := testenv.OSThreads(t) - threads0; grew > waiters/4 {
		t.Errorf("the daemon has %d more OS threads with %d lock waits, want a few at most (no thread per wait)", grew, waiters)
	}
	flood, _, err := startChild("flood", filepath.Join(a, "flooded"))
	must(t, err)
	floodEnded := make(chan error, 1)
	go func() { floodEnded <- flood.Wait() }()
	defer func() {
		flood.Process.Kill()
		<-floodEnded
	}()

	// B's I/O while A is stuck and flooded.
	var took []time.Duration
	for i := range 200 {
		start := time.Now()
		ioRound(t, b, i)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("thread B's write+read while A has %d lock waits and a flood: median %v, max %v", waiters, took[len(took)/2], took[len(took)-1])
	if worst := took[len(took)-1]; worst > 5*time.Second {
		t.Errorf("a write+read in thread B took %v while A was stuck", worst)
	}
	if n := hub.LockWaits(); n != waiters {
		t.Fatalf("%d lock waits, want all %d still waiting (the lock is held)", n, waiters)
	}

	// A waiter that dies: its waits end in the daemon, the others wait on.
	must(t, fl.Process.Kill())
	<-ended[fl.Process]
	delete(ended, fl.Process)
	waitFor(t, "the dead waiter's lock waits to end", func() bool { return hub.LockWaits() == waiters/2 })

	// Let go: every waiter gets the lock in turn.
	unlock := unix.Flock_t{Type: unix.F_UNLCK}
	must(t, unix.FcntlFlock(holder.Fd(), unix.F_OFD_SETLK, &unlock))
	select {
	case err := <-ended[ofd.Process]:
		delete(ended, ofd.Process)
		if err != nil {
			t.Fatalf("the waiters: %v: %s", err, ofdOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiters never all got the lock: %s %s", ofdOut, flOut)
	}
	if n := hub.LockWaits(); n != 0 {
		t.Errorf("%d lock waits after every waiter got the lock", n)
	}
}

// ioRound writes a file in mnt and reads it back.
func ioRound(t *testing.T, mnt string, i int) {
	t.Helper()
	name := filepath.Join(mnt, fmt.Sprintf("f%d", i%20))
	want := fmt.Sprintf("round %d", i)
	must(t, os.WriteFile(name, []byte(want), 0o644))
	if got, err := os.ReadFile(name); err != nil || string(got) != want {
		t.Fatalf("read %s back: %q, %v; want %q", name, got, err, want)
	}
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lockWait, a child helper, opens path n times and waits for an
// exclusive lock on each open file at once (kind "ofd": F_OFD_SETLKW;
// "flock": flock), letting each go once it has it.
func lockWait(kind, path, count string) error {
	n, err := strconv.Atoi(count)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			fd := int(f.Fd())
			switch kind {
			case "ofd":
				lk := unix.Flock_t{Type: unix.F_WRLCK}
				if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLKW, &lk); err != nil {
					errs <- fmt.Errorf("F_OFD_SETLKW: %w", err)
					return
				}
				lk.Type = unix.F_UNLCK
				errs <- unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
			default:
				if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
					errs <- fmt.Errorf("flock: %w", err)
					return
				}
				errs <- unix.Flock(fd, unix.LOCK_UN)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// flood, a child helper, writes and reads path from 16 goroutines until
// it is killed.
func flood(path string) error {
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := path + strconv.Itoa(i)
			for {
				if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
					return
				}
				var st syscall.Stat_t
				syscall.Stat(name, &st)
				os.ReadFile(name)
			}
		}()
	}
	wg.Wait()
	return fmt.Errorf("flood: a write failed")
}
