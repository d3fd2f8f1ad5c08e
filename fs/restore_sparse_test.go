package fs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
	"warren/snapshot"
)

// TestRestoreSparse restores a checkpoint holding a 20 GiB file with 1 MiB
// of data through the Restorer, as the daemon's undo does: in under a
// second, to its size, its data and about its on-disk size. An extent
// that fails its hash fails the write and replaces nothing.
func TestRestoreSparse(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	const size = 20 << 30
	data := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	p := filepath.Join(src, "disk.img")
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt(data, 7<<30)
	must(t, err)
	must(t, f.Close())
	var st syscall.Stat_t
	must(t, syscall.Stat(p, &st))
	if st.Blocks*512 > 2<<20 {
		testenv.CannotRun(t, "%s keeps no holes: a 20 GiB file with 1 MiB of data takes %d bytes", src, st.Blocks*512)
	}

	repo, err := snapshot.Open(filepath.Join(t.TempDir(), "repo"))
	must(t, err)
	defer repo.Close()
	root, err := os.Open(src)
	must(t, err)
	defer root.Close()
	h, _, err := repo.Build(ctx, int(root.Fd()), snapshot.Hash{}, nil, true)
	must(t, err)
	deltas, err := repo.Diff(ctx, snapshot.Hash{}, h)
	must(t, err)

	_, files, dir := newFiles(t, HubConfig{})
	r := files.Restorer()
	start := time.Now()
	if _, err := repo.Apply(ctx, deltas, r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	must(t, r.Sync())
	if took := time.Since(start); took > time.Second {
		t.Errorf("the restore took %v, want under a second", took)
	}
	q := filepath.Join(dir, "disk.img")
	must(t, syscall.Stat(q, &st))
	if st.Size != size || st.Blocks*512 < 1<<20 || st.Blocks*512 > 1<<20+256<<10 {
		t.Errorf("restored: %d bytes, %d on disk; want %d, about 1 MiB", st.Size, st.Blocks*512, int64(size))
	}
	got := make([]byte, len(data)+2)
	g, err := os.Open(q)
	must(t, err)
	_, err = g.ReadAt(got, 7<<30-1)
	g.Close()
	must(t, err)
	if got[0] != 0 || got[len(got)-1] != 0 || !bytes.Equal(got[1:len(got)-1], data) {
		t.Errorf("the restored data differ")
	}

	// The extent spoiled: the write fails, naming it, and the file in
	// place stays.
	must(t, os.Remove(q))
	must(t, os.WriteFile(q, []byte("what was there"), 0o644))
	ext := snapshot.Hash(sha256.Sum256(data))
	obj := filepath.Join(repo.Dir(), "objects", ext.String()[:2], ext.String()[2:])
	waitFor(t, "the extent spread loose", func() bool { _, err := os.Stat(obj); return err == nil })
	good, err := os.ReadFile(obj)
	must(t, err)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	must(t, os.WriteFile(obj, bad, 0o600))
	_, err = repo.Apply(ctx, []snapshot.Delta{{Path: "disk.img", Op: snapshot.Modified, Old: snapshot.Entry{Name: "disk.img", Kind: snapshot.KindFile}, New: deltas[0].New}}, r)
	if !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("Apply of a corrupt extent: %v, want ErrCorrupt", err)
	}
	if b, _ := os.ReadFile(q); string(b) != "what was there" {
		t.Errorf("a corrupt extent replaced the file (%d bytes)", len(b))
	}
}
