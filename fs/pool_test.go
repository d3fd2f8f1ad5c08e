package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// countFds counts the process's open descriptors, but the pidfds by
// which the hub tells its callers apart (actors.go): those are per
// process that made requests, not per workspace.
func countFds(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[pidfd]" {
			n++
		}
	}
	return n
}

// newTestPool starts a pool over a hub of its own, closed at the end.
func newTestPool(t *testing.T) *Pool {
	t.Helper()
	testenv.RequireRootFUSE(t)
	hub := NewHub(HubConfig{Logger: poolTestLogger(t)})
	p, err := NewPool(PoolConfig{Hub: hub, Logger: poolTestLogger(t)})
	if err != nil {
		hub.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(10 * time.Second); err != nil {
			t.Error(err)
		}
		hub.Close()
	})
	return p
}

// TestPoolManyRoots serves many workspaces on one shared connection: each
// is its own folder at its own path, an idle one costs at most one
// descriptor and no OS thread, ".." at a mount's root leads to the folder
// holding the mount path (never to another workspace), every mount is
// nosymfollow, and a closed one stops being served and gives its
// descriptor back.
func TestPoolManyRoots(t *testing.T) {
	p := newTestPool(t)
	dir := t.TempDir()
	const n = 200
	ctx := context.Background()
	// One first, so that the connection's own cost is not counted.
	first := mountPooled(t, p, dir, "first")
	fds0, threads0 := countFds(t), testenv.OSThreads(t)
	ms := make([]*Mount, n)
	for i := range ms {
		ms[i] = mountPooled(t, p, dir, strconv.Itoa(i))
	}
	fds, threads := countFds(t), testenv.OSThreads(t)
	if per := float64(fds-fds0) / n; per > 1 {
		t.Errorf("descriptors per idle workspace: got %.2f (%d for %d), want at most 1", per, fds-fds0, n)
	}
	if threads-threads0 > 8 {
		t.Errorf("OS threads: got %d more for %d workspaces, want a few at most", threads-threads0, n)
	}
	if got := p.Conns(); got != 1 {
		t.Errorf("connections: got %d, want 1", got)
	}
	_ = first
	for i, m := range ms {
		mp := m.Mountpoint()
		want := fmt.Sprintf("content %d", i)
		if err := os.WriteFile(filepath.Join(mp, "f"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "b"+strconv.Itoa(i), "f"))
		if err != nil || string(got) != want {
			t.Fatalf("backing of %d: got %q, %v; want %q", i, got, err, want)
		}
		if i%50 != 0 {
			continue
		}
		// ".." at the root is the folder holding the mount path.
		var up, holder syscall.Stat_t
		if err := syscall.Stat(filepath.Join(mp, ".."), &up); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(filepath.Dir(mp), &holder); err != nil {
			t.Fatal(err)
		}
		if up.Ino != holder.Ino || up.Dev != holder.Dev {
			t.Errorf("%s/..: got inode %d on %d, want the holder's %d on %d", mp, up.Ino, up.Dev, holder.Ino, holder.Dev)
		}
		ents, err := os.ReadDir(filepath.Join(mp, ".."))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() == "1" || e.Name() == "2" {
				t.Errorf("%s/.. lists %q: a slot of the shared connection", mp, e.Name())
			}
		}
		// A link an agent makes is not followed by a host process.
		if err := os.Symlink("f", filepath.Join(mp, "l")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(filepath.Join(mp, "l")); !isErrno(err, syscall.ELOOP) {
			t.Errorf("read through a link on %s: got %v, want ELOOP (nosymfollow)", mp, err)
		}
	}
	// Two workspaces' inode numbers never meet, and readdir agrees with stat.
	seen := make(map[uint64]string)
	for i, m := range ms[:20] {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(m.Mountpoint(), "f"), &st); err != nil {
			t.Fatal(err)
		}
		if o, ok := seen[st.Ino]; ok {
			t.Errorf("inode %d is both %s and workspace %d's f", st.Ino, o, i)
		}
		seen[st.Ino] = strconv.Itoa(i)
		ents, err := os.ReadDir(m.Mountpoint())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "f" {
				continue
			}
			info, _ := e.Info()
			if got := info.Sys().(*syscall.Stat_t).Ino; got != st.Ino {
				t.Errorf("workspace %d: readdir's inode of f %d, stat's %d", i, got, st.Ino)
			}
		}
	}
	// Closing gives the descriptors back and stops serving.
	for _, m := range ms {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still served after Close", m.Mountpoint())
		}
		if mounted, err := IsMountpoint(m.Mountpoint()); err != nil || mounted {
			t.Fatalf("%s: mounted %v (%v) after Close", m.Mountpoint(), mounted, err)
		}
	}
	if got := countFds(t); got > fds0+2 {
		es, _ := os.ReadDir("/proc/self/fd")
		var what []string
		for _, e := range es {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			what = append(what, e.Name()+"="+l)
		}
		t.Errorf("descriptors after closing: got %d, had %d before: %v", got, fds0, what)
	}
	_ = ctx
}

