// Package testenv holds what warren's tests share: capability checks that
// fail under CI and skip elsewhere, a reader of the mount table, a
// goroutine-safe buffer, real etcd clusters (EtcdCluster) and a real
// S3-compatible server (S3Server), built from the modules under tools/ by
// package toolserver.
package testenv

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"warren/internal/mountinfo"
)

// RequireRootFUSE stops a test that needs root and /dev/fuse where either
// is missing: a failure when CI=true, where the suite must not pass by
// skipping its real tests, a skip elsewhere.
func RequireRootFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		CannotRun(t, "this test needs root and /dev/fuse; root is missing")
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		CannotRun(t, "this test needs root and /dev/fuse; /dev/fuse is missing: %v", err)
	}
}

// RequireRoot stops a test that needs root where it is missing, by the
// same rule as RequireRootFUSE.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		CannotRun(t, "this test needs root; root is missing")
	}
}

// CannotRun stops a test that cannot run here: a failure when CI=true, a
// skip otherwise. Every capability check of the tests goes through it.
func CannotRun(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireCommand stops a test that needs the program name on PATH where it
// is missing, by the same rule as RequireRootFUSE.
func RequireCommand(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		CannotRun(t, "this test needs %s: %v", name, err)
	}
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Path    string   // mount point, unescaped
	Options []string // per-mount options: rw or ro, nosuid...
	Type    string   // filesystem type, "fuse.warren" for warren's
}

// Mounts reads this process's mount table, failing the test if it cannot.
func Mounts(t testing.TB) []Mount {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mount table: %v", err)
	}
	var out []Mount
	for line := range strings.Lines(string(data)) {
		before, after, ok := strings.Cut(line, " - ")
		fields, post := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 6 || len(post) < 1 {
			t.Fatalf("mount table line %q: unexpected format", line)
		}
		out = append(out, Mount{
			Path:    mountinfo.Unescape(fields[4]),
			Options: strings.Split(fields[5], ","),
			Type:    post[0],
		})
	}
	return out
}

// MountsUnder lists the mount points at or below any of roots, in mount
// table order, one entry per mount: a path mounted twice is listed twice.
func MountsUnder(t testing.TB, roots ...string) []string {
	t.Helper()
	return pathsUnder(Mounts(t), roots...)
}

// pathsUnder is MountsUnder over the mount table ms.
func pathsUnder(ms []Mount, roots ...string) []string {
	var out []string
	for _, m := range ms {
		for _, r := range roots {
			if atOrBelow(r, m.Path) {
				out = append(out, m.Path)
				break
			}
		}
	}
	return out
}

// atOrBelow reports whether path is root or lies below it.
func atOrBelow(root, path string) bool {
	root = filepath.Clean(root)
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}

// SyncBuffer is a bytes.Buffer safe for concurrent Write and String. The
// zero value is an empty buffer ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// HostListener listens on the host's 127.0.0.1, answers every connection
// with greeting and closes it, and stops when the test ends. It returns
// the port: a jail must not reach it.
func HostListener(t testing.TB, greeting string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on the host's loopback: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting))
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}
