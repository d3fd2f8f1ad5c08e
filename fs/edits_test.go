package fs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// These show that no edit is lost through the mounts: K writers racing
// on one counter, the editor's rename, truncate, unlink, changes behind
// the filesystem's back, reused pids and the lock shared between mounts.

// staleLog collects the refusals a hub's mounts report.
type staleLog struct {
	mu  sync.Mutex
	got []Stale
}

func (l *staleLog) add(s Stale) {
	l.mu.Lock()
	l.got = append(l.got, s)
	l.mu.Unlock()
}

func (l *staleLog) list() []Stale {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Stale(nil), l.got...)
}

// sharedMounts serves one backing folder twice on one hub.
func sharedMounts(t *testing.T, cfg HubConfig) (hub *Hub, backing, a, b string, log *staleLog) {
	t.Helper()
	return sharedMountsWith(t, cfg, Options{})
}

func sharedMountsWith(t *testing.T, cfg HubConfig, opts Options) (hub *Hub, backing, a, b string, log *staleLog) {
	t.Helper()
	testenv.RequireRootFUSE(t)
	hub = NewHub(cfg)
	t.Cleanup(hub.Close)
	log = &staleLog{}
	opts.Hub, opts.OnStale, opts.Name = hub, log.add, "A"
	backing, a = mountTemp(t, opts)
	opts.Name = "B"
	b = mountAgain(t, backing, opts)
	return hub, backing, a, b, log
}

// mountAgain serves backing at a new mount point.
func mountAgain(t *testing.T, backing string, opts Options) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "again")
	must(t, os.Mkdir(mnt, 0o755))
	m, err := serveTest(context.Background(), backing, mnt, opts)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return mnt
}

func TestNoLostUpdates(t *testing.T) {
	const k, m = 4, 40
	for _, c := range []struct {
		name   string
		off    bool
		served bool
	}{{"checks on", false, false}, {"checks on, served", false, true}, {"checks off", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			_, _, a, b, _ := sharedMountsWith(t, HubConfig{NoEditChecks: c.off}, Options{NoPassthrough: c.served})
			must(t, os.WriteFile(filepath.Join(a, "counter"), []byte("0"), 0o666))
			var cmds []*exec.Cmd
			var outs []fmt.Stringer
			for i := range k {
				mnt := a
				if i%2 == 1 {
					mnt = b // half the writers come through the second mount
				}
				cmd, out, err := startChild("increment", filepath.Join(mnt, "counter"), strconv.Itoa(m))
				if err != nil {
					t.Fatal(err)
				}
				cmds, outs = append(cmds, cmd), append(outs, out)
			}
			retries := 0
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("writer %d: %v\n%s", i, err, outs[i])
				}
				var n int
				fmt.Sscanf(outs[i].String(), "retries %d", &n)
				retries += n
			}
			got, err := os.ReadFile(filepath.Join(a, "counter"))
			must(t, err)
			v, _ := strconv.Atoi(string(got))
			t.Logf("%d writers × %d increments: counter %d, %d stale writes retried", k, m, v, retries)
			if c.off {
				if v >= k*m {
					t.Errorf("with the checks off the counter reached %d: the test cannot tell lost updates", v)
				}
				return
			}
			if v != k*m {
				t.Errorf("counter is %d, want %d: updates were lost", v, k*m)
			}
		})
	}
}

// agent is a shell acting as one run: it runs the lines it is given one
// at a time, outside every mount, and says how each ended.
type agent struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	err agentStderr
}

// agentStderr is an agent's standard error: a file the shell writes
// itself, so that what a command wrote there is in it once its "rc=" line
// is read. (Through a pipe, a goroutine copies it, and may lag behind.)
type agentStderr struct{ path string }

func (e agentStderr) String() string {
	b, _ := os.ReadFile(e.path)
	return string(b)
}

