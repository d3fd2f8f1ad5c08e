package fs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// These cover what agents do that go-fuse's posixtest does not: mmap,
// flock between two opens, chmod and the exec bit, and a whole git
// workflow, in both I/O modes.
//
// This test process serves the mounts itself, so it never execs a file on
// them nor starts a child in them: the Go runtime's fork waits for the
// child's exec without letting the garbage collector stop it, and the exec
// would wait for this very process to answer FUSE requests. A shell, started
// outside the mount, does both for us (runOutside).

// runOutside runs a shell command line in a child that starts outside
// every mount.
func runOutside(script string, args ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Dir = "/"
	return cmd
}

func forBothModes(t *testing.T, f func(t *testing.T, mnt string)) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"passthrough", Options{}}, {"served", Options{NoPassthrough: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			_, mnt := mountTemp(t, mode.opts)
			f(t, mnt)
		})
	}
}

func TestMmapSharedWrite(t *testing.T) {
	forBothModes(t, func(t *testing.T, mnt string) {
		p := filepath.Join(mnt, "mapped")
		must(t, os.WriteFile(p, bytes.Repeat([]byte{'a'}, 8192), 0o644))
		if out, err := inChild("mmap-write", p); err != nil {
			t.Fatalf("mmap write in a child: %v\n%s", err, out)
		}
		got, err := os.ReadFile(p)
		must(t, err)
		if !bytes.Equal(got[4096:4096+20], []byte("written through mmap")) {
			t.Errorf("read back %q after an mmap write", got[4096:4116])
		}
	})
}

func TestFlockBetweenOpens(t *testing.T) {
	forBothModes(t, func(t *testing.T, mnt string) {
		p := filepath.Join(mnt, "lock")
		must(t, os.WriteFile(p, nil, 0o644))
		a, err := os.Open(p)
		must(t, err)
		defer a.Close()
		b, err := os.Open(p)
		must(t, err)
		defer b.Close()
		must(t, unix.Flock(int(a.Fd()), unix.LOCK_EX|unix.LOCK_NB))
		if err := unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
			t.Errorf("second flock: got %v, want EWOULDBLOCK", err)
		}
		must(t, unix.Flock(int(a.Fd()), unix.LOCK_UN))
		must(t, unix.Flock(int(b.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	})
}

func TestChmodAndExec(t *testing.T) {
	forBothModes(t, func(t *testing.T, mnt string) {
		p := filepath.Join(mnt, "script.sh")
		must(t, os.WriteFile(p, []byte("#!/bin/sh\necho ran\n"), 0o644))
		if err := runOutside(`exec "$1"`, p).Run(); err == nil {
			t.Errorf("a file without the exec bit ran")
		}
		must(t, os.Chmod(p, 0o755))
		st, err := os.Stat(p)
		must(t, err)
		if st.Mode().Perm() != 0o755 {
			t.Errorf("mode after chmod: %v, want 0755", st.Mode().Perm())
		}
		out, err := runOutside(`exec "$1"`, p).Output()
		if err != nil || string(out) != "ran\n" {
			t.Errorf("run after chmod: %q, %v", out, err)
		}
		must(t, os.Truncate(p, 3))
		if st, _ := os.Stat(p); st.Size() != 3 {
			t.Errorf("size after truncate: %d, want 3", st.Size())
		}
		var s syscall.Stat_t
		must(t, syscall.Stat(p, &s))
		if s.Nlink != 1 {
			t.Errorf("nlink %d, want 1", s.Nlink)
		}
	})
}

func TestGitWorkflow(t *testing.T) {
	testenv.RequireCommand(t, "git")
	forBothModes(t, func(t *testing.T, mnt string) {
		git := func(args ...string) string {
			t.Helper()
			cmd := runOutside(`cd "$1" && shift && exec git "$@"`, append([]string{mnt}, args...)...)
			cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
				"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		git("init", "-q")
		must(t, os.MkdirAll(filepath.Join(mnt, "pkg"), 0o755))
		must(t, os.WriteFile(filepath.Join(mnt, "pkg", "a.go"), []byte("package pkg\n"), 0o644))
		must(t, os.Symlink("pkg/a.go", filepath.Join(mnt, "link")))
		git("add", "-A")
		git("commit", "-qm", "first")
		must(t, os.WriteFile(filepath.Join(mnt, "pkg", "a.go"), []byte("package pkg\n\nfunc A() {}\n"), 0o644))
		if out := git("status", "--porcelain"); out != " M pkg/a.go\n" {
			t.Errorf("git status: %q", out)
		}
		git("commit", "-qam", "second")
		git("checkout", "-q", "HEAD~1")
		if b, _ := os.ReadFile(filepath.Join(mnt, "pkg", "a.go")); string(b) != "package pkg\n" {
			t.Errorf("checkout did not restore the file: %q", b)
		}
		// The mount is nosymfollow: the link is there, as a link.
		if got, err := os.Readlink(filepath.Join(mnt, "link")); err != nil || got != "pkg/a.go" {
			t.Errorf("readlink after checkout: %q, %v", got, err)
		}
		git("gc", "-q")
		git("fsck", "--strict")
	})
}
