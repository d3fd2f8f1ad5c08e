package inspect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/testenv"
)

// newDirRoom returns a room over a data folder with its workspaces
// folder inside (as the daemon's default layout), for the folder checks
// only: no store, no threads.
func newDirRoom(t *testing.T) (in *Inspections, data, ws string) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "data")
	ws = filepath.Join(data, "workspaces")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	in, err := New(Config{DataDir: data, WorkspacesDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	return in, data, ws
}

func TestNewRefusesMissingFolders(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(Config{DataDir: filepath.Join(dir, "missing"), WorkspacesDir: dir}); err == nil || !strings.Contains(err.Error(), "data dir") {
		t.Errorf("a missing data folder: got %v, want an error naming the data dir", err)
	}
	if _, err := New(Config{DataDir: dir, WorkspacesDir: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "workspaces folder") {
		t.Errorf("a missing workspaces folder: got %v, want an error naming it", err)
	}
}

// TestWalkNoLinks: the walk opens a folder one component at a time, sees
// every folder on the way, and refuses a link anywhere, a file on the
// way, a missing component and a path that is not absolute and clean.
func TestWalkNoLinks(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real", "d")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	var seen []string
	fd, err := walkNoLinks(real, func(_ int, at string) error {
		seen = append(seen, at)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", real, err)
	}
	id, err := fileIDOf(fd)
	unix.Close(fd)
	if want, serr := statID(real); err != nil || serr != nil || id != want {
		t.Errorf("the walk's descriptor is %v (%v), want %s's %v (%v)", id, err, real, want, serr)
	}
	if seen[0] != "/" || seen[len(seen)-1] != real || !slices.Contains(seen, filepath.Join(base, "real")) {
		t.Errorf("visited %v, want every folder from / to %s", seen, real)
	}

	for _, tt := range []struct{ name, path, says string }{
		{"a link as a parent", filepath.Join(base, "link", "d"), "symbolic link"},
		{"a link at the end", filepath.Join(base, "link"), "symbolic link"},
		{"a file on the way", filepath.Join(base, "file", "d"), "not a folder"},
		{"missing", filepath.Join(base, "missing"), "does not exist"},
		{"relative", "real/d", "absolute, clean"},
		{"not clean", base + "/real/../real/d", "absolute, clean"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := walkNoLinks(tt.path, nil)
			if err == nil {
				unix.Close(fd)
			}
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("walk %s: got %v, want ErrInvalid saying %q", tt.path, err, tt.says)
			}
		})
	}

	// A refusal of visit stops the walk with its error.
	stop := errors.New("stop")
	if _, err := walkNoLinks(real, func(int, string) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("a visit's refusal: got %v, want it", err)
	}
}

// TestOpenInspectionDirChecks: a folder is refused in or at the data and
// workspaces folders (also through a link), when it is someone else's,
// not empty, not a folder, or a mount root; a good one is opened, and
// the mount is known by its clean path.
func TestOpenInspectionDirChecks(t *testing.T) {
	in, data, ws := newDirRoom(t)
	base := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := mk("full")
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inData := filepath.Join(data, "inside")
	inWS := filepath.Join(ws, "t", "th")
	for _, d := range []string{inData, inWS} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(inData, link); err != nil {
		t.Fatal(err)
	}
	other := uint32(os.Getuid()) + 4242

	for _, tt := range []struct {
		name  string
		path  string
		owner uint32
		want  error
	}{
		{"relative", "rel/dir", 0, api.ErrInvalid},
		{"missing", filepath.Join(base, "missing"), 0, api.ErrInvalid},
		{"a file", file, 0, api.ErrInvalid},
		{"not empty", full, 0, api.ErrInvalid},
		{"the data folder", data, 0, api.ErrInvalid},
		{"inside the data folder", inData, 0, api.ErrInvalid},
		{"the workspaces folder", ws, 0, api.ErrInvalid},
		{"inside the workspaces folder", inWS, 0, api.ErrInvalid},
		{"a link into the data folder", link, 0, api.ErrInvalid},
		{"owned by someone else", mk("theirs"), other, api.ErrForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fd, _, err := in.openInspectionDir(tt.path, tt.owner)
			if err == nil {
				unix.Close(fd)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}

	t.Run("a good folder", func(t *testing.T) {
		dir := mk("good")
		fd, path, err := in.openInspectionDir(dir+"/", uint32(os.Getuid()))
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if path != dir {
			t.Errorf("known as %q, want %q", path, dir)
		}
	})

	t.Run("a mount point", func(t *testing.T) {
		testenv.RequireRoot(t) // needed to mount a tmpfs
		dir := mk("tmpfs")
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			testenv.CannotRun(t, "mount tmpfs: %v", err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		fd, _, err := in.openInspectionDir(dir, 0)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, api.ErrConflict) {
			t.Errorf("got %v, want ErrConflict", err)
		}
	})
}

func TestWithin(t *testing.T) {
	for _, tt := range []struct {
		dir, path string
		want      bool
	}{
		{"/a", "/a/b", true},
		{"/a", "/a/b/c", true},
		{"/a", "/a", false},
		{"/a", "/ab", false},
		{"/a", "/", false},
		{"/a/b", "/a", false},
		{"/a", "/..a/b", false},
	} {
		if got := within(tt.dir, tt.path); got != tt.want {
			t.Errorf("within(%q, %q) = %v, want %v", tt.dir, tt.path, got, tt.want)
		}
	}
}
