package integration

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/internal/testenv"
)

// TestCheckpointSparse: a 20 GiB file with 1 MiB of data, made through
// the mount, is checkpointed and restored by a real daemon in under a
// second each, to its size, its data and about its on-disk size (before
// extent maps, the checkpoint read all 20 GiB, over a minute of CPU, and
// the restore wrote them).
func TestCheckpointSparse(t *testing.T) {
	d := newDaemon(t)
	mp := d.bind("acme", "images")
	const size = 20 << 30
	data := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{30}).Read(data)
	p := filepath.Join(mp, "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[:512<<10], 5<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[512<<10:], size-512<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 2<<20 {
		testenv.CannotRun(t, "the workspaces' filesystem keeps no holes: a 20 GiB file with 1 MiB of data takes %d bytes", st.Blocks*512)
	}

	c := d.client()
	ctx := context.Background()
	start := time.Now()
	cp, err := c.History().Checkpoint(ctx, "acme", "images", api.CheckpointRequest{Label: "the image"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the checkpoint took %v, want under a second", took)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := c.History().Revert(ctx, "acme", "images", cp.Checkpoint.ID, false); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the restore took %v, want under a second", took)
	}
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size || st.Blocks*512 < 1<<20 || st.Blocks*512 > 1<<20+256<<10 {
		t.Errorf("restored: %d bytes on %d of disk; want %d on about 1 MiB", st.Size, st.Blocks*512, int64(size))
	}
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, at := range []struct {
		off  int64
		want []byte
	}{{5<<30 - 1, append([]byte{0}, data[:512<<10]...)}, {size - 512<<10, data[512<<10:]}, {1 << 30, make([]byte, 4096)}} {
		got := make([]byte, len(at.want))
		if _, err := g.ReadAt(got, at.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, at.want) {
			t.Errorf("the restored file differs at %d", at.off)
		}
	}
}
