package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/meta"
)

// TestReadLookingCallsBindNothing: undo, redo, revert, diff, fork (of its
// source), the checkpoint list, the job list, a job, its output (logs)
// and usage on a thread that does not exist answer not found, saying there
// is no such thread, and make nothing: no record, no folder, no mount (a
// typo in an id made an empty workspace). The event stream of such a
// thread makes nothing either (it may be opened before the thread's bind,
// to see it), nor does closing a port's channel. A closed thread exists:
// undo and its job list work on it. A checkpoint binds lazily, as exec
// does.
func TestReadLookingCallsBindNothing(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	ghost := "tpyo"
	calls := map[string]func() error{
		"undo":   func() error { _, err := c.History().Undo(ctx, "acme", ghost, false); return err },
		"redo":   func() error { _, err := c.History().Redo(ctx, "acme", ghost, false); return err },
		"revert": func() error { _, err := c.History().Revert(ctx, "acme", ghost, "cp-1", false); return err },
		"diff":   func() error { _, err := c.History().Diff(ctx, "acme", ghost, "", "", false); return err },
		"fork": func() error {
			_, err := c.History().Fork(ctx, "acme", ghost, api.ForkRequest{Thread: "child"})
			return err
		},
		"checkpoints": func() error { _, err := c.History().Checkpoints(ctx, "acme", ghost); return err },
		"jobs":        func() error { _, err := c.Jobs(ctx, "acme", ghost); return err },
		"job":         func() error { _, err := c.Job(ctx, "acme", ghost, "bash-1"); return err },
		"logs": func() error {
			return c.JobOutputStream(ctx, "acme", ghost, "bash-1", "stdout", 0, false, func(api.JobFrame) error { return nil })
		},
		"usage": func() error { _, err := c.Usage(ctx, "acme", ghost); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "There is no thread") {
			t.Errorf("%s of a thread that does not exist: %v, want not found saying there is no such thread", name, err)
		}
	}
	ectx, ecancel := context.WithCancel(ctx)
	events := make(chan error, 1)
	go func() { events <- c.Events(ectx, "acme", ghost, func(api.Event) error { return nil }) }()
	waitSubscribers(t, env.g, 1)
	ecancel()
	if err := <-events; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("events of a thread that does not exist: %v", err)
	}
	// Closing a port's channel makes nothing either: none was open.
	if got, err := c.ClosePort(ctx, "acme", ghost, 3000); err != nil || got.Closed {
		t.Errorf("closing a port of a thread that does not exist: %+v, %v; want closed false", got, err)
	}
	for _, th := range []string{ghost, "child"} {
		if _, err := env.g.store.GetBinding(ctx, meta.ThreadKey{Tenant: "acme", Thread: th}); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("thread %s has a record after the calls: %v", th, err)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(env.cfg.DataDir, "workspaces", "acme")); err == nil && len(ents) > 0 {
		t.Errorf("workspaces made: %v", ents)
	}
	if err := calls["undo"](); err == nil || !strings.Contains(err.Error(), "There is no thread") {
		t.Errorf("undo's refusal: %v, want it to say there is no such thread", err)
	}

	// A closed thread exists: its history works.
	if _, err := c.History().Checkpoint(ctx, "acme", "real", api.CheckpointRequest{Label: "first"}); err != nil {
		t.Fatalf("a checkpoint binds lazily: %v", err)
	}
	if _, err := c.Files().Write(ctx, "acme", "real", api.WriteFileRequest{Path: "f.txt", Content: "later"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseThread(ctx, "acme", "real"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.History().Undo(ctx, "acme", "real", false); err != nil {
		t.Errorf("undo of a closed thread: %v", err)
	}
	if jobs, err := c.Jobs(ctx, "acme", "real"); err != nil || len(jobs) != 0 {
		t.Errorf("the job list of a closed thread without jobs: %v, %v; want an empty list", jobs, err)
	}
}
