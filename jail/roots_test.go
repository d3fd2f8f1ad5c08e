package jail

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/internal/testenv"
)

// The jail's suites run over each kind of root a jail can have: the host's
// folders, and test images built here from the host's busybox (busybox-
// static: one static program, its applets as links) and bash (with the
// libraries ldd names, which also run the test binary, so that the
// helpers of helper_test.go work there).

// imageSpec says what a test image's root holds.
type imageSpec struct {
	name    string // in its os-release and marker file
	busybox bool   // /bin/busybox and its applets as links in /bin
	noSh    bool   // with busybox: no /bin/sh (nor ash)
	bash    bool   // /bin/bash, its libraries, and /bin/sh a link to it
	env     []string
	user    string
	workDir string
}

// testRoot is a root the suites run over.
type testRoot struct {
	name  string
	image *imageSpec // nil: the host's folders
	// helpers says the test binary (linked with the host's libc) runs in
	// it.
	helpers bool
	// bash says /bin/bash is there.
	bash bool
}

// testRoots are the roots the suites run over.
func testRoots() []testRoot {
	return []testRoot{
		{name: "host", helpers: true, bash: true},
		{name: "busybox", image: &imageSpec{name: "A", busybox: true, env: testImageEnv}},
		{name: "bash", image: &imageSpec{name: "B", busybox: true, bash: true, env: testImageEnv}, helpers: true, bash: true},
	}
}

// testImageEnv is the test images' Env.
var testImageEnv = []string{"PATH=/opt/tools/bin:/bin", "FOO_VERSION=1.2.3"}

// forRoots runs fn as a subtest over each root of testRoots that keep
// says it can run on.
func forRoots(t *testing.T, keep func(testRoot) bool, fn func(t *testing.T, r testRoot)) {
	t.Helper()
	for _, r := range testRoots() {
		if keep != nil && !keep(r) {
			continue
		}
		t.Run(r.name, func(t *testing.T) { fn(t, r) })
	}
}

// withHelpers keeps the roots the test binary runs in.
func withHelpers(r testRoot) bool { return r.helpers }

// withBash keeps the roots with bash.
func withBash(r testRoot) bool { return r.bash }

// on returns cfg on root r: with r's image, if it has one.
func (r testRoot) on(t *testing.T, cfg Config) Config {
	t.Helper()
	if r.image != nil && cfg.Image == nil {
		cfg.Image = sharedImage(t, *r.image)
	}
	return cfg
}

// suiteImages are the images of testRoots, each built once for the whole
// suite (building one takes a tenth of a second or more, and the suites
// start a hundred jails on them): a jail never changes its image. TestMain
// removes them after the tests.
var suiteImages struct {
	sync.Mutex
	dir   string            // their folder, made at the first
	built map[string]*Image // by imageSpec.name
}

// sharedImage returns the suite's image of spec, building it first if
// needed. A test that changes its image builds its own (newTestImage).
func sharedImage(t *testing.T, spec imageSpec) *Image {
	t.Helper()
	suiteImages.Lock()
	defer suiteImages.Unlock()
	if img, ok := suiteImages.built[spec.name]; ok {
		return img
	}
	if suiteImages.dir == "" {
		dir, err := os.MkdirTemp("", "jail-test-images")
		if err != nil {
			t.Fatal(err)
		}
		suiteImages.dir, suiteImages.built = dir, map[string]*Image{}
	}
	// A folder of its own for each try: one that failed half way (no
	// busybox on this machine) leaves its folder behind.
	dir, err := os.MkdirTemp(suiteImages.dir, spec.name)
	if err != nil {
		t.Fatal(err)
	}
	img := newTestImageIn(t, dir, spec)
	suiteImages.built[spec.name] = img
	return img
}

// removeSuiteImages removes the images sharedImage built.
func removeSuiteImages() {
	if suiteImages.dir != "" {
		os.RemoveAll(suiteImages.dir)
	}
}

