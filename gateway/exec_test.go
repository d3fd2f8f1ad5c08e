package gateway

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
)

// TestExec runs commands in a thread's jail over the socket: output,
// exit codes, cwd, env, stdin, a timeout, a refused cwd, and the jail gone
// with the thread.
func TestExec(t *testing.T) {
	testenv.RequireRootFUSE(t)
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c

	var out, errOut bytes.Buffer
	code, err := c.Exec(ctx, "acme", "t1", ExecRequest{Command: `echo hello; echo oops >&2; mkdir -p src && echo made > src/f; exit 3`}, &out, &errOut)
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
	code, err = c.Exec(ctx, "acme", "t1", ExecRequest{Command: `pwd; echo "$GREETING"; cat; env | grep -c sk-server-secret`, Cwd: "src",
		Env: map[string]string{"GREETING": "hi"}, Stdin: "from stdin\n"}, &out, nil)
	if want := "/workspace/src\nhi\nfrom stdin\n0\n"; out.String() != want {
		t.Errorf("exec output %q (exit %d, %v), want %q", out.String(), code, err, want)
	}

	start := time.Now()
	code, err = c.Exec(ctx, "acme", "t1", ExecRequest{Command: `echo started; sleep 60`, TimeoutSeconds: 0.3}, &out, nil)
	if err != nil || code != timeoutExit || time.Since(start) > 20*time.Second {
		t.Errorf("timed out command: exit %d, %v after %v; want %d at once", code, err, time.Since(start), timeoutExit)
	}

	if _, err := c.Exec(ctx, "acme", "t1", ExecRequest{Command: "true", Cwd: "../.."}, nil, nil); !errors.Is(err, ErrOutside) {
		t.Errorf("cwd ../..: %v, want outside the workspace", err)
	}
	if _, err := c.Exec(ctx, "acme", "t1", ExecRequest{Command: "true", Env: map[string]string{"AGENT": "0"}}, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("env AGENT=0: %v, want invalid", err)
	}

	// Closing the thread ends its jail; the next command starts another.
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code, err := c.Exec(ctx, "acme", "t1", ExecRequest{Command: `cat src/f`}, &out, nil); err != nil || code != 0 || out.String() != "made\n" {
		t.Fatalf("exec after close: exit %d, %v, %q", code, err, out.String())
	}
	if n := strings.Count(env.logBuf.String(), "jail started"); n != 2 {
		t.Errorf("%d jails started, want 2", n)
	}
}
