package jail

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// startWait bounds how long a Start whose ctx ended may take to return:
// far more than it needs (it kills a process and reaps it), and only a
// failing test waits that long.
const startWait = 10 * time.Second

// TestStartCancelled starts a jail with a ctx that has ended already:
// Start must fail with ctx's error before it starts anything.
func TestStartCancelled(t *testing.T) {
	testenv.RequireRoot(t)
	ws := t.TempDir()
	before := snapshot(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j, err := Start(ctx, based(Config{Workspace: ws}))
	if err == nil {
		j.Close()
		t.Fatal("Start with a cancelled ctx started a jail")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled ctx: %v; want context.Canceled", err)
	}
	before.check(t)
}

// TestStartEndsWithCtx ends the ctx of a Start whose init never answers
// (a stand-in that reads the setup, tells it did, and sleeps): Start must return
// ctx's error at once, and leave no process, descriptor or cgroup behind.
// It used to wait for the init's answer whatever ctx did, and kept the
// init's end of the socket open while it waited, so not even the init's
// death ended the wait.
func TestStartEndsWithCtx(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		name string
		want error
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", context.Canceled, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
		{"deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			// Mostly after the init ran; if the init is slow to come,
			// it comes before, which must end the start as well.
			return context.WithTimeout(context.Background(), 500*time.Millisecond)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fifo := filepath.Join(dir, "running")
			if err := unix.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			initPath := filepath.Join(dir, "init")
			// It waits for the setup message (fd 3 is its end of the
			// socket), so that Start has made the cgroup and waits for
			// the answer when the test hears of it.
			script := "#!/bin/sh\nhead -c 1 <&3 >/dev/null\necho running > " + fifo + "\nexec sleep 600\n"
			if err := os.WriteFile(initPath, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t)

			running := make(chan struct{})
			go func() {
				defer close(running)
				if f, err := os.Open(fifo); err == nil {
					io.Copy(io.Discard, f)
					f.Close()
				}
			}()
			// Frees the reader above if the init never ran.
			t.Cleanup(func() {
				if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
					unix.Close(fd)
				}
			})
			ctx, cancel := c.ctx()
			defer cancel()
			type result struct {
				j   *Jail
				err error
			}
			res := make(chan result, 1)
			go func() {
				j, err := Start(ctx, Config{Workspace: t.TempDir(), Binary: initPath})
				res <- result{j, err}
			}()
			var done *result
			initPid := 0
			select {
			case <-running:
				inits := before.newChildren(t)
				if len(inits) != 1 {
					t.Fatalf("children started by Start: %v; want one, the init", inits)
				}
				initPid = inits[0]
				if len(cgroupsOf(initPid)) == 0 {
					t.Logf("the init %d has no cgroup: this host gives jails rlimits", initPid)
				}
				// If Start never returns, the init must not outlive
				// the test.
				t.Cleanup(func() { unix.Kill(initPid, unix.SIGKILL) })
				if c.want == context.Canceled {
					cancel()
				} // else the deadline comes while Start waits for the answer
			case r := <-res:
				if c.want == context.Canceled {
					if r.j != nil {
						r.j.Close()
					}
					t.Fatalf("Start returned before its init ran, with its ctx alive: %v", r.err)
				}
				done = &r
			}
			if done == nil {
				select {
				case r := <-res:
					done = &r
				case <-time.After(startWait):
					t.Fatalf("Start did not return within %v of its ctx's end", startWait)
				}
			}
			if done.err == nil {
				done.j.Close()
				t.Fatal("Start returned a jail whose init never answered")
			}
			if !errors.Is(done.err, c.want) {
				t.Fatalf("Start: %v; want %v", done.err, c.want)
			}
			before.check(t) // the init too: a zombie is still a child
			if initPid != 0 {
				if left := cgroupsOf(initPid); len(left) > 0 {
					t.Errorf("the init's cgroup was left behind: %v", left)
				}
			}
		})
	}
}

// state is what a failed Start must leave as it found: the test
// process's children and descriptors. (Its jail's cgroup is named after
// the init: cgroupsOf. Other tests on the host start jails of their own.)
type state struct {
	children, fds []string
}

func snapshot(t *testing.T) state {
	t.Helper()
	// The runtime opens its poller's descriptors on first use: open
	// them now, or they would count as left behind.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var s state
	for _, e := range fds {
		s.fds = append(s.fds, e.Name())
	}
	for _, pid := range children(t) {
		s.children = append(s.children, strconv.Itoa(pid))
	}
	return s
}

// cgroupsOf returns the cgroup folders of the jail whose init is pid
// (limits_linux.go names them), v2 or v1.
func cgroupsOf(pid int) []string {
	var dirs []string
	for _, pattern := range []string{cgroupRoot + "/warren/jail-", cgroupRoot + "/*/warren/jail-"} {
		m, _ := filepath.Glob(pattern + strconv.Itoa(pid))
		dirs = append(dirs, m...)
	}
	return dirs
}

// newChildren returns the test process's children that were not there at
// the snapshot.
func (s state) newChildren(t *testing.T) []int {
	t.Helper()
	var pids []int
	for _, pid := range children(t) {
		if !slices.Contains(s.children, strconv.Itoa(pid)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// check fails the test if a child or a descriptor appeared since the
// snapshot.
func (s state) check(t *testing.T) {
	t.Helper()
	now := snapshot(t)
	for _, c := range []struct {
		what        string
		before, now []string
	}{{"child process", s.children, now.children}, {"descriptor", s.fds, now.fds}} {
		for _, x := range c.now {
			if !slices.Contains(c.before, x) {
				t.Errorf("a %s was left behind: %s", c.what, x)
			}
		}
	}
}

// children lists the pids whose parent is the test process, zombies too.
func children(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			pids = append(pids, pid)
		}
	}
	return pids
}
