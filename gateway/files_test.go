package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/fs"
)

// nextOfType reads s until an event of type typ arrives.
func nextOfType(t *testing.T, s *stream, typ api.EventType) api.Event {
	t.Helper()
	for {
		ev := s.next(t)
		if ev.Type == typ {
			return ev
		}
	}
}

// TestFileAPI: a lead run and its subagent read and edit one file over
// the socket; each is checked against its own read, the refusal carries
// the seed's message as an error and as an event, and the thread's mount
// sees every change at once.
func TestFileAPI(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	c := env.c
	bound, err := c.Bind(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	mnt := bound.MountPath
	events := follow(t, c, "acme", "t1")
	waitSubscribers(t, env.g, 1)

	w, err := c.Files().Write(ctx, "acme", "t1", api.WriteFileRequest{Path: "src/app.ts", Run: "lead", Content: "let a = 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Version == 0 || w.Size != 10 {
		t.Fatalf("write answered %+v", w)
	}
	// The lead's own write is as good as a read; the subagent reads.
	r, err := c.Files().Read(ctx, "acme", "t1", api.ReadFileRequest{Path: "src/app.ts", Run: "lead/sub"})
	if err != nil || r.Content != "let a = 1\n" || r.Version != w.Version {
		t.Fatalf("read %+v, %v", r, err)
	}
	if _, err := c.Files().Edit(ctx, "acme", "t1", api.EditFileRequest{Path: "src/app.ts", Run: "lead/sub", Old: "a = 1", New: "a = 2"}); err != nil {
		t.Fatalf("subagent's edit: %v", err)
	}
	// The mount shows the edit at once (the kernel had the old content).
	if got, err := os.ReadFile(filepath.Join(mnt, "src/app.ts")); err != nil || string(got) != "let a = 2\n" {
		t.Fatalf("mount reads %q, %v", got, err)
	}

	_, err = c.Files().Edit(ctx, "acme", "t1", api.EditFileRequest{Path: "src/app.ts", Run: "lead", Old: "let", New: "const"})
	var apiErr *api.APIError
	const msg = "src/app.ts changed since it was read. Read it again before you edit it."
	if !errors.Is(err, api.ErrStale) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Message != msg {
		t.Fatalf("lead's stale edit: %#v", err)
	}
	ev := nextOfType(t, events, api.EventWriteStale)
	if ev.Tenant != "acme" || ev.Thread != "t1" || ev.Actor != "run lead" || ev.Path != "src/app.ts" || ev.Message != msg {
		t.Fatalf("stale event %+v", ev)
	}
	// A fresh read clears it; the path may be given as the mount's.
	if _, err := c.Files().Read(ctx, "acme", "t1", api.ReadFileRequest{Path: filepath.Join(mnt, "src/app.ts"), Run: "lead"}); err != nil {
		t.Fatal(err)
	}
	e, err := c.Files().Edit(ctx, "acme", "t1", api.EditFileRequest{Path: "src/app.ts", Run: "lead", Old: "let", New: "const"})
	if err != nil || e.Replaced != 1 {
		t.Fatalf("lead's edit after a fresh read: %+v, %v", e, err)
	}

	for _, c2 := range []struct {
		req  api.EditFileRequest
		want error
		msg  string
	}{
		{api.EditFileRequest{Path: "src/app.ts", Run: "lead", Old: "nothing like it", New: "x"}, api.ErrNoMatch, "The text to replace was not found in src/app.ts."},
		{api.EditFileRequest{Path: "../other/app.ts", Run: "lead", Old: "a", New: "b"}, api.ErrOutside, "../other/app.ts is outside the workspace."},
		{api.EditFileRequest{Path: "/etc/passwd", Run: "lead", Old: "root", New: "toor"}, api.ErrOutside, "/etc/passwd is outside the workspace."},
		{api.EditFileRequest{Path: "missing.ts", Run: "lead", Old: "a", New: "b"}, api.ErrNotFound, "missing.ts: no such file."},
		{api.EditFileRequest{Path: "src/app.ts", Run: "lead", Old: "", New: "b"}, api.ErrInvalid, "empty"},
		{api.EditFileRequest{Path: "src/app.ts", Run: "bad\nrun", Old: "a", New: "b"}, api.ErrInvalid, "run ids"},
	} {
		_, err := c.Files().Edit(ctx, "acme", "t1", c2.req)
		if !errors.Is(err, c2.want) || !strings.Contains(err.Error(), c2.msg) {
			t.Errorf("edit %+v: %v, want %v with %q", c2.req, err, c2.want, c2.msg)
		}
	}
	if got, _ := os.ReadFile("/etc/passwd"); !strings.HasPrefix(string(got), "root") {
		t.Fatal("/etc/passwd changed")
	}
}

// TestFileAPIRunOnMount: a process registered for a run acts as that run
// on the mount, so a read through the file API and a write through the
// mount are one actor's; an unregistered process is its own actor, and
// its stale write on the mount is refused and reported with the thread.
func TestFileAPIRunOnMount(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	c := env.c
	bound, err := c.Bind(ctx, "acme", "t2")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(bound.MountPath, "notes.md")
	if _, err := c.Files().Write(ctx, "acme", "t2", api.WriteFileRequest{Path: "notes.md", Run: "writer", Content: "one\n"}); err != nil {
		t.Fatal(err)
	}
	events := follow(t, c, "acme", "t2")
	waitSubscribers(t, env.g, 1)

	// A shell that reads the file itself, waits, then writes it.
	sh := exec.Command("/bin/sh", "-c", `read -r _ < "$1"; echo read; read -r _; printf 'mine\n' > "$1"`, "sh", f)
	sh.Dir = "/"
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "read\n" {
		t.Fatalf("shell said %q", line)
	}
	if _, err := c.Files().Write(ctx, "acme", "t2", api.WriteFileRequest{Path: "notes.md", Run: "writer", Content: "two\n"}); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in)
	if err := sh.Wait(); err == nil {
		t.Fatal("the shell's stale write through the mount was allowed")
	}
	ev := nextOfType(t, events, api.EventWriteStale)
	if ev.Thread != "t2" || ev.Path != "notes.md" || !strings.HasPrefix(ev.Actor, "process ") {
		t.Fatalf("stale event %+v", ev)
	}

	// Registered for the run "writer", a process writes as that run: its
	// write follows the run's own read through the file API.
	sleeper := exec.Command("/bin/sh", "-c", `read -r _; printf 'three\n' > "$1"`, "sh", f)
	sleeper.Dir = "/"
	sin, err := sleeper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if err := c.RegisterRun(ctx, "acme", "t2", sleeper.Process.Pid, "writer"); err != nil {
		t.Fatal(err)
	}
	if got := env.g.hub.ActorOfPid(sleeper.Process.Pid); got != fs.RunActor("writer") {
		t.Fatalf("registered process acts as %v", got)
	}
	if _, err := c.Files().Write(ctx, "acme", "t2", api.WriteFileRequest{Path: "notes.md", Run: "other", Content: "other\n"}); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(sin)
	if err := sleeper.Wait(); err == nil {
		t.Fatal("a write of the run on the mount after another run's write was allowed")
	}
	if _, err := c.Files().Read(ctx, "acme", "t2", api.ReadFileRequest{Path: "notes.md", Run: "writer"}); err != nil {
		t.Fatal(err)
	}
	// Ending the run forgets it: its record, and its process.
	before := env.g.hub.ReadStats().Records
	if err := c.EndRun(ctx, "acme", "t2", "writer"); err != nil {
		t.Fatal(err)
	}
	if after := env.g.hub.ReadStats().Records; after != before-1 {
		t.Errorf("%d read records after the run ended, %d before", after, before)
	}
	if err := c.RegisterRun(ctx, "acme", "t2", 0, "x"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("register pid 0: %v", err)
	}
	if err := c.RegisterRun(ctx, "acme", "t2", 1<<30, "x"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("register a pid that does not exist: %v", err)
	}
}

// TestFileAPIBodies: a file over 1 MiB may be written (the file API's own
// body bound), one over the file bound may not.
func TestFileAPIBodies(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", 3<<20)
	w, err := env.c.Files().Write(ctx, "acme", "t3", api.WriteFileRequest{Path: "big.txt", Run: "r", Content: big})
	if err != nil || w.Size != len(big) {
		t.Fatalf("write of 3 MiB: %+v, %v", w, err)
	}
	r, err := env.c.Files().Read(ctx, "acme", "t3", api.ReadFileRequest{Path: "big.txt", Run: "r"})
	if err != nil || len(r.Content) != len(big) {
		t.Fatalf("read of 3 MiB: %d bytes, %v", len(r.Content), err)
	}
	huge := strings.Repeat("y", fs.MaxFileBytes+1)
	if _, err := env.c.Files().Write(ctx, "acme", "t3", api.WriteFileRequest{Path: "huge.txt", Run: "r", Content: huge}); err == nil {
		t.Fatal("a write over the file bound was accepted")
	}
	if _, err := os.Stat(filepath.Join(env.cfg.DataDir, "workspaces", "acme", "t3", "huge.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused file exists: %v", err)
	}
}

// TestFileAPIBeforeFirstCommand: a workspace is its jail's user's from its
// bind, so what the file API writes before the thread's first command is
// the commands' to change.
func TestFileAPIBeforeFirstCommand(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	c := env.c
	if _, err := c.Files().Write(ctx, "acme", "early", api.WriteFileRequest{Path: "src/app.ts", Content: "one\n"}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code, err := c.Exec(ctx, "acme", "early", api.ExecRequest{Command: "echo two >> src/app.ts && rm -r src && mkdir src && echo three > src/new.ts && cat src/new.ts"}, &out, &out)
	if err != nil || code != 0 || out.String() != "three\n" {
		t.Fatalf("a command on what the file API made before it: exit %d, %v, %q", code, err, out.String())
	}
}