func startAgent(t *testing.T, hub *Hub, run, dir string) *agent {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `cd "$1" || exit 1; while read -r line; do (eval "$line"); echo "rc=$?"; done`, "sh", dir)
	// sh itself starts outside the mount; the cd above runs in the shell,
	// a process of its own, not in this test process.
	cmd.Dir = "/"
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	must(t, err)
	defer stderr.Close() // the shell has its own
	ag := &agent{cmd: cmd, in: in, out: bufio.NewScanner(out), err: agentStderr{stderr.Name()}}
	cmd.Stderr = stderr
	must(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if run != "" {
		must(t, hub.RegisterRun(cmd.Process.Pid, run))
	}
	return ag
}

// do runs one line and returns its exit status.
func (ag *agent) do(t *testing.T, line string) int {
	t.Helper()
	if _, err := fmt.Fprintln(ag.in, line); err != nil {
		t.Fatalf("agent: %v", err)
	}
	for ag.out.Scan() {
		if rc, ok := strings.CutPrefix(ag.out.Text(), "rc="); ok {
			n, _ := strconv.Atoi(rc)
			return n
		}
	}
	t.Fatalf("agent ended: %s", ag.err.String())
	return -1
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

func TestStaleEditorPattern(t *testing.T) {
	hub, _, a, b, log := sharedMounts(t, HubConfig{})
	f := filepath.Join(a, "app.ts")
	must(t, os.WriteFile(f, []byte("v1\n"), 0o666))
	lead := startAgent(t, hub, "lead", a)
	if rc := lead.do(t, "cat app.ts >/dev/null"); rc != 0 {
		t.Fatalf("read: rc %d: %s", rc, lead.err)
	}
	// Someone else (this test process, an actor of its own) changes the
	// file through the other mount.
	must(t, os.WriteFile(filepath.Join(b, "app.ts"), []byte("theirs\n"), 0o666))

	if rc := lead.do(t, "printf 'mine\\n' > app.ts.tmp && mv app.ts.tmp app.ts"); rc == 0 {
		t.Fatal("renaming a copy over a file changed since it was read was allowed")
	}
	if !strings.Contains(lead.err.String(), "Stale file handle") {
		t.Errorf("mv did not fail with ESTALE: %s", lead.err)
	}
	if got := readString(t, f); got != "theirs\n" {
		t.Fatalf("file holds %q after the refused rename, want the other writer's", got)
	}
	want := Stale{Op: "rename", Path: "app.ts", Actor: RunActor("lead")}
	got := log.list()
	if len(got) != 1 || got[0].Op != want.Op || got[0].Path != want.Path || got[0].Actor != want.Actor {
		t.Fatalf("stale reports %+v, want one %+v", got, want)
	}
	if msg := got[0].Message(); msg != "app.ts changed since it was read. Read it again before you edit it." {
		t.Errorf("message %q", msg)
	}
	// A fresh read clears it.
	if rc := lead.do(t, "cat app.ts >/dev/null && mv app.ts.tmp app.ts"); rc != 0 {
		t.Fatalf("rename after a fresh read: rc %d: %s", rc, lead.err)
	}
	if got := readString(t, f); got != "mine\n" {
		t.Fatalf("file holds %q, want the lead's", got)
	}
}

func TestStaleTruncateAndUnlink(t *testing.T) {
	for _, c := range []struct{ name, line string }{
		{"truncate", "truncate -s 0 f"},
		{"open with O_TRUNC", ": > f"},
		{"unlink", "rm -f f"},
		{"write open", "printf x >> f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hub, _, a, _, _ := sharedMounts(t, HubConfig{})
			must(t, os.WriteFile(filepath.Join(a, "f"), []byte("first\n"), 0o666))
			ag := startAgent(t, hub, "r1", a)
			if rc := ag.do(t, "cat f >/dev/null"); rc != 0 {
				t.Fatalf("read: %s", ag.err)
			}
			must(t, os.WriteFile(filepath.Join(a, "f"), []byte("second\n"), 0o666))
			if rc := ag.do(t, c.line); rc == 0 {
				t.Fatalf("%q after another actor's write was allowed", c.line)
			}
			if got := readString(t, filepath.Join(a, "f")); got != "second\n" {
				t.Fatalf("file holds %q, want the other actor's edit kept", got)
			}
			if rc := ag.do(t, "cat f >/dev/null && "+c.line); rc != 0 {
				t.Fatalf("%q after a fresh read: %s", c.line, ag.err)
			}
		})
	}
}

