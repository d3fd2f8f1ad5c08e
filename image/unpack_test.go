package image

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"warren/internal/imagetest"
)

// TestHostileLayers pulls images whose layers try to lead out of the
// rootfs: each is refused, naming what it did, and nothing outside the
// store changes.
func TestHostileLayers(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	sb := newSandbox(t)
	s := openStore(t, sb, reg, nil)
	// The rootfs is Dir/tmp/work-*/rootfs: four folders below the
	// sandbox, where the canary is.
	up := "../../../../canary"
	long := strings.Repeat("n/", 2100) + "f"
	deep := strings.Repeat("d/", maxDepth+1) + "f"
	cases := []struct {
		name string
		ents []imagetest.File
		want string
	}{
		{"dotdot", []imagetest.File{file(up+"/evil", "x")}, `a ".." component`},
		{"dotdot-inner", []imagetest.File{dir("a"), file("a/../"+up+"/evil", "x")}, `a ".." component`},
		{"dot-slash-dotdot", []imagetest.File{file("./"+up+"/evil", "x")}, `a ".." component`},
		{"absolute", []imagetest.File{file(sb.canary+"/evil", "x")}, "an absolute name"},
		{"absolute-dir", []imagetest.File{dir(sb.canary + "/sub")}, "an absolute name"},
		{"through-symlink", []imagetest.File{symlink("esc", sb.canary), file("esc/evil", "x")}, "passes through a symbolic link"},
		{"through-relative-symlink", []imagetest.File{symlink("here", "."), file("here/evil", "x")}, "passes through a symbolic link"},
		{"dir-through-symlink", []imagetest.File{symlink("esc", sb.canary), dir("esc/newdir")}, "passes through a symbolic link"},
		{"overwrite-through-symlink", []imagetest.File{symlink("esc", sb.canary), file("esc/keep", "pwned")}, "passes through a symbolic link"},
		{"symlink-climbs", []imagetest.File{symlink("a", "../../../../etc/shadow")}, "climbs above the rootfs"},
		{"symlink-climbs-nested", []imagetest.File{dir("d"), dir("d/e"), symlink("d/e/l", "../../../canary")}, "climbs above the rootfs"},
		{"symlink-climbs-after-descending", []imagetest.File{symlink("l", "a/b/../../../x")}, "climbs above the rootfs"},
		{"hardlink-absolute", []imagetest.File{hardlink("h", "/etc/passwd")}, "an absolute name"},
		{"hardlink-dotdot", []imagetest.File{hardlink("h", up+"/keep")}, `a ".." component`},
		{"hardlink-missing", []imagetest.File{hardlink("h", "nope")}, "does not exist"},
		{"hardlink-dir", []imagetest.File{dir("d"), hardlink("h", "d")}, "a folder"},
		{"hardlink-through-symlink", []imagetest.File{dir("d"), file("d/f", "x"), symlink("l", "d"), hardlink("h", "l/f")}, "passes through a symbolic link"},
		{"hardlink-through-escaping-symlink", []imagetest.File{symlink("l", sb.canary), hardlink("h", "l/keep")}, "passes through a symbolic link"},
		{"whiteout-through-symlink", []imagetest.File{symlink("l", sb.canary), file("l/.wh.keep", "")}, "passes through a symbolic link"},
		{"opaque-through-symlink", []imagetest.File{symlink("l", sb.canary), file("l/.wh..wh..opq", "")}, "passes through a symbolic link"},
		{"whiteout-dotdot", []imagetest.File{file(up+"/.wh.keep", "")}, `a ".." component`},
		{"name-past-PATH_MAX", []imagetest.File{file(long, "x")}, "PATH_MAX"},
		{"too-deep", []imagetest.File{file(deep, "x")}, "folders deep"},
		{"file-as-parent", []imagetest.File{file("f", "x"), file("f/g", "x")}, "its folder f is not a folder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := reg.Ref("hostile/" + strings.ToLower(c.name) + ":1")
			reg.Push(t, "hostile/"+strings.ToLower(c.name)+":1", simpleImage(t, c.ents...))
			_, err := s.Pull(ctxT(t), ref, nil)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Pull = %v, want ErrRefused", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "layer 1 of 1") {
				t.Errorf("Pull = %v, want it to name the layer and say %q", err, c.want)
			}
			t.Log(err)
			checkEmpty(t, s)
			sb.checkCanary(t)
		})
	}
}