// startJailOn starts a jail over a fresh workspace on root r (see
// startJailWith).
func startJailOn(t *testing.T, r testRoot, cfg Config) (*Jail, string) {
	t.Helper()
	return startJailWith(t, r.on(t, cfg))
}

// newTestImage builds an image's root as the image store would leave it
// (root's, with ImageMountPoints made) in a folder of the test's.
func newTestImage(t testing.TB, spec imageSpec) *Image {
	t.Helper()
	return newTestImageIn(t, t.TempDir(), spec)
}

// newTestImageIn builds the image's root in the folder dir.
func newTestImageIn(t testing.TB, dir string, spec imageSpec) *Image {
	t.Helper()
	testenv.RequireRoot(t)
	root := filepath.Join(dir, "rootfs")
	mkdir := func(dir string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		mkdir(filepath.Dir(name))
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("/")
	dirs, files := ImageMountPoints()
	for _, d := range dirs {
		mkdir(d)
	}
	for _, f := range files {
		write(f, "", 0o644)
	}
	mkdir("/usr/share")
	write("/etc/os-release", "NAME=\"warren test image "+spec.name+"\"\nID=warren-test\n", 0o644)
	write("/etc/warren-test-marker", spec.name+"\n", 0o644)
	// An image's own users: the jail drops those that share its user's
	// name or uid.
	write("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nnode:x:1000:1000::/home/node:/bin/sh\n", 0o644)
	write("/etc/group", "root:x:0:\nnogroup:x:65534:\nnode:x:1000:\n", 0o644)
	if spec.busybox {
		if _, err := os.Stat("/usr/bin/busybox"); err != nil {
			testenv.CannotRun(t, "no /usr/bin/busybox (busybox-static) for a test image: %v", err)
		}
		copyFile(t, "/usr/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
		list, err := exec.Command("/usr/bin/busybox", "--list").Output()
		if err != nil {
			t.Fatalf("busybox --list: %v", err)
		}
		for _, applet := range strings.Fields(string(list)) {
			if spec.noSh && (applet == "sh" || applet == "ash") || spec.bash && applet == "sh" {
				continue
			}
			if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
		if !spec.noSh || spec.bash {
			write("/opt/tools/bin/imgtool", "#!/bin/sh\necho imgtool $FOO_VERSION\n", 0o755)
		}
	}
	if spec.bash {
		bash, err := filepath.EvalSymlinks("/bin/bash")
		if err != nil {
			testenv.CannotRun(t, "no bash on the host for a bash image: %v", err)
		}
		copyFile(t, bash, filepath.Join(root, "bin/bash"), 0o755)
		if err := os.Symlink("bash", filepath.Join(root, "bin/sh")); err != nil {
			t.Fatal(err)
		}
		// glibc's C.UTF-8 is files (warren's LANG and LC_ALL name it):
		// without them bash warns at every start.
		if err := os.CopyFS(filepath.Join(root, "usr/lib/locale/C.utf8"), os.DirFS("/usr/lib/locale/C.utf8")); err != nil {
			testenv.CannotRun(t, "no C.UTF-8 locale on the host for a bash image: %v", err)
		}
		out, err := exec.Command("ldd", bash).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bash, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", or
			// the loader's "/lib64/ld-linux-x86-64.so.2 (0x...)".
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					copyFile(t, f, filepath.Join(root, f), 0o755)
				}
			}
		}
	}
	return &Image{Root: root, Env: spec.env, User: spec.user, WorkingDir: spec.workDir}
}

// copyFile copies the file src (its links followed) to dst.
func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// startImageJail starts a jail on img over a fresh workspace.
func startImageJail(t *testing.T, img *Image, cfg Config) (*Jail, string) {
	t.Helper()
	cfg.Image = img
	return startJailWith(t, cfg)
}

// tryStart starts a jail with cfg (from the suite's base, if any) over a
// fresh workspace, and returns Start's error; a jail that started is
// closed.
func tryStart(t *testing.T, cfg Config) error {
	t.Helper()
	if cfg.Workspace == "" {
		cfg.Workspace = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := Start(ctx, based(cfg))
	if err == nil {
		j.Close()
	}
	return err
}