// TestOwnWritesAndFirstWrites: an actor's own writes keep its record
// current, and an actor that never read a file is not refused.
func TestOwnWritesAndFirstWrites(t *testing.T) {
	hub, _, a, _, _ := sharedMounts(t, HubConfig{})
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("0"), 0o666))
	one := startAgent(t, hub, "one", a)
	two := startAgent(t, hub, "two", a)
	for _, line := range []string{"cat f >/dev/null", "printf 1 > f", "printf 2 > f", "printf 3 >> f", "truncate -s 1 f"} {
		if rc := one.do(t, line); rc != 0 {
			t.Fatalf("run one, %q: %s", line, one.err)
		}
	}
	if rc := two.do(t, "printf two > f"); rc != 0 {
		t.Fatalf("a run that never read the file was refused: %s", two.err)
	}
	if rc := one.do(t, "printf 4 > f"); rc == 0 {
		t.Fatal("run one overwrote run two's write without reading it")
	}
	if got := readString(t, filepath.Join(a, "f")); got != "two" {
		t.Fatalf("file holds %q", got)
	}
}

// TestBehindTheBack: a same-size edit made directly in the backing
// folder, with its mtime put back, is still a change.
func TestBehindTheBack(t *testing.T) {
	hub, backing, a, _, _ := sharedMounts(t, HubConfig{})
	bf := filepath.Join(backing, "f")
	must(t, os.WriteFile(bf, []byte("aaaa"), 0o666))
	ag := startAgent(t, hub, "r", a)
	if rc := ag.do(t, "cat f >/dev/null"); rc != 0 {
		t.Fatalf("read: %s", ag.err)
	}
	before, err := os.Stat(bf)
	must(t, err)
	must(t, os.WriteFile(bf, []byte("bbbb"), 0o666))
	must(t, os.Chtimes(bf, before.ModTime(), before.ModTime()))
	after, err := os.Stat(bf)
	must(t, err)
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the edit changed size or mtime: %v %v", before, after)
	}
	if rc := ag.do(t, "printf cccc > f"); rc == 0 {
		t.Fatal("a write after a same-size edit behind the filesystem's back was allowed")
	}
	if got := readString(t, bf); got != "bbbb" {
		t.Fatalf("backing file holds %q", got)
	}
}

// TestReusedPid: a process that gets the pid of one that read a file is a
// new actor, with no read of its own.
func TestReusedPid(t *testing.T) {
	testenv.RequireRoot(t)
	_, _, a, _, _ := sharedMounts(t, HubConfig{})
	f := filepath.Join(a, "f")
	must(t, os.WriteFile(f, []byte("one"), 0o666))

	// The reader reads f itself (a redirection, in the shell's process)
	// and waits; its write after a foreign change is refused.
	reader := exec.Command("/bin/sh", "-c", `read -r _ < "$1"; echo read; read -r _; printf mine > "$1"`, "sh", f)
	reader.Dir = "/"
	in, err := reader.StdinPipe()
	must(t, err)
	out, err := reader.StdoutPipe()
	must(t, err)
	must(t, reader.Start())
	pid := reader.Process.Pid
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "read\n" {
		t.Fatalf("reader said %q", line)
	}
	must(t, os.WriteFile(f, []byte("two"), 0o666))
	fmt.Fprintln(in)
	if err := reader.Wait(); err == nil {
		t.Fatal("the reader's stale write was allowed")
	}
	must(t, os.WriteFile(f, []byte("three"), 0o666))

	// Now a new process with the same pid writes without reading. A
	// shell takes the pid: it sets the next pid and forks at once, with no
	// thread of its own that could take the pid between the two (this test
	// process's threads, made at any time, would), trying again while
	// another process of the host takes it first.
	w := exec.Command("/bin/sh", "-c", `f=$1 p=$2 i=0
while [ $i -lt 2000 ]; do
	i=$((i + 1))
	echo $((p - 1)) > /proc/sys/kernel/ns_last_pid
	sh -c '[ "$$" = "$2" ] || exit 99; printf reused > "$1"' sh "$f" "$p"
	rc=$?
	[ $rc = 99 ] && continue
	exit $rc
done
exit 98`, "sh", f, strconv.Itoa(pid))
	w.Dir = "/"
	out2, err := w.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 98:
		t.Fatalf("could not get pid %d again in 2000 tries (another process took it each time)", pid)
	case err != nil:
		t.Fatalf("a new process with pid %d inherited the old one's read: %v: %s", pid, err, out2)
	}
	if got := readString(t, f); got != "reused" {
		t.Fatalf("file holds %q", got)
	}
}