// TestHostileLaterLayer: a second layer turns a folder of the first into a
// link out, then writes through it.
func TestHostileLaterLayer(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	sb := newSandbox(t)
	s := openStore(t, sb, reg, nil)
	img := imagetest.ImageWith(t, nil,
		imagetest.Layer(t, dir("etc"), file("etc/conf", "x")),
		imagetest.Layer(t, symlink("etc", sb.canary)),
		imagetest.Layer(t, file("etc/keep", "pwned")),
	)
	reg.Push(t, "later:1", img)
	_, err := s.Pull(ctxT(t), reg.Ref("later:1"), nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "layer 3 of 3") || !strings.Contains(err.Error(), "passes through a symbolic link") {
		t.Errorf("Pull = %v, want ErrRefused in layer 3, through a link", err)
	}
	checkEmpty(t, s)
	sb.checkCanary(t)
}

func TestBombs(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "bytes:1", simpleImage(t, imagetest.File{Path: "big", Type: tar.TypeReg, Size: 2 << 20, Mode: 0o644}))
	var many []imagetest.File
	for i := range 100 {
		many = append(many, file("f"+itoa(i), ""))
	}
	reg.Push(t, "entries:1", simpleImage(t, many...))
	sb := newSandbox(t)
	s := openStore(t, sb, reg, func(c *Config) { c.MaxImageBytes = 1 << 20; c.MaxEntries = 50 })
	for _, c := range []struct{ ref, want string }{
		{"bytes:1", "more than 1048576 bytes (the bound of one image, MaxImageBytes)"},
		{"entries:1", "more than 50 entries (the bound of one image, MaxEntries)"},
	} {
		_, err := s.Pull(ctxT(t), reg.Ref(c.ref), nil)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pull(%s) = %v, want ErrRefused saying %q", c.ref, err, c.want)
		}
	}
	checkEmpty(t, s)
	sb.checkCanary(t)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestUnpackNeutralises: what an image may hold but not keep.
