package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHostileSwaps changes an entry between the builder's lstat of it and
// its open, through the build's hook, and checks what the tree holds.
func TestHostileSwaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // makes "x"
		swap  func(t *testing.T, dir string) // changes "x" once, after its lstat
		want  string                         // describe's line for "x"; "" for left out
	}{
		{
			name:  "symlink becomes a folder",
			setup: func(t *testing.T, dir string) { os.Symlink("/etc", filepath.Join(dir, "x")) },
			swap: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "x"))
				os.Mkdir(filepath.Join(dir, "x"), 0o750)
			},
			want: "dir 0750",
		},
		{
			name:  "folder becomes a symlink to /",
			setup: func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "x"), 0o755) },
			swap: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "x"))
				os.Symlink("/", filepath.Join(dir, "x"))
			},
			want: `link -> "/"`,
		},
		{
			name:  "file becomes a symlink to /etc/passwd",
			setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "x"), "mine", 0o644) },
			swap: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "x"))
				os.Symlink("/etc/passwd", filepath.Join(dir, "x"))
			},
			want: `link -> "/etc/passwd"`,
		},
		{
			name:  "file becomes a fifo",
			setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "x"), "mine", 0o644) },
			swap: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "x"))
				unix.Mkfifo(filepath.Join(dir, "x"), 0o644)
			},
			want: "",
		},
		{
			name:  "file deleted",
			setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "x"), "mine", 0o644) },
			swap:  func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "x")) },
			want:  "",
		},
		{
			name:  "folder deleted",
			setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "x/y"), "mine", 0o644) },
			swap:  func(t *testing.T, dir string) { os.RemoveAll(filepath.Join(dir, "x")) },
			want:  "",
		},
	} {
		for _, incremental := range []bool{false, true} {
			name := tc.name
			if incremental {
				name += "/incremental"
			}
			t.Run(name, func(t *testing.T) {
				r := openRepo(t)
				dir := t.TempDir()
				write(t, filepath.Join(dir, "keep"), "kept", 0o644)
				base, _ := build(t, r, dir, Hash{}, nil, true)
				tc.setup(t, dir)
				swapped := false
				r.hook = func(step, path string) {
					if step == "examine" && path == "x" && !swapped {
						swapped = true
						tc.swap(t, dir)
					}
				}
				var h Hash
				if incremental {
					h, _ = build(t, r, dir, base, []Change{{Path: "x"}}, false)
				} else {
					h, _ = build(t, r, dir, Hash{}, nil, true)
				}
				r.hook = nil
				if !swapped {
					t.Fatalf("the hook never ran for x")
				}
				dst := t.TempDir()
				restore(t, r, h, dst)
				got := describe(t, dst)
				if got["x"] != tc.want {
					t.Errorf("x: got %q, want %q", got["x"], tc.want)
				}
				if got["keep"] == "" {
					t.Errorf("keep: missing from the tree")
				}
				// Whatever x became, the tree is what a build sees now.
				if now, _ := build(t, r, dir, Hash{}, nil, true); now != h {
					t.Errorf("build after the swap: got %s, want %s", now, h)
				}
			})
		}
	}
}

// TestFifoNeverBlocks builds a folder with a fifo nobody writes to.
func TestFifoNeverBlocks(t *testing.T) {
	r := openRepo(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "f"), "x", 0o644)
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, st, err := r.Build(ctx, openRoot(t, dir), Hash{}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 1 {
		t.Errorf("got %d files, want 1 (the fifo left out)", st.Files)
	}
	h2, _, err := r.Build(ctx, openRoot(t, dir), h, []Change{{Path: "fifo"}}, false)
	if err != nil || h2 != h {
		t.Errorf("incremental build naming the fifo: got %s, %v; want %s", h2, err, h)
	}
}

// TestSymlinksAreNotFollowed builds a workspace whose links point out of
// it and checks that only the links are stored.
func TestSymlinksAreNotFollowed(t *testing.T) {
	r := openRepo(t)
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "do not store", 0o600)
	dir := t.TempDir()
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "secret"))
	base, _ := build(t, r, dir, Hash{}, nil, true)
	// Changes through the links name paths below them: ignored.
	h, st := build(t, r, dir, base, []Change{{Path: "out/secret"}, {Path: "out", Tree: true}}, false)
	if st.Files != 0 || st.Links != 2 || h != base {
		t.Errorf("got %d files, %d links, tree %s; want 0, 2, %s", st.Files, st.Links, h, base)
	}
	if rc, err := r.OpenBlob(sum([]byte("do not store"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("the content behind a link was stored (OpenBlob: %v)", err)
		if rc != nil {
			rc.Close()
		}
	}
	spreadAll(t, r)
	if _, err := os.Stat(r.objectPath(sum([]byte("do not store")))); err == nil {
		t.Errorf("the content behind a link was stored")
	}
}

// TestMountsAreLeftOut mounts a tmpfs, bind-mounts a folder and a file
// below the workspace, and checks that the tree holds none of them.
func TestMountsAreLeftOut(t *testing.T) {
	if os.Geteuid() != 0 {
		cannotRun(t, "this test mounts: it needs root")
	}
	r := openRepo(t)
	dir := t.TempDir()
	other := t.TempDir()
	write(t, filepath.Join(other, "elsewhere"), "not in the workspace", 0o644)
	write(t, filepath.Join(dir, "plain"), "in", 0o644)
	write(t, filepath.Join(dir, "target-file"), "covered", 0o644)
	for _, d := range []string{"tmpfs", "bind"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	mount := func(src, dst, fstype string, flags uintptr) {
		t.Helper()
		if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
			cannotRun(t, "mount %s on %s: %v", src, dst, err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	mount("tmpfs", filepath.Join(dir, "tmpfs"), "tmpfs", 0)
	write(t, filepath.Join(dir, "tmpfs/on-tmpfs"), "x", 0o644)
	mount(other, filepath.Join(dir, "bind"), "", unix.MS_BIND)
	mount(filepath.Join(other, "elsewhere"), filepath.Join(dir, "target-file"), "", unix.MS_BIND)

	base, st := build(t, r, dir, Hash{}, nil, true)
	tree, err := r.ReadTree(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) != 1 || tree[0].Name != "plain" || st.Files != 1 {
		t.Fatalf("full build: got %v (%d files); want only plain", tree, st.Files)
	}
	h, _ := build(t, r, dir, base, []Change{{Path: "tmpfs", Tree: true}, {Path: "bind/elsewhere"}, {Path: "target-file"}}, false)
	if h != base {
		t.Errorf("incremental build over the mounts: got %s, want %s", h, base)
	}
}
