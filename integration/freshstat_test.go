package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectionSeesOpenWriter writes a file through a thread's mount and
// keeps it open, as an editor or a long build does, and looks at it
// through an inspection mount, read-only and writable: the size and the
// content show at once (docs/api.md), without waiting for the writer to
// close or for a cache to expire. And the other way: a writer through a
// writable inspection mount shows at once in the thread's mount. Each
// stat comes right after another, so no cache may serve it.
func TestInspectionSeesOpenWriter(t *testing.T) {
	d := newDaemon(t)
	mnt := d.bind("default", "t")
	ro, rw := t.TempDir(), t.TempDir()
	d.mustWarren("mount", "--thread", "t", ro)
	d.mustWarren("mount", "--thread", "t", "--rw", rw)
	t.Cleanup(func() {
		d.warren("umount", ro)
		d.warren("umount", rw)
	})

	for _, c := range []struct{ name, writeIn, lookIn string }{
		{"thread mount to read-only inspection", mnt, ro},
		{"thread mount to writable inspection", mnt, rw},
		{"writable inspection to thread mount", rw, mnt},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, " ", "-")
			must(t, os.WriteFile(filepath.Join(c.writeIn, name), []byte("a"), 0o644))
			// The viewer has the file's attributes and pages cached.
			look := filepath.Join(c.lookIn, name)
			if got := readAll(t, look); got != "a" {
				t.Fatalf("before: content %q, want %q", got, "a")
			}
			f, err := os.OpenFile(filepath.Join(c.writeIn, name), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			defer f.Close()
			want := "a"
			for i, chunk := range []string{strings.Repeat("b", 1000), strings.Repeat("c", 70_000), "d"} {
				// A stat right before the write: the viewer's kernel has
				// the size from before it, fresh.
				if fi, err := os.Stat(look); err != nil || fi.Size() != int64(len(want)) {
					t.Fatalf("write %d: before it, stat through %s: %v, %v", i, c.lookIn, fi, err)
				}
				if _, err := f.WriteString(chunk); err != nil {
					t.Fatal(err)
				}
				want += chunk
				fi, err := os.Stat(look)
				must(t, err)
				if fi.Size() != int64(len(want)) {
					t.Errorf("write %d, file kept open: size %d through %s, want %d", i, fi.Size(), c.lookIn, len(want))
				}
				if got := readAll(t, look); got != want {
					t.Errorf("write %d, file kept open: content of %d bytes through %s, want %d", i, len(got), c.lookIn, len(want))
				}
			}
		})
	}
}

func readAll(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(bytes.Clone(b))
}
