package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/imagetest"
	"warren/internal/testenv"
)

// The registry and the images of these tests are internal/imagetest's;
// file, dir, symlink and hardlink are short for its entries.

func file(name, body string) imagetest.File { return imagetest.File{Path: name, Body: body} }
func dir(name string) imagetest.File        { return imagetest.File{Path: name, Dir: true} }
func symlink(name, to string) imagetest.File {
	return imagetest.File{Path: name, Link: to}
}
func hardlink(name, to string) imagetest.File {
	return imagetest.File{Path: name, Type: tar.TypeLink, Link: to, Mode: 0o644}
}

// simpleImage is an image of one layer of files.
func simpleImage(t testing.TB, files ...imagetest.File) v1.Image {
	t.Helper()
	return imagetest.Image(t, nil, "", imagetest.Layer(t, files...))
}

var testMountPoints = MountPoints{
	Dirs:  []string{"/workspace", "/tmp", "/dev", "/proc", "/home/agent"},
	Files: []string{"/etc/resolv.conf", "/etc/hosts", "/etc/passwd", "/etc/group"},
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: t.Output()})
}

// sandbox is a folder holding the store's folder and, beside it, a canary
// folder that no image may change.
type sandbox struct {
	base, dir, canary string
	snap              map[string]string
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	base := t.TempDir()
	sb := &sandbox{base: base, dir: filepath.Join(base, "store"), canary: filepath.Join(base, "canary")}
	if err := os.MkdirAll(filepath.Join(sb.canary, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.canary, "keep"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.canary, "sub", "keep"), []byte("canary too"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb.snap = sb.snapshot(t)
	return sb
}

// snapshot describes everything in base but the store's folder.
func (sb *sandbox) snapshot(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(sb.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == sb.dir {
			return fs.SkipDir
		}
		if p == sb.base {
			return nil // the store's folder is made in it
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d %v", info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCanary fails t if anything beside the store's folder changed.
func (sb *sandbox) checkCanary(t testing.TB) {
	t.Helper()
	now := sb.snapshot(t)
	for p, d := range now {
		if sb.snap[p] != d {
			t.Errorf("outside the store: %s is %q, was %q", p, d, sb.snap[p])
		}
	}
	for p := range sb.snap {
		if _, ok := now[p]; !ok {
			t.Errorf("outside the store: %s is gone", p)
		}
	}
}

// openStore opens a store in sb (a new sandbox when nil) for reg's
// registry (none when nil), after mod changes the Config.
func openStore(t testing.TB, sb *sandbox, reg *imagetest.Registry, mod func(*Config)) *Store {
	t.Helper()
	testenv.RequireRoot(t)
	if sb == nil {
		sb = newSandbox(t)
	}
	cfg := Config{Dir: sb.dir, MountPoints: testMountPoints, Logger: testLogger(t)}
	if reg != nil {
		cfg.Registries = []string{reg.Host}
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkEmpty fails t unless the store holds nothing: no image listed, no
// tree, no work folder, no bytes.
func checkEmpty(t testing.TB, s *Store) {
	t.Helper()
	if l := s.List(); len(l) != 0 {
		t.Errorf("List() = %v, want none", l)
	}
	if b := s.Bytes(); b != 0 {
		t.Errorf("Bytes() = %d, want 0", b)
	}
	if p := s.pending.Load(); p != 0 {
		t.Errorf("pending = %d, want 0", p)
	}
	for _, d := range []string{s.tmp, s.roots} {
		if names := dirNames(t, d); len(names) != 0 {
			t.Errorf("%s holds %v, want nothing", d, names)
		}
	}
}

func dirNames(t testing.TB, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testenvRoot(t testing.TB) { testenv.RequireRoot(t) }

// treeBytes is what Image.Bytes should be for the tree at root: each
// inode's size once, 4 KiB a folder, a link's target length.
func treeBytes(t testing.TB, root string) int64 {
	t.Helper()
	var n int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n += dirBytes
		case unix.S_IFLNK:
			n += st.Size
		case unix.S_IFREG:
			if !seen[st.Ino] {
				seen[st.Ino] = true
				n += st.Size
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
