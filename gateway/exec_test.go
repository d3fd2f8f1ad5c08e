package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/gateway/jobs"
	"warren/internal/testenv"
	"warren/meta"
)

// TestExec runs commands in a thread's jail over the socket: output,
// exit codes, cwd, env, stdin, a timeout, a refused cwd, and the jail gone
// with the thread.
func TestExec(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c

	var out, errOut bytes.Buffer
	code, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: `echo hello; echo oops >&2; mkdir -p src && echo made > src/f; exit 3`}, &out, &errOut)
	if err != nil || code != 3 || out.String() != "hello\n" || errOut.String() != "oops\n" {
		t.Fatalf("exec: exit %d, %v, stdout %q, stderr %q", code, err, out.String(), errOut.String())
	}
	bound, err := c.Bind(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	// The command's file is in the workspace, seen through the mount.
	if got, err := os.ReadFile(filepath.Join(bound.MountPath, "src/f")); err != nil || string(got) != "made\n" {
		t.Fatalf("the command's file: %q, %v", got, err)
	}

	out.Reset()
	code, err = c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: `pwd; echo "$GREETING"; cat; env | grep -c sk-server-secret`, Cwd: "src",
		Env: map[string]string{"GREETING": "hi"}, Stdin: "from stdin\n"}, &out, nil)
	if want := "/workspace/src\nhi\nfrom stdin\n0\n"; out.String() != want {
		t.Errorf("exec output %q (exit %d, %v), want %q", out.String(), code, err, want)
	}

	start := time.Now()
	code, err = c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: `echo started; sleep 60`, TimeoutSeconds: 0.3}, &out, nil)
	if err != nil || code != jobs.TimeoutExit || time.Since(start) > 20*time.Second {
		t.Errorf("timed out command: exit %d, %v after %v; want %d at once", code, err, time.Since(start), jobs.TimeoutExit)
	}

	if _, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: "true", Cwd: "../.."}, nil, nil); !errors.Is(err, api.ErrOutside) {
		t.Errorf("cwd ../..: %v, want outside the workspace", err)
	}
	if _, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: "true", Env: map[string]string{"AGENT": "0"}}, nil, nil); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("env AGENT=0: %v, want invalid", err)
	}

	// Closing the thread ends its jail; the next command starts another.
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: `cat src/f`}, &out, nil); err != nil || code != 0 || out.String() != "made\n" {
		t.Fatalf("exec after close: exit %d, %v, %q", code, err, out.String())
	}
	if n := strings.Count(env.logBuf.String(), "jail started"); n != 2 {
		t.Errorf("%d jails started, want 2", n)
	}
}

// TestExecStaleWrite: commands act as their run in the filesystem. Run A
// reads a file, run B edits it with sed -i, and A's write based on its
// older read fails with ESTALE; after a fresh read it goes through.
func TestExecStaleWrite(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	events := follow(t, c, "acme", "t2")
	waitSubscribers(t, env.g, 1)
	exec := func(run, command string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		code, err := c.Exec(ctx, "acme", "t2", api.ExecRequest{Run: run, Command: command}, &out, &out)
		if err != nil {
			t.Fatalf("%s: %v", command, err)
		}
		return code, out.String()
	}
	if code, out := exec("A", `printf 'one\n' > notes.md && cat notes.md`); code != 0 || out != "one\n" {
		t.Fatalf("A's first write and read: %d %q", code, out)
	}
	if code, out := exec("B", `sed -i s/one/two/ notes.md && cat notes.md`); code != 0 || out != "two\n" {
		t.Fatalf("B's sed -i: %d %q", code, out)
	}
	code, out := exec("A", `cat > notes.md <<< mine`)
	if code == 0 || !strings.Contains(out, "Stale file handle") {
		t.Fatalf("A's write after B's edit: exit %d, %q; want ESTALE", code, out)
	}
	ev := nextOfType(t, events, api.EventWriteStale)
	if ev.Actor != "run A" || ev.Path != "notes.md" {
		t.Errorf("stale event %+v", ev)
	}
	if code, out := exec("A", `cat notes.md > /dev/null && cat > notes.md <<< mine && cat notes.md`); code != 0 || out != "mine\n" {
		t.Fatalf("A's write after a fresh read: %d %q", code, out)
	}
	// The file API's run is the same actor: B has not read A's last write.
	if _, err := c.Files().Edit(ctx, "acme", "t2", api.EditFileRequest{Path: "notes.md", Run: "B", Old: "mine", New: "b"}); !errors.Is(err, api.ErrStale) {
		t.Errorf("B's edit through the file API after A's write: %v, want stale", err)
	}
}