func TestUnpackNeutralises(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Config.User = "agent" }, imagetest.Layer(t,
		dir("usr"), dir("usr/bin"),
		imagetest.File{Path: "usr/bin/su", Type: tar.TypeReg, Body: "su", Mode: 0o4755},
		imagetest.File{Path: "usr/bin/sg", Type: tar.TypeReg, Body: "sg", Mode: 0o2755},
		imagetest.File{Path: "sticky", Type: tar.TypeReg, Body: "s", Mode: 0o1644},
		imagetest.File{Path: "tmp", Type: tar.TypeDir, Mode: 0o1777},
		imagetest.File{Path: "shared", Type: tar.TypeDir, Mode: 0o2775},
		dir("dev"),
		imagetest.File{Path: "dev/null", Type: tar.TypeChar, Mode: 0o666},
		imagetest.File{Path: "dev/sda", Type: tar.TypeBlock, Mode: 0o660},
		imagetest.File{Path: "dev/linked", Type: tar.TypeLink, Link: "dev/sda"},
		imagetest.File{Path: "run/fifo", Type: tar.TypeFifo, Mode: 0o640},
		imagetest.File{Path: "usr/bin/ping", Type: tar.TypeReg, Body: "ping", Mode: 0o755, PAX: map[string]string{
			"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
			"SCHILY.xattr.user.note":           "hello",
		}},
		dir("usr/share"), dir("usr/share/zoneinfo"), dir("usr/share/zoneinfo/Etc"),
		file("usr/share/zoneinfo/Etc/UTC", "TZif-test"),
		dir("etc"),
		symlink("etc/localtime", "/usr/share/zoneinfo/Etc/UTC"),
		symlink("etc/root", "/"),
		symlink("etc/clamped", "/../../../usr/share/zoneinfo/Etc/UTC"),
		symlink("etc/resolv.conf", "/run/systemd/resolve/stub-resolv.conf"),
		symlink("relative", "usr/share/zoneinfo/Etc/UTC"),
		imagetest.File{Path: "home/user/f", Type: tar.TypeReg, Body: "mine", Mode: 0o600, UID: 1000, GID: 1001},
		hardlink("usr/bin/su2", "usr/bin/su"),
		imagetest.File{Path: "proc", Type: tar.TypeReg, Body: "in the way", Mode: 0o644},
	))
	reg.Push(t, "neutral:1", img)
	sb := newSandbox(t)
	s := openStore(t, sb, reg, nil)
	got, err := s.Pull(ctxT(t), reg.Ref("neutral:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := got.Root
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	for p, want := range map[string]os.FileMode{
		"usr/bin/su": 0o755, "usr/bin/sg": 0o755, "sticky": 0o644,
		"tmp": fs.ModeDir | fs.ModeSticky | 0o777, "shared": fs.ModeDir | 0o775,
		"run/fifo": fs.ModeNamedPipe | 0o640,
	} {
		if got := mode(p); got != want {
			t.Errorf("mode of %s = %v, want %v", p, got, want)
		}
	}
	for _, p := range []string{"dev/null", "dev/sda", "dev/linked"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("device %s: %v, want it skipped", p, err)
		}
	}
	for _, x := range []string{"security.capability", "user.note"} {
		if _, err := unix.Lgetxattr(filepath.Join(root, "usr/bin/ping"), x, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("xattr %s on usr/bin/ping: %v, want none", x, err)
		}
	}
	for p, want := range map[string]string{
		"etc/localtime": "../usr/share/zoneinfo/Etc/UTC",
		"etc/root":      "..",
		"etc/clamped":   "../usr/share/zoneinfo/Etc/UTC",
		"relative":      "usr/share/zoneinfo/Etc/UTC",
	} {
		if got, err := os.Readlink(filepath.Join(root, p)); err != nil || got != want {
			t.Errorf("link %s -> %q (%v), want %q", p, got, err, want)
		}
	}
	// Inside the rootfs, the rewritten link reaches the same file.
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)
	for _, p := range []string{"etc/localtime", "etc/clamped", "etc/root/usr/share/zoneinfo/Etc/UTC"} {
		fd, err := unix.Openat2(rootfd, p, &unix.OpenHow{Flags: unix.O_RDONLY, Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			t.Errorf("opening %s in the root: %v", p, err)
			continue
		}
		// The *os.File owns fd from here: closing fd besides would
		// close a number its finalizer closes again, later, whatever it
		// then is.
		f := os.NewFile(uintptr(fd), p)
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "TZif-test" {
			t.Errorf("%s in the root reads %q, want TZif-test", p, b)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "home/user/f"), &st); err != nil || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("owner of home/user/f = %d:%d (%v), want 1000:1001", st.Uid, st.Gid, err)
	}
	var st2 unix.Stat_t
	unix.Lstat(filepath.Join(root, "usr/bin/su"), &st)
	unix.Lstat(filepath.Join(root, "usr/bin/su2"), &st2)
	if st.Ino != st2.Ino || st.Nlink != 2 {
		t.Errorf("usr/bin/su2 is inode %d, su %d with %d links: want one inode", st2.Ino, st.Ino, st.Nlink)
	}
	// The mount points: made, or what was in the way replaced.
	for _, d := range testMountPoints.Dirs {
		if m := mode(d[1:]); !m.IsDir() {
			t.Errorf("mount point %s is %v, want a folder", d, m)
		}
	}
	for _, f := range testMountPoints.Files {
		if m := mode(f[1:]); !m.IsRegular() {
			t.Errorf("mount point %s is %v, want a file", f, m)
		}
	}
	if m := mode("workspace"); m != fs.ModeDir|0o755 {
		t.Errorf("mode of workspace = %v, want 0755", m)
	}
	if m := mode("etc/hosts"); m != 0o644 {
		t.Errorf("mode of etc/hosts = %v, want 0644", m)
	}
	if got.User != "agent" {
		t.Errorf("User = %q", got.User)
	}
	if want := treeBytes(t, root); got.Bytes != want || got.Bytes != s.Bytes() {
		t.Errorf("Bytes = %d, store's %d, the tree holds %d", got.Bytes, s.Bytes(), want)
	}
	sb.checkCanary(t)
}

