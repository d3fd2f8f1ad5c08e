package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestIOModesMix opens one file in every order of readers and writers. The
// kernel refuses (EIO) an open whose mode differs from the inode's other
// opens, and a cached reader must never see pages older than a write made
// around them. A file made through the mount starts passed through; one
// found in the backing folder and first opened to be read starts cached
// (iomode.go).
func TestIOModesMix(t *testing.T) {
	for _, made := range []bool{true, false} {
		name := "found"
		if made {
			name = "made"
		}
		t.Run(name, func(t *testing.T) { testIOModesMix(t, made) })
	}
}

func testIOModesMix(t *testing.T, made bool) {
	backing, mnt := mountTemp(t, Options{})
	p := filepath.Join(mnt, "f")
	if made {
		must(t, os.WriteFile(p, []byte("one"), 0o644))
	} else {
		must(t, os.WriteFile(filepath.Join(backing, "f"), []byte("one"), 0o644))
	}

	// A reader first, then a writer while it is open.
	r, err := os.Open(p)
	must(t, err)
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("write-open while a reader is open: %v", err)
	}
	_, err = w.Write([]byte("two"))
	must(t, err)
	must(t, w.Close())
	buf := make([]byte, 16)
	n, _ := r.ReadAt(buf, 0)
	if string(buf[:n]) != "two" {
		t.Errorf("open reader reads %q after a write, want two", buf[:n])
	}
	must(t, r.Close())

	// A writer first, then a reader while it is open.
	w, err = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	r, err = os.Open(p)
	if err != nil {
		t.Fatalf("read-open while a writer is open: %v", err)
	}
	_, err = w.Write([]byte("three"))
	must(t, err)
	must(t, w.Close())
	n, _ = r.ReadAt(buf, 0)
	if string(buf[:n]) != "three" {
		t.Errorf("open reader reads %q, want three", buf[:n])
	}
	must(t, r.Close())

	// Reads, a write with no reader open, then a read again: pages the
	// kernel kept must not hide the write.
	for i := 0; i < 3; i++ {
		if got, _ := os.ReadFile(p); string(got) != "three" {
			t.Fatalf("read %d: %q", i, got)
		}
	}
	big := bytes.Repeat([]byte("4"), 100)
	must(t, os.WriteFile(p, big, 0o644))
	if got, _ := os.ReadFile(p); !bytes.Equal(got, big) {
		t.Errorf("read after a write: %q, want 100 fours", got)
	}
}