// TestExecTty: a command on a terminal, fed and resized while it runs
// through its id; and open input without a terminal.
func TestExecTty(t *testing.T) {
	testenv.RequireCommand(t, "stty")
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	ids := make(chan string, 1)
	var out testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		code, err := c.ExecStream(ctx, "acme", "tty", api.ExecRequest{Command: `tty; stty size; read line; stty size; echo "got $line"`,
			Tty: true, Rows: 30, Cols: 100}, func(id string) { ids <- id }, &out, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		done <- err
	}()
	id := <-ids
	for !strings.Contains(out.String(), "30 100") {
		select {
		case err := <-done:
			t.Fatalf("ended early: %v, %q", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := c.ExecResize(ctx, "acme", "tty", id, 40, 120); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the resize is applied beside the input
	if err := c.ExecStdin(ctx, "acme", "tty", id, "hi\n", false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, want := range []string{"/dev/pts/0\n", "30 100\n", "40 120\n", "got hi\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output %q lacks %q", got, want)
		}
	}
	if err := c.ExecResize(ctx, "acme", "tty", id, 10, 10); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("resize of an ended command: %v", err)
	}

	// Open input, no terminal: cat echoes what is sent until it is closed.
	var out2 testenv.SyncBuffer
	go func() {
		code, err := c.ExecStream(ctx, "acme", "tty", api.ExecRequest{Command: `cat`, OpenStdin: true}, func(id string) { ids <- id }, &out2, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		done <- err
	}()
	id = <-ids
	for _, part := range []string{"one\n", "two\n"} {
		if err := c.ExecStdin(ctx, "acme", "tty", id, part, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ExecStdin(ctx, "acme", "tty", id, "", true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || out2.String() != "one\ntwo\n" {
		t.Fatalf("cat with open input: %v, %q", err, out2.String())
	}
	if err := c.ExecResize(ctx, "other", "tty", id, 10, 10); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("resize through another thread: %v", err)
	}
}

// TestExecSettings: a thread's settings (network, limits, variables) shape
// its jail, are kept in its binding, change at once where they can and are
// refused where they would restart a running jail.
func TestExecSettings(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	output := func(req api.ExecRequest) string {
		t.Helper()
		var out bytes.Buffer
		if code, err := c.Exec(ctx, "acme", "t1", req, &out, nil); err != nil || code != 0 {
			t.Fatalf("exec %q: exit %d, %v", req.Command, code, err)
		}
		return out.String()
	}

	for _, bad := range []meta.Settings{
		{Network: "bridge"},
		{MemoryBytes: 1 << 20},
		{MaxProcs: 2},
		{MaxJobs: -1},
		{Env: map[string]string{"AGENT": "0"}},
		{Env: map[string]string{"GIT_CONFIG_COUNT": "0"}},
		{Env: map[string]string{"A B": "x"}},
	} {
		if _, err := c.BindWith(ctx, "acme", "t1", bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("settings %+v: %v, want invalid", bad, err)
		}
	}

	settings := meta.Settings{Network: "host", MemoryBytes: 96 << 20, MaxProcs: 64,
		Env: map[string]string{"NODE_ENV": "test", "SHARED": "thread"}}
	if _, err := c.BindWith(ctx, "acme", "t1", settings); err != nil {
		t.Fatal(err)
	}
	got := output(api.ExecRequest{Command: `echo $NODE_ENV $SHARED; readlink /proc/self/ns/net`, Env: map[string]string{"SHARED": "call"}})
	if want := "test call\n" + hostNet + "\n"; got != want {
		t.Errorf("command of a thread on the host network: %q, want %q", got, want)
	}
	if !strings.Contains(env.logBuf.String(), "100663296 bytes of memory, 64 processes") {
		t.Errorf("the jail's limits are not the thread's: %s", env.logBuf.String())
	}

	// New variables apply to the next command, in the same jail.
	settings.Env = map[string]string{"NODE_ENV": "production"}
	if _, err := c.BindWith(ctx, "acme", "t1", settings); err != nil {
		t.Fatal(err)
	}
	if got := output(api.ExecRequest{Command: `echo $NODE_ENV-$SHARED`}); got != "production-\n" {
		t.Errorf("after new variables: %q", got)
	}
	// Another network would need another jail: refused while it runs,
	// and nothing changes.
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{Network: "none"}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a new network for a running jail: %v, want conflict", err)
	}
	ti, err := c.Thread(ctx, "acme", "t1")
	if err != nil || !reflect.DeepEqual(ti.Settings, settings) {
		t.Errorf("stored settings %+v (%v), want %+v", ti.Settings, err, settings)
	}

	// A closed thread keeps its settings when it is bound again...
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	if got := output(api.ExecRequest{Command: `echo $NODE_ENV; readlink /proc/self/ns/net`}); got != "production\n"+hostNet+"\n" {
		t.Errorf("after close and bind: %q", got)
	}
	// ...and takes new network settings once its jail is gone.
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{}); err != nil {
		t.Fatal(err)
	}
	if got := output(api.ExecRequest{Command: `echo "[$NODE_ENV]"; readlink /proc/self/ns/net`}); strings.Contains(got, hostNet) || !strings.HasPrefix(got, "[]\n") {
		t.Errorf("with default settings: %q; want no variables and a network of its own", got)
	}
}

// TestExecFromBaseNamespace: a thread's jail is forked from the gateway's
// base namespace (jail.Base), which holds none of the threads' mounts:
// binding more threads does not make a jail's start copy more mounts. The
// jail sees its own workspace all the same, and nothing of the data
// folder.
func TestExecFromBaseNamespace(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	const threads = 20
	for i := range threads {
		if _, err := c.Bind(ctx, "acme", fmt.Sprintf("b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	base := env.g.jails.Base()
	if base == nil {
		t.Fatal("the gateway has no base namespace for its jails")
	}
	if cfg := env.g.jails.JailConfig(meta.Settings{}, "/x", ""); cfg.Base != base {
		t.Fatal("the jails' configuration does not start them from the base")
	}
	mounted := len(testenv.MountsUnder(t, env.cfg.DataDir))
	if mounted < threads {
		t.Fatalf("%d mounts under the data folder, want at least %d", mounted, threads)
	}
	if n := len(testenv.Mounts(t)); base.Mounts() > n-threads {
		t.Errorf("the base holds %d mounts, the daemon's namespace %d with %d threads bound", base.Mounts(), n, threads)
	}
	var out bytes.Buffer
	code, err := c.Exec(ctx, "acme", "b7", api.ExecRequest{Command: `echo hi > f && cat f && cat /proc/self/mountinfo`}, &out, nil)
	if err != nil || code != 0 || !strings.HasPrefix(out.String(), "hi\n") {
		t.Fatalf("exec: exit %d, %v, %q", code, err, out.String())
	}
	// The one line that may name a folder of the data folder is the
	// home's: a bind's mountinfo line names its source's path in its
	// filesystem. It names the thread's own home and nothing else.
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/home/agent" {
			continue
		}
		if strings.Contains(line, env.cfg.DataDir) {
			t.Errorf("the jail sees the data folder: %s", line)
		}
	}
	bound, err := c.Bind(ctx, "acme", "b7")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(bound.MountPath, "f")); err != nil || string(got) != "hi\n" {
		t.Errorf("the command's file through the thread's mount: %q, %v", got, err)
	}
}

// TestExecTerm: a command on a terminal gets the client's TERM, else
// xterm-256color, so clear and tput work; a command without one has no
// TERM; a term without a terminal, or that names no terminal type, is
// refused.
func TestExecTerm(t *testing.T) {
	testenv.RequireCommand(t, "tput")
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	for _, tc := range []struct {
		req  api.ExecRequest
		want string
	}{
		{api.ExecRequest{Command: `echo "[$TERM]"; tput cols`, Tty: true, Rows: 24, Cols: 77}, "[xterm-256color]\n77\n"},
		{api.ExecRequest{Command: `echo "[$TERM]"; tput cols`, Tty: true, Rows: 24, Cols: 77, Term: "vt100"}, "[vt100]\n77\n"},
		// (bash gives itself TERM=dumb, but exports none.)
		{api.ExecRequest{Command: `env | grep '^TERM=' || echo none`}, "none\n"},
	} {
		var out testenv.SyncBuffer
		code, err := c.ExecStream(ctx, "acme", "term", tc.req, nil, &out, &out)
		got := strings.ReplaceAll(out.String(), "\r", "")
		if err != nil || code != 0 || got != tc.want {
			t.Errorf("%+v: exit %d, %v, %q; want %q", tc.req, code, err, got, tc.want)
		}
	}
	for _, req := range []api.ExecRequest{
		{Command: "true", Term: "vt100"},
		{Command: "true", Tty: true, Term: "xterm; rm -rf /"},
		{Command: "true", Tty: true, Term: strings.Repeat("x", 65)},
	} {
		if _, err := c.ExecStream(ctx, "acme", "term", req, nil, io.Discard, io.Discard); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("term %q (tty %v): %v, want invalid", req.Term, req.Tty, err)
		}
	}
}