// TestWhiteouts: whiteouts and opaque folders hide the lower layers'
// entries and keep the layer's own, whatever their order in the tar.
func TestWhiteouts(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, nil,
		imagetest.Layer(t,
			dir("a"), file("a/f1", "1"), file("a/f2", "2"),
			dir("b"), file("b/g", "g"),
			dir("c"), file("c/x", "x"), dir("c/sub"), file("c/sub/y", "y"), dir("c/keep"), file("c/keep/old", "old"),
			dir("d"), file("d/old", "old"),
			file("e", "file"),
			file("shared", "original"), hardlink("alias", "shared"),
		),
		imagetest.Layer(t,
			file("a/.wh.f1", ""),
			file(".wh.b", ""),
			file("c/new", "new"),
			file("c/keep/mine", "mine"),
			file("c/.wh..wh..opq", ""),
			file("c/after", "after"),
			file("d", "now a file"),
			dir("e"), file("e/inside", "in"),
			file("alias", "replaced"),
			file(".wh.nothing-there", ""),
			file("gone/.wh.x", ""),
			file(".wh..wh.plnk", ""),
		),
	)
	reg.Push(t, "wh:1", img)
	s := openStore(t, nil, reg, nil)
	got, err := s.Pull(ctxT(t), reg.Ref("wh:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	err = filepath.WalkDir(got.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(got.Root, p)
		if strings.HasPrefix(d.Name(), ".wh.") {
			t.Errorf("whiteout %s made in the tree", rel)
		}
		if rel != "." && !isMountPoint(rel) {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a", "a/f2", "alias", "c", "c/after", "c/keep", "c/keep/mine", "c/new",
		"d", "e", "e/inside", "shared",
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("tree:\n got %v\nwant %v", paths, want)
	}
	if b := readFile(t, filepath.Join(got.Root, "shared")); b != "original" {
		t.Errorf("shared = %q: a file replacing its hard link wrote through it", b)
	}
	if b := readFile(t, filepath.Join(got.Root, "d")); b != "now a file" {
		t.Errorf("d = %q", b)
	}
	if want := treeBytes(t, got.Root); got.Bytes != want {
		t.Errorf("Bytes = %d, the tree holds %d", got.Bytes, want)
	}
}

func isMountPoint(rel string) bool {
	for _, p := range append(append([]string{}, testMountPoints.Dirs...), testMountPoints.Files...) {
		if "/"+rel == p || strings.HasPrefix(p, "/"+rel+"/") {
			return true
		}
	}
	return false
}

func TestCleanName(t *testing.T) {
	for _, c := range []struct{ in, want, why string }{
		{"a/b", "a/b", ""},
		{"./a/b/", "a/b", ""},
		{"a//b/./c", "a/b/c", ""},
		{".", "", ""},
		{"./", "", ""},
		{"/a", "", "absolute"},
		{"a/../b", "", ".."},
		{"..", "", ".."},
		{"", "", "empty"},
		{"a\x00b", "", "NUL"},
		{strings.Repeat("x", 256), "", "NAME_MAX"},
	} {
		got, why := cleanName(c.in)
		if got != c.want || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("cleanName(%q) = %q, %q; want %q, %q", c.in, got, why, c.want, c.why)
		}
	}
}

func TestLinkTarget(t *testing.T) {
	for _, c := range []struct{ rel, target, want, why string }{
		{"etc/localtime", "/usr/share/zoneinfo/UTC", "../usr/share/zoneinfo/UTC", ""},
		{"l", "/usr/lib", "usr/lib", ""},
		{"a/b/l", "/", "../..", ""},
		{"l", "/", ".", ""},
		{"a/l", "/x/", "../x/", ""},
		{"a/l", "/../../x", "../x", ""},
		{"a/l", "../x", "../x", ""},
		{"a/l", "../../x", "", "climbs"},
		{"l", "./a/../b", "./a/../b", ""},
		{"l", "a/../../b", "", "climbs"},
		{"l", "", "", "empty"},
	} {
		got, why := linkTarget(c.rel, c.target)
		if got != c.want || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("linkTarget(%q, %q) = %q, %q; want %q, %q", c.rel, c.target, got, why, c.want, c.why)
		}
	}
}