// TestPoolReadOnly serves a read-only workspace beside a writable one on
// one connection.
func TestPoolReadOnly(t *testing.T) {
	p := newTestPool(t)
	dir := t.TempDir()
	rw := mountPooled(t, p, dir, "rw")
	back := filepath.Join(dir, "bro")
	mp := filepath.Join(dir, "mro")
	for _, d := range []string{back, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(back, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ro, err := p.Serve(context.Background(), back, mp, Options{Name: "ro", ReadOnly: true, Logger: poolTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	if err := os.WriteFile(filepath.Join(mp, "g"), nil, 0o644); !isErrno(err, syscall.EROFS) {
		t.Errorf("create on the read-only mount: got %v, want EROFS", err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "x" {
		t.Errorf("read on the read-only mount: got %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(rw.Mountpoint(), "g"), nil, 0o644); err != nil {
		t.Errorf("create on the writable mount beside it: %v", err)
	}
}

// mountPooled serves a new folder dir/b<name> at dir/m<name> on p, closed
// at the end of the test.
func mountPooled(t *testing.T, p *Pool, dir, name string) *Mount {
	t.Helper()
	back, mp := filepath.Join(dir, "b"+name), filepath.Join(dir, "m"+name)
	for _, d := range []string{back, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := p.Serve(context.Background(), back, mp, Options{Name: "t/" + name, Logger: poolTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func isErrno(err error, want syscall.Errno) bool {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return e == want
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

var _ = unix.O_PATH

// poolTestLogger logs warnings and worse to the test's log.
func poolTestLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn})
}

// TestMountFlagsOf reads a mount's flags with statmount, as checkAttrs
// does: a read-only pool mount is read-only and nosymfollow, a writable
// one nosymfollow only.
func TestMountFlagsOf(t *testing.T) {
	p := newTestPool(t)
	dir := t.TempDir()
	rw := mountPooled(t, p, dir, "rw")
	fd, err := unix.Open(rw.Mountpoint(), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	attrs, ok, err := mountFlagsOf(fd)
	if err != nil || !ok {
		t.Fatalf("mountFlagsOf: %v, ok %v (statmount is on Linux 6.8 and later)", err, ok)
	}
	if attrs&unix.MOUNT_ATTR_NOSYMFOLLOW == 0 || attrs&unix.MOUNT_ATTR_NOSUID == 0 || attrs&unix.MOUNT_ATTR_RDONLY != 0 {
		t.Errorf("flags of a writable pool mount: got %#x, want nosymfollow and nosuid, not read-only", attrs)
	}
	if mounted, err := IsMountpoint(rw.Mountpoint()); err != nil || !mounted {
		t.Errorf("IsMountpoint of a mount: %v, %v", mounted, err)
	}
	if mounted, err := IsMountpoint(dir); err != nil || mounted {
		t.Errorf("IsMountpoint of a plain folder: %v, %v", mounted, err)
	}
}
