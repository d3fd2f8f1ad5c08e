package image

import (
	"archive/tar"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/internal/imagetest"
)

func TestStoreFull(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	// 1 MiB of zeros: a few KiB compressed, past the bound unpacked.
	img := simpleImage(t, imagetest.File{Path: "zeros", Type: tar.TypeReg, Size: 1 << 20, Mode: 0o644})
	reg.Push(t, "big:1", img)
	m, _ := img.Manifest()
	sb := newSandbox(t)

	t.Run("estimate", func(t *testing.T) {
		s := openStore(t, sb, reg, func(c *Config) { c.StoreBytes = 100 })
		_, err := s.Pull(ctxT(t), reg.Ref("big:1"), nil)
		if !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "compressed") {
			t.Errorf("Pull = %v, want ErrStoreFull from the compressed sizes", err)
		}
		if n := reg.BlobGetsByDigest()[m.Layers[0].Digest.String()]; n != 0 {
			t.Errorf("the layer was fetched %d times, want none", n)
		}
		checkEmpty(t, s)
		s.Close()
	})
	t.Run("unpacking", func(t *testing.T) {
		s := openStore(t, sb, reg, func(c *Config) { c.StoreBytes = 256 << 10 })
		_, err := s.Pull(ctxT(t), reg.Ref("big:1"), nil)
		if !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "being unpacked") || !strings.Contains(err.Error(), `entry "zeros"`) {
			t.Errorf("Pull = %v, want ErrStoreFull while unpacking zeros", err)
		}
		checkEmpty(t, s)
		s.Close()
	})
	t.Run("room", func(t *testing.T) {
		s := openStore(t, sb, reg, func(c *Config) { c.StoreBytes = 2 << 20 })
		got, err := s.Pull(ctxT(t), reg.Ref("big:1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Bytes < 1<<20 || s.Bytes() != got.Bytes {
			t.Errorf("Bytes = %d, store's %d, want past 1 MiB", got.Bytes, s.Bytes())
		}
		// A second image does not fit beside the first.
		reg.Push(t, "big2:1", simpleImage(t, imagetest.File{Path: "more", Type: tar.TypeReg, Size: 1 << 20, Mode: 0o644}))
		if _, err := s.Pull(ctxT(t), reg.Ref("big2:1"), nil); !errors.Is(err, ErrStoreFull) {
			t.Errorf("second Pull = %v, want ErrStoreFull", err)
		}
		if l := s.List(); len(l) != 1 || len(dirNames(t, s.tmp)) != 0 {
			t.Errorf("List() = %v, tmp %v: want the first image alone", l, dirNames(t, s.tmp))
		}
	})
	sb.checkCanary(t)
}

