package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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
// server unready until the server is back, a checkpoint that would take
// the backlog past --snapshot-cache-bytes is refused (507) and loses
// nothing, and a daemon stopped with checkpoints left to copy copies them
// at its next start.
func TestSnapshotStore(t *testing.T) {
	testenv.RequireRootFUSE(t)
	srv := testenv.S3Server(t)
	srv.UseCredentials(t)
	srv.MakeBucket(t, "warren")
	storeURL := func(prefix string) string {
		return srv.URL("warren", prefix)
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
			{name: "bucket", url: srv.URL("no-such-bucket", "p"), secret: srv.SecretKey, want: "open the snapshot store"},
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

	t.Run("CacheBound", func(t *testing.T) {
		ctx := t.Context()
		// Each checkpoint adds a file of size bytes: the bound holds
		// two of them waiting, not three.
		const size, bound = 4000, 10000
		env := startEnv(t, Config{SnapshotStore: storeURL("bound"), SnapshotCacheBytes: bound})
		br, err := env.c.Bind(ctx, "acme", "four")
		if err != nil {
			t.Fatal(err)
		}
		write := func(name string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(br.MountPath, name), bytes.Repeat([]byte(name), size/len(name)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		srv.Kill(t)
		restarted := false
		t.Cleanup(func() {
			if !restarted {
				srv.Restart(t)
			}
		})
		var kept []api.CheckpointInfo
		for _, name := range []string{"f1", "f2"} {
			write(name)
			cp, err := env.c.History().Checkpoint(ctx, "acme", "four", api.CheckpointRequest{Label: name})
			if err != nil {
				t.Fatalf("checkpoint %s within the bound: %v", name, err)
			}
			if cp.Checkpoint.OwnBytes != size || cp.Checkpoint.Replicated {
				t.Fatalf("checkpoint %s: own bytes %d, replicated %v; want %d, false", name, cp.Checkpoint.OwnBytes, cp.Checkpoint.Replicated, size)
			}
			kept = append(kept, cp.Checkpoint)
		}
		// Until an upload failed the server takes the store for slow,
		// not down (its message says so); wait for the failure.
		waitReady(t, env, func(rd api.Readiness) bool {
			return strings.HasPrefix(readyCheck(rd, "snapshot_store").Detail, "the snapshot store is unreachable")
		})

		// The third would take the backlog to 12000: refused, nothing
		// recorded, the file as written.
		write("f3")
		_, err = env.c.History().Checkpoint(ctx, "acme", "four", api.CheckpointRequest{Label: "f3"})
		wantAPIError(t, "a checkpoint past the cache bound", err, http.StatusInsufficientStorage, api.CodeNoSpace,
			"the snapshot store is unreachable: 2 checkpoints of this server (8000 bytes) wait to be copied to it, and this checkpoint's 4000 bytes would take them past the server's --snapshot-cache-bytes of 10000 (the last upload failed: ")
		wantAPIError(t, "a checkpoint past the cache bound", err, http.StatusInsufficientStorage, api.CodeNoSpace, "The checkpoint was not taken")
		var ae *api.APIError
		if errors.As(err, &ae) && !strings.HasPrefix(ae.Message, "the snapshot store is unreachable") {
			t.Errorf("refusal %q: want it to begin with the snapshot store", ae.Message)
		}
		// An undo keeps f3 in an automatic checkpoint first: refused
		// the same way, nothing restored.
		_, err = env.c.History().Undo(ctx, "acme", "four", false)
		wantAPIError(t, "an undo whose automatic checkpoint is past the cache bound", err, http.StatusInsufficientStorage, api.CodeNoSpace,
			`The automatic checkpoint "before undo" that keeps the workspace's state was not taken, so nothing was restored or changed`)
		list, err := env.c.History().Checkpoints(ctx, "acme", "four")
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Checkpoints) != 2 || list.Head != kept[1].ID {
			t.Fatalf("history after the refusals: %+v; want %s and %s, head %s", list, kept[0].ID, kept[1].ID, kept[1].ID)
		}
		if got, err := os.ReadFile(filepath.Join(br.MountPath, "f3")); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("f3"), size/2)) {
			t.Fatalf("f3 after the refusals: %d bytes, %v; want it as written", len(got), err)
		}
		rd, err := env.c.Ready(ctx)
		if c := readyCheck(rd, "snapshot_store"); err != nil || c.OK || !strings.Contains(c.Detail, "2 checkpoints (8000 bytes of the --snapshot-cache-bytes bound of 10000)") {
			t.Errorf("readyz with the backlog full: %+v, %v", c, err)
		}

		// Once the store is back the backlog drains, and the next
		// checkpoint takes f3: its change was given back, not lost.
		srv.Restart(t)
		restarted = true
		waitReady(t, env, func(rd api.Readiness) bool {
			c := readyCheck(rd, "snapshot_store")
			return c.OK && strings.HasPrefix(c.Detail, "0 checkpoints (0 bytes")
		})
		cp, err := env.c.History().Checkpoint(ctx, "acme", "four", api.CheckpointRequest{Label: "f3"})
		if err != nil {
			t.Fatalf("checkpoint once the backlog drained: %v", err)
		}
		d, err := env.c.History().Diff(ctx, "acme", "four", kept[1].ID, cp.Checkpoint.ID, false)
		if err != nil || !slices.Equal(d.Added, []string{"f3"}) || len(d.Removed)+len(d.Modified) != 0 {
			t.Fatalf("diff of the checkpoint taken after the refusals: %+v, %v; want f3 added", d, err)
		}
		waitReplicated(t, env, "four", cp.Checkpoint.ID, true)
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