// TestRecordsOfEndedProcesses: the read records of a process go when it
// ends.
func TestRecordsOfEndedProcesses(t *testing.T) {
	hub, _, a, _, _ := sharedMounts(t, HubConfig{})
	for i := range 20 {
		must(t, os.WriteFile(filepath.Join(a, fmt.Sprint("f", i)), []byte("x\n"), 0o666))
	}
	base := hub.ReadStats().Records
	cmd := exec.Command("/bin/sh", "-c", `cd "$1" && for f in f*; do read -r _ < "$f"; done`, "sh", a)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := hub.ReadStats().Records; got < base+20 {
		t.Fatalf("%d records after 20 reads by a process, had %d", got, base)
	}
	hub.Sweep()
	if got := hub.ReadStats().Records; got > base {
		t.Fatalf("%d records after the reader ended, want at most %d", got, base)
	}
}

// TestLockSharedByMounts: a path's lock is one for every mount of its
// folder, and another folder's path of the same name has its own.
func TestLockSharedByMounts(t *testing.T) {
	hub, backing, a, b, _ := sharedMounts(t, HubConfig{})
	_, c := mountTemp(t, Options{Hub: hub}) // another folder, same hub
	for _, mnt := range []string{a, c} {
		must(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o666))
	}
	var st syscall.Stat_t
	bfd, err := unix.Open(backing, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	gen, err := statGen(bfd, "", &st)
	unix.Close(bfd)
	must(t, err)
	_, _, unlock := hub.ledger.lock(pathKey{dev: st.Dev, dir: st.Ino, gen: gen, name: "f"})
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()

	done := make(map[string]chan error)
	for _, mnt := range []string{a, b, c} {
		ch := make(chan error, 1)
		done[mnt] = ch
		go func() {
			f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			ch <- err
		}()
	}
	select {
	case err := <-done[c]:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("a write in another folder waited for this folder's lock")
	}
	for _, mnt := range []string{a, b} {
		select {
		case err := <-done[mnt]:
			t.Fatalf("a write through %s did not wait for the lock (err %v)", mnt, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	unlock()
	unlocked = true
	for _, mnt := range []string{a, b} {
		select {
		case err := <-done[mnt]:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("a write through %s still waits after the lock was let go", mnt)
		}
	}
}

// TestRenameBothWays: renames between two locked paths in opposite
// directions never deadlock.
func TestRenameBothWays(t *testing.T) {
	_, _, a, b, _ := sharedMounts(t, HubConfig{})
	must(t, os.Mkdir(filepath.Join(a, "x"), 0o755))
	must(t, os.Mkdir(filepath.Join(a, "y"), 0o755))
	must(t, os.WriteFile(filepath.Join(a, "x", "f"), []byte("1"), 0o666))
	must(t, os.WriteFile(filepath.Join(a, "y", "g"), []byte("2"), 0o666))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, p := range [][2]string{{filepath.Join(a, "x", "f"), filepath.Join(a, "y", "g")}, {filepath.Join(b, "y", "g"), filepath.Join(b, "x", "f")}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if err := unix.Renameat2(unix.AT_FDCWD, p[0], unix.AT_FDCWD, p[1], unix.RENAME_EXCHANGE); err != nil && !errors.Is(err, unix.ENOENT) {
					errs <- err
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("opposite renames did not finish: deadlock")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