func TestRemoveAndCollect(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	_, a := reg.Push(t, "a:1", simpleImage(t, file("a", "a")))
	reg.Push(t, "a:latest", simpleImage(t, file("a", "a")))
	_, b := reg.Push(t, "b:1", simpleImage(t, file("b", "b")))
	_, c := reg.Push(t, "c:1", simpleImage(t, file("c", "c")))
	s := openStore(t, nil, reg, nil)
	ctx := ctxT(t)
	for _, r := range []string{"a:1", "a:latest", "b:1", "c:1"} {
		if _, err := s.Pull(ctx, reg.Ref(r), nil); err != nil {
			t.Fatal(err)
		}
	}
	if l := s.List(); len(l) != 3 || l[0].Digest != a || len(l[0].Refs) != 2 {
		t.Fatalf("List() = %+v, want a (two refs), b, c", l)
	}
	rootA, _ := s.Lookup(a)

	// One of a's two references: the tree stays.
	if err := s.Remove(ctx, reg.Ref("a:latest")); err != nil {
		t.Fatal(err)
	}
	if img, ok := s.Lookup(a); !ok || len(img.Refs) != 1 || img.Ref != reg.Ref("a:1") {
		t.Errorf("after removing a:latest, Lookup(a) = %+v, %v", img, ok)
	}
	if _, ok := s.Lookup(reg.Ref("a:latest")); ok {
		t.Error("a:latest still found")
	}
	// The last: the tree goes.
	if err := s.Remove(ctx, reg.Ref("a:1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(a); ok {
		t.Error("a found after its last reference went")
	}
	if _, err := os.Stat(rootA.Root); !os.IsNotExist(err) {
		t.Errorf("a's tree: %v, want gone", err)
	}
	if err := s.Remove(ctx, a); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove of a removed image = %v, want ErrNotFound", err)
	}

	// Collect: b is in use, c not; nothing is older than an hour ago.
	if got, err := s.Collect(ctx, time.Now().Add(-time.Hour), func(string) bool { return false }); err != nil || len(got) != 0 {
		t.Errorf("Collect(an hour ago) = %v, %v, want nothing", got, err)
	}
	s.Touch(b)
	got, err := s.Collect(ctx, time.Now().Add(time.Hour), func(d string) bool { return d == b })
	if err != nil || len(got) != 1 || got[0].Digest != c {
		t.Errorf("Collect = %+v, %v, want c alone", got, err)
	}
	if l := s.List(); len(l) != 1 || l[0].Digest != b || l[0].UsedAt.IsZero() {
		t.Errorf("List() = %+v, want b, used", l)
	}
	if want := s.List()[0].Bytes; s.Bytes() != want {
		t.Errorf("Bytes() = %d, want %d", s.Bytes(), want)
	}
	// By digest: every reference and the tree.
	if err := s.Remove(ctx, b); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, s)
}

