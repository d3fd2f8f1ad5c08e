package badger_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/meta"
	"warren/meta/badger"
	"warren/meta/metatest"
)

// openBadger opens a store in dir and closes it when the test ends.
func openBadger(t testing.TB, dir string) *badger.Store {
	t.Helper()
	s, err := badger.Open(t.Context(), dir, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	if err != nil {
		t.Fatalf("badger.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func closeBadger(t testing.TB, s *badger.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestBadgerConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store {
		return openBadger(t, t.TempDir())
	})
}

func TestBadgerReopen(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openBadger(t, dir)
	want, err := s.CreateBinding(ctx, metatest.Binding("a\x00/", "t-1"))
	if err != nil {
		t.Fatalf("CreateBinding: %v", err)
	}
	wantMount, err := s.PutInspectionMount(ctx, meta.InspectionMount{ThreadKey: want.ThreadKey, Path: "/mnt/x", Writable: true})
	if err != nil {
		t.Fatalf("PutInspectionMount: %v", err)
	}
	closeBadger(t, s)

	s = openBadger(t, dir)
	got, err := s.GetBinding(ctx, want.ThreadKey)
	if err != nil {
		t.Fatalf("GetBinding after reopen: %v", err)
	}
	if got.ThreadKey != want.ThreadKey || got.Root != want.Root || got.Revision != want.Revision || !got.BoundAt.Equal(want.BoundAt) {
		t.Errorf("GetBinding after reopen: got %+v, want %+v", got, want)
	}
	mounts, err := s.ListInspectionMounts(ctx)
	if err != nil {
		t.Fatalf("ListInspectionMounts after reopen: %v", err)
	}
	if len(mounts) != 1 || mounts[0].Path != wantMount.Path || mounts[0].ThreadKey != wantMount.ThreadKey ||
		!mounts[0].Writable || mounts[0].Revision != wantMount.Revision {
		t.Errorf("ListInspectionMounts after reopen: got %+v, want [%+v]", mounts, wantMount)
	}
}

func TestBadgerRevisionsAfterReopen(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	var last uint64
	for cycle := range 3 {
		s := openBadger(t, dir)
		b, err := s.CreateBinding(ctx, metatest.Binding("acme", fmt.Sprintf("t-%d", cycle)))
		if err != nil {
			t.Fatalf("cycle %d CreateBinding: %v", cycle, err)
		}
		if b.Revision <= last {
			t.Errorf("cycle %d CreateBinding: got revision %d, want more than %d", cycle, b.Revision, last)
		}
		b, err = s.UpdateBinding(ctx, b)
		if err != nil {
			t.Fatalf("cycle %d UpdateBinding: %v", cycle, err)
		}
		// Delete the newest record, so the largest revision in use is
		// gone before the reopen: only the counter remembers it.
		if err := s.DeleteBinding(ctx, b.ThreadKey, b.Revision); err != nil {
			t.Fatalf("cycle %d DeleteBinding: %v", cycle, err)
		}
		last = b.Revision
		closeBadger(t, s)
	}
}

func TestBadgerSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	openBadger(t, dir)
	s, err := badger.Open(t.Context(), dir, nil)
	if err == nil {
		s.Close()
		t.Fatalf("second badger.Open of one folder: got nil error, want a refusal")
	}
}

func TestBadgerOpenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err := badger.Open(ctx, t.TempDir(), nil)
	if !errors.Is(err, context.Canceled) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("badger.Open with a canceled context: got error %v, want context.Canceled", err)
	}
}

func TestBadgerRefusesTextJSONWouldRewrite(t *testing.T) {
	ctx := t.Context()
	s := openBadger(t, t.TempDir())
	for _, tt := range []struct {
		name string
		edit func(*meta.Binding)
	}{
		{"root", func(b *meta.Binding) { b.Root = "/srv/\xff" }},
		{"mount path", func(b *meta.Binding) { b.MountPath = "/run/\xfe" }},
		{"host id", func(b *meta.Binding) { b.HostID = "h\xc0" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := metatest.Binding("acme", "t-1")
			tt.edit(&b)
			if _, err := s.CreateBinding(ctx, b); err == nil {
				t.Fatalf("CreateBinding with a %s that is not UTF-8: got nil error, want a refusal", tt.name)
			}
			if _, err := s.GetBinding(ctx, b.ThreadKey); !errors.Is(err, meta.ErrNotFound) {
				t.Errorf("GetBinding after the refusal: got error %v, want ErrNotFound", err)
			}
		})
	}
}

// killEnv names the folder in which the child of TestBadgerSurvivesKill
// writes its records before it is killed.
const killEnv = "WARREN_META_TEST_KILL_DIR"

// TestBadgerSurvivesKill writes a binding and a large history in a child
// process, kills the child with SIGKILL as soon as the writes have
// returned, and reads them back: an acknowledged write must not depend on
// Close.
func TestBadgerSurvivesKill(t *testing.T) {
	if dir := os.Getenv(killEnv); dir != "" {
		killChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBadgerSurvivesKill$")
	cmd.Env = append(os.Environ(), killEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "written\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: got %q (%v), want %q", line, err, "written\n")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	cmd.Wait() // killed: the error is expected

	s := openBadger(t, dir)
	want := metatest.Binding("acme", "t-1")
	got, err := s.GetBinding(t.Context(), want.ThreadKey)
	if err != nil {
		t.Fatalf("GetBinding after kill: %v", err)
	}
	if got.Root != want.Root {
		t.Errorf("GetBinding after kill: got root %q, want %q", got.Root, want.Root)
	}
	wantHistory := largeHistory(want.ThreadKey)
	gotHistory, err := s.GetHistory(t.Context(), want.ThreadKey)
	if err != nil {
		t.Fatalf("GetHistory after kill: %v", err)
	}
	if len(gotHistory.Checkpoints) != 1 || gotHistory.Checkpoints[0].Tree != wantHistory.Checkpoints[0].Tree {
		t.Errorf("GetHistory after kill: got %d checkpoints, want the one written", len(gotHistory.Checkpoints))
	}
}

// killChild is the child's side of TestBadgerSurvivesKill: write, report,
// and wait to be killed without ever closing the store.
func killChild(dir string) {
	s, err := badger.Open(context.Background(), dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, err := s.CreateBinding(context.Background(), metatest.Binding("acme", "t-1"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := s.PutHistory(context.Background(), largeHistory(b.ThreadKey)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("written")
	time.Sleep(time.Minute)
	os.Exit(1)
}
