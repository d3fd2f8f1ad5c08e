package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/meta"
)

// TestPutBackFinishedAtStart: a restore that failed and whose putting
// back a crash cut short (its journal says Failed) is put back at the next
// start, to the tree it began from, not run on to its checkpoint; the
// journal is closed with the reason and the history works on. Before
// failed restores were put back, the start ran the journal forward: a.txt
// held "old", c.txt was gone and the head was cp-1.
func TestPutBackFinishedAtStart(t *testing.T) {
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env1 := startEnv(t, Config{DataDir: dataDir, Store: store})
	c := env1.c
	write := func(c *client.Client, path, content string) {
		t.Helper()
		if _, err := c.Files().Write(ctx, "acme", "t", api.WriteFileRequest{Path: path, Content: content}); err != nil {
			t.Fatal(err)
		}
	}
	br, err := c.Bind(ctx, "acme", "t")
	if err != nil {
		t.Fatal(err)
	}
	write(c, "a.txt", "old")
	cp1, err := c.History().Checkpoint(ctx, "acme", "t", api.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	write(c, "a.txt", "new")
	write(c, "c.txt", "only in cp-2")
	cp2, err := c.History().Checkpoint(ctx, "acme", "t", api.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The undo to cp-1 wrote a.txt, then failed; putting back began and
	// the crash came before a.txt was put back.
	write(c, "a.txt", "old")
	if err := env1.g.Close(); err != nil {
		t.Fatal(err)
	}
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	h, err := store.GetHistory(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	const reason = "write big.bin: disk quota exceeded"
	h.Restoring = &meta.Restore{Op: "undo", To: cp1.Checkpoint.ID, Tree: cp1.Checkpoint.Tree, Head: cp1.Checkpoint.ID,
		Redo: []string{cp2.Checkpoint.ID}, StartedAt: time.Now().UTC(), From: cp2.Checkpoint.Tree, Failed: reason}
	if _, err := store.PutHistory(ctx, h); err != nil {
		t.Fatal(err)
	}

	env2 := startEnv(t, Config{DataDir: dataDir, Store: store})
	for path, want := range map[string]string{"a.txt": "new", "c.txt": "only in cp-2"} {
		got, err := os.ReadFile(filepath.Join(br.MountPath, path))
		if err != nil || string(got) != want {
			t.Errorf("%s after the start: %q, %v; want %q (put back)", path, got, err, want)
		}
	}
	h, err = store.GetHistory(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if h.Restoring != nil || h.FailedRestore == nil || !strings.Contains(h.FailedRestore.Failed, reason) || h.FailedRestore.EndedAt.IsZero() ||
		h.Head != cp2.Checkpoint.ID || len(h.Redo) != 0 {
		t.Fatalf("history after the start: restoring %+v, failed %+v, head %s, redo %v; want the journal closed with %q, the head at cp-2",
			h.Restoring, h.FailedRestore, h.Head, h.Redo, reason)
	}
	if !strings.Contains(env2.logBuf.String(), "restore failed; putting the workspace back") {
		t.Errorf("the start did not say it put a failed restore back")
	}
	write(env2.c, "d.txt", "later")
	cp3, err := env2.c.History().Checkpoint(ctx, "acme", "t", api.CheckpointRequest{})
	if err != nil || cp3.Checkpoint.ID != "cp-3" {
		t.Fatalf("checkpoint after the put-back: %+v %v", cp3, err)
	}
	if u, err := env2.c.History().Undo(ctx, "acme", "t", false); err != nil || u.To != cp2.Checkpoint.ID {
		t.Fatalf("undo after the put-back: %+v %v", u, err)
	}
}