// TestTagMoves: a tag pulled again after it moved names the new image; the
// old one stays, without reference, until collected.
func TestTagMoves(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	_, old := reg.Push(t, "app:1", simpleImage(t, file("v", "1")))
	s := openStore(t, nil, reg, nil)
	if _, err := s.Pull(ctxT(t), reg.Ref("app:1"), nil); err != nil {
		t.Fatal(err)
	}
	_, now := reg.Push(t, "app:1", simpleImage(t, file("v", "2")))
	got, err := s.Pull(ctxT(t), reg.Ref("app:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != now || readFile(t, filepath.Join(got.Root, "v")) != "2" {
		t.Errorf("Pull after the tag moved = %s, want %s", got.Digest, now)
	}
	o, ok := s.Lookup(old)
	if !ok || o.Ref != "" || len(o.Refs) != 0 {
		t.Errorf("the old image = %+v, %v: want kept, without reference", o, ok)
	}
	// After a reopen, the same.
	dir := s.dir
	s.Close()
	s2 := openStore(t, &sandbox{dir: dir}, reg, nil)
	if img, _ := s2.Lookup(reg.Ref("app:1")); img.Digest != now {
		t.Errorf("after a reopen app:1 is %s, want %s", img.Digest, now)
	}
	if got, err := s2.Collect(ctxT(t), time.Now().Add(time.Hour), func(d string) bool { return d == now }); err != nil || len(got) != 1 || got[0].Digest != old {
		t.Errorf("Collect = %v, %v, want the old image", got, err)
	}
}

func TestOpenCleansUp(t *testing.T) {
	testenvRoot(t)
	sb := newSandbox(t)
	s := openStore(t, sb, nil, nil)
	s.Close()
	// What a kill leaves: work in tmp, a tree without record, a record
	// without tree.
	hexA := strings.Repeat("a", 64)
	hexB := strings.Repeat("b", 64)
	must(t, os.MkdirAll(filepath.Join(s.tmp, "work-1", "rootfs", "usr"), 0o755))
	must(t, os.MkdirAll(filepath.Join(s.roots, hexA, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(s.roots, hexB+".json"), []byte(`{"version":1,"digest":"sha256:`+hexB+`","refs":{}}`), 0o600))
	// And what a damaged disk leaves: a record that does not parse, with
	// its tree.
	hexC := strings.Repeat("c", 64)
	must(t, os.MkdirAll(filepath.Join(s.roots, hexC, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(s.roots, hexC+".json"), []byte(`{"version":1,"dig`), 0o600))
	s2, err := Open(context.Background(), Config{Dir: sb.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	checkEmpty(t, s2)
	if left, _ := os.ReadDir(s.roots); len(left) != 0 {
		t.Errorf("the roots folder after Open holds %d entries, want none", len(left))
	}
	// One process a store.
	if _, err := Open(context.Background(), Config{Dir: sb.dir}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("a second Open = %v, want refused", err)
	}
	if fi, err := os.Stat(sb.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store's folder: %v, %v, want 0700", fi.Mode(), err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestTouch(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	_, d := reg.Push(t, "t:1", simpleImage(t, file("f", "x")))
	s := openStore(t, nil, reg, nil)
	if _, err := s.Pull(ctxT(t), reg.Ref("t:1"), nil); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(s.roots, strings.TrimPrefix(d, "sha256:")+".json")
	s.Touch(d)
	first := readFile(t, rec)
	if !strings.Contains(first, `"usedAt"`) {
		t.Fatalf("the first use is not in the record:\n%s", first)
	}
	// Within the minute: in memory, not written again.
	s.Touch(d)
	if readFile(t, rec) != first {
		t.Error("a second Touch within the minute wrote the record")
	}
	img, _ := s.Lookup(d)
	dir := s.dir
	s.Close()
	s2 := openStore(t, &sandbox{dir: dir}, reg, nil)
	again, _ := s2.Lookup(d)
	if again.UsedAt.IsZero() || again.UsedAt.After(img.UsedAt) {
		t.Errorf("after a reopen UsedAt = %v, in memory it was %v", again.UsedAt, img.UsedAt)
	}
	s2.Touch("sha256:nothing") // no such image: nothing happens
}

// TestPullEnds: a pull whose caller gives up, or whose store closes,
// ends, and its work goes.
func TestPullEnds(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := simpleImage(t, file("f", strings.Repeat("x", 100000)))
	reg.Push(t, "slow:1", img)
	m, _ := img.Manifest()
	layer := m.Layers[0].Digest.String()
	halfway := make(chan struct{}, 1)
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if d, ok := imagetest.BlobDigest(r); !ok || d != layer || r.Method != http.MethodGet {
			return false
		}
		w.Header().Set("Content-Length", strconv.FormatInt(m.Layers[0].Size, 10))
		w.Write(make([]byte, m.Layers[0].Size/2))
		w.(http.Flusher).Flush()
		halfway <- struct{}{}
		<-r.Context().Done()
		return true
	})
	sb := newSandbox(t)

	t.Run("caller-gone", func(t *testing.T) {
		s := openStore(t, sb, reg, nil)
		ctx, cancel := context.WithCancel(ctxT(t))
		done := make(chan error, 1)
		go func() {
			_, err := s.Pull(ctx, reg.Ref("slow:1"), nil)
			done <- err
		}()
		<-halfway
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Pull = %v, want context.Canceled", err)
		}
		s.Close() // waits for the work, which its cancel ended
		checkEmpty(t, s)
	})
	t.Run("store-closed", func(t *testing.T) {
		s := openStore(t, sb, reg, nil)
		done := make(chan error, 1)
		go func() {
			_, err := s.Pull(ctxT(t), reg.Ref("slow:1"), nil)
			done <- err
		}()
		<-halfway
		s.Close()
		if err := <-done; err == nil {
			t.Error("Pull ended without error by Close")
		}
		checkEmpty(t, s)
		if _, err := s.Pull(ctxT(t), reg.Ref("slow:1"), nil); err == nil {
			t.Error("Pull after Close succeeded")
		}
	})
	sb.checkCanary(t)
}
