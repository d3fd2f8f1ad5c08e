package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/testenv"
	"warren/snapshot/replica"
)

// TestSnapshotStore runs daemons that copy their checkpoints to a real
// S3 server (testenv.S3Server, one for the subtests: it takes seconds to
// start): a checkpoint is acknowledged at once and becomes replicated,
// one taken while the server is down stays unreplicated and makes the
// server unready until the server is back, and a daemon stopped with
// checkpoints left to copy copies them at its next start.
func TestSnapshotStore(t *testing.T) {
	testenv.RequireRootFUSE(t)
	srv := testenv.S3Server(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	srv.MakeBucket(t, "warren")
	storeURL := func(prefix string) string {
		return fmt.Sprintf("s3://warren/%s?endpoint=%s&region=%s&insecure=1", prefix, srv.Host, srv.Region)
	}

	t.Run("Replicated", func(t *testing.T) {
		ctx := t.Context()
		env := startEnv(t, Config{SnapshotStore: storeURL("replicated")})
		cp := checkpointFile(t, env, "one", "hello")
		if cp.Checkpoint.Replicated {
			t.Errorf("checkpoint acknowledged replicated: want it copied after the answer")
		}
		waitReplicated(t, env, "one", cp.Checkpoint.ID, true)
		manifestThere(t, storeURL("replicated"), cp.Checkpoint.Tree)
		list, err := env.c.History().Checkpoints(ctx, "acme", "one")
		if err != nil || !list.Replicating {
			t.Errorf("checkpoint list: replicating %v, %v; want true", list.Replicating, err)
		}
		rd, err := env.c.Ready(ctx)
		if err != nil || !readyCheck(rd, "snapshot_store").OK {
			t.Errorf("readyz with the store up: %+v, %v", rd, err)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		ctx := t.Context()
		env := startEnv(t, Config{SnapshotStore: storeURL("unreachable")})
		srv.Kill(t)
		restarted := false
		t.Cleanup(func() {
			if !restarted {
				srv.Restart(t)
			}
		})
		cp := checkpointFile(t, env, "two", "while down")
		waitReady(t, env, func(rd api.Readiness) bool {
			c := readyCheck(rd, "snapshot_store")
			return !c.OK && strings.Contains(c.Detail, "the snapshot store is unreachable")
		})
		list, err := env.c.History().Checkpoints(ctx, "acme", "two")
		if err != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].Replicated {
			t.Fatalf("checkpoints while the store is down: %+v, %v; want one, not replicated", list, err)
		}
		srv.Restart(t)
		restarted = true
		waitReplicated(t, env, "two", cp.Checkpoint.ID, true)
		manifestThere(t, storeURL("unreachable"), cp.Checkpoint.Tree)
		waitReady(t, env, func(rd api.Readiness) bool { return readyCheck(rd, "snapshot_store").OK })
	})

	t.Run("Refused", func(t *testing.T) {
		// A daemon told to replicate does not start without its store:
		// wrong credentials, a missing bucket, and restore without any
		// store are each a clear error at start.
		for _, c := range []struct {
			name, url, secret, want string
			onUnreachable           string
		}{
			{name: "credentials", url: storeURL("refused"), secret: "not-the-secret", want: "open the snapshot store"},
			{name: "bucket", url: fmt.Sprintf("s3://no-such-bucket/p?endpoint=%s&region=%s&insecure=1", srv.Host, srv.Region), secret: srv.SecretKey, want: "open the snapshot store"},
			{name: "restore without a store", onUnreachable: UnreachableRestore, secret: srv.SecretKey, want: "on-unreachable restore needs a snapshot store"},
		} {
			t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			g, err := Start(ctx, Config{SnapshotStore: c.url, OnUnreachable: c.onUnreachable, DataDir: filepath.Join(t.TempDir(), "data"), Store: newStore(t)})
			cancel()
			if err == nil {
				g.Close()
				t.Errorf("%s: the daemon started", c.name)
			} else if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v; want an error saying %q", c.name, err, c.want)
			}
		}
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	})

	t.Run("FinishedAtNextStart", func(t *testing.T) {
		cfg := Config{SnapshotStore: storeURL("restart"), DataDir: filepath.Join(t.TempDir(), "data"), Store: newStore(t)}
		env := startEnv(t, cfg)
		srv.Kill(t)
		cp := checkpointFile(t, env, "three", "before the stop")
		if err := env.g.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		srv.Restart(t)
		again := startEnv(t, cfg)
		waitReplicated(t, again, "three", cp.Checkpoint.ID, true)
		manifestThere(t, storeURL("restart"), cp.Checkpoint.Tree)
	})
}

// checkpointFile binds acme's thread, writes a file in it and takes a
// checkpoint.
func checkpointFile(t *testing.T, env *testEnv, thread, content string) api.CheckpointResponse {
	t.Helper()
	ctx := t.Context()
	br, err := env.c.Bind(ctx, "acme", thread)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(br.MountPath, "file"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := env.c.History().Checkpoint(ctx, "acme", thread, api.CheckpointRequest{Label: content})
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return cp
}

// waitReplicated polls the checkpoint list until checkpoint id of acme's
// thread says replicated as want, for at most two minutes (the retries
// back off to a minute).
func waitReplicated(t *testing.T, env *testEnv, thread, id string, want bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := env.c.History().Checkpoints(t.Context(), "acme", thread)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list.Checkpoints {
			if c.ID == id && c.Replicated == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %s of %s: not replicated=%v within two minutes: %+v", id, thread, want, list)
		}
		time.Sleep(50 * time.Millisecond) // a poll's period, not a wait for a state
	}
}

// waitReady polls /readyz until ok says yes, for at most two minutes.
func waitReady(t *testing.T, env *testEnv, ok func(api.Readiness) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rd, err := env.c.Ready(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ok(rd) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz not as wanted within two minutes: %+v", rd)
		}
		time.Sleep(50 * time.Millisecond) // a poll's period, not a wait for a state
	}
}

func readyCheck(rd api.Readiness, name string) api.ReadyCheck {
	for _, c := range rd.Checks {
		if c.Name == name {
			return c
		}
	}
	return api.ReadyCheck{Name: name, Detail: "no such check"}
}

// manifestThere fails the test unless the store holds tree's manifest.
func manifestThere(t *testing.T, url, tree string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := replica.NewS3(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "trees/"+tree); err != nil {
		if errors.Is(err, replica.ErrNotFound) {
			t.Fatalf("the store lacks the manifest of tree %s", tree)
		}
		t.Fatal(err)
	}
}
