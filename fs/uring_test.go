package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// requireURing readies a test of the io_uring transport itself, which
// serves its own mount on the rings in either pass of the suite: root,
// FUSE, and the fuse module's enable_uring on for the test (a kernel
// without it fails the test under CI=true).
func requireURing(t *testing.T) {
	t.Helper()
	testenv.SetFUSEURing(t, true)
}

// TestURingServesOverTheRings: on the uring transport the requests of
// ordinary file work come over the rings, not through /dev/fuse, and are
// answered right.
func TestURingServesOverTheRings(t *testing.T) {
	requireURing(t)
	backing, mnt, m := serveURing(t, Options{EntryTimeout: -1, AttrTimeout: -1, NegativeTimeout: -1})
	if m.Transport() != TransportURing || m.uring == nil {
		t.Fatalf("transport %q, want uring", m.Transport())
	}
	before := m.uring.ringRequests.Load()
	data := bytes.Repeat([]byte("ring "), 100000) // 500 KB: several WRITEs unless passthrough
	must(t, os.MkdirAll(filepath.Join(mnt, "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "a", "b", "f"), data, 0o644))
	must(t, os.Rename(filepath.Join(mnt, "a", "b", "f"), filepath.Join(mnt, "a", "g")))
	got, err := os.ReadFile(filepath.Join(mnt, "a", "g"))
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes back, not the %d written", len(got), len(data))
	}
	if b, err := os.ReadFile(filepath.Join(backing, "a", "g")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("backing file: %v, %d bytes", err, len(b))
	}
	ents, err := os.ReadDir(filepath.Join(mnt, "a"))
	must(t, err)
	if len(ents) != 2 {
		t.Fatalf("a holds %d entries, want b and g", len(ents))
	}
	if _, err := os.Stat(filepath.Join(mnt, "nothing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	if n := m.uring.ringRequests.Load() - before; n < 10 {
		t.Fatalf("%d requests came over the rings, want them all", n)
	}
}

// serveURing serves a new backing folder on the rings and returns it, the
// mount point and the mount, closed when the test ends.
func serveURing(t *testing.T, opts Options) (backing, mnt string, m *Mount) {
	t.Helper()
	dir := t.TempDir()
	backing, mnt = filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(backing, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	opts.Transport = TransportURing
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn})
	}
	m, err := Serve(context.Background(), backing, mnt, opts)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-m.Done()
	})
	return backing, mnt, m
}

// slowRoot is a root folder whose lookup of "slow" waits until the
// request is interrupted, to see that an INTERRUPT reaches the request it
// names, whichever way the request came.
type slowRoot struct {
	fusefs.Inode
	entered     chan struct{} // closed once the lookup waits
	interrupted chan struct{} // closed once it saw the interrupt
	release     chan struct{} // ends the wait in any case (cleanup)
}

func (r *slowRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if name != "slow" {
		return nil, syscall.ENOENT
	}
	close(r.entered)
	select {
	case <-ctx.Done():
		close(r.interrupted)
		return nil, syscall.EINTR
	case <-r.release:
		return nil, syscall.ENOENT
	}
}

// TestInterruptReachesTheRequest: a caller stuck in a request that is
// killed makes the kernel send INTERRUPT (through /dev/fuse, also when the
// request came over a ring), and the request's context ends, so the
// caller can die. Without it the killed caller waits for the answer.
func TestInterruptReachesTheRequest(t *testing.T) {
	testenv.RequireRootFUSE(t)
	mnt := t.TempDir()
	root := &slowRoot{entered: make(chan struct{}), interrupted: make(chan struct{}), release: make(chan struct{})}
	zero := time.Duration(0)
	opts := &fusefs.Options{
		MountOptions: fuse.MountOptions{FsName: "warren:slow", Name: "warren", MaxWrite: 1 << 20, AllowOther: true},
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
	}
	transport := testTransport
	if transport == "" {
		transport = TransportClassic
	}
	server, mntFd, err := serveAt(root, &mnt, nil, opts, transport, false, hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn}))
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	if transport != TransportAuto && server.transport != transport {
		t.Fatalf("served on %q, want %q", server.transport, transport)
	}
	t.Cleanup(func() {
		close(root.release)
		DetachFd(mntFd)
		unix.Close(mntFd)
		server.Wait()
	})
	cmd := exec.Command("stat", filepath.Join(mnt, "slow"))
	cmd.Dir = "/"
	must(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-root.entered:
	case err := <-exited:
		t.Fatalf("stat ended before its lookup reached the filesystem: %v", err)
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the lookup never reached the filesystem")
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-root.interrupted:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed caller's request was not interrupted within 10s")
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed caller did not end once its request was")
	}
}

// TestURingLockWaitsLeaveTheRingsServing: more callers wait for a lock
// than the rings have workers and entries; the locks are the kernel's on
// a mount on the rings, so no wait reaches the daemon, the mount goes on
// serving, and each waiter gets the lock in turn once it is let go.
func TestURingLockWaitsLeaveTheRingsServing(t *testing.T) {
	requireURing(t)
	_, mnt, m := serveURing(t, Options{})
	path := filepath.Join(mnt, "locked")
	must(t, os.WriteFile(path, []byte("x"), 0o644))
	holder, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer holder.Close()
	whole := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	must(t, unix.FcntlFlock(holder.Fd(), unix.F_OFD_SETLK, &whole))

	waiters := 3 * len(m.uring.workers)
	started := make(chan struct{}, waiters)
	got := make(chan error, waiters)
	for range waiters {
		go func() {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				got <- err
				return
			}
			defer f.Close()
			started <- struct{}{}
			lk := unix.Flock_t{Type: unix.F_WRLCK}
			if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk); err != nil {
				got <- fmt.Errorf("wait for the lock: %w", err)
				return
			}
			lk.Type = unix.F_UNLCK
			got <- unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		}()
	}
	for range waiters {
		select {
		case <-started:
		case err := <-got:
			t.Fatalf("a waiter ended before the lock was let go: %v", err)
		}
	}
	for i := range 50 {
		name := filepath.Join(mnt, fmt.Sprintf("f%d", i))
		must(t, os.WriteFile(name, []byte(name), 0o644))
		if b, err := os.ReadFile(name); err != nil || string(b) != name {
			t.Fatalf("read %s back while locks wait: %q, %v", name, b, err)
		}
	}
	if n := m.uring.lockRequests.Load(); n != 0 {
		t.Errorf("%d lock waits reached the daemon; the kernel keeps a ring mount's locks", n)
	}
	unlock := unix.Flock_t{Type: unix.F_UNLCK}
	must(t, unix.FcntlFlock(holder.Fd(), unix.F_OFD_SETLK, &unlock))
	for range waiters {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a lock waiter never got the lock")
		}
	}
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]Transport{"": TransportClassic, "classic": TransportClassic, "uring": TransportURing, "auto": TransportAuto} {
		if got, err := ParseTransport(in); err != nil || got != want {
			t.Errorf("ParseTransport(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"URING", "io_uring", "classic ", "uring,auto"} {
		if _, err := ParseTransport(in); err == nil {
			t.Errorf("ParseTransport(%q) took it", in)
		}
	}
}

// TestURingRefusedWhenOff: with the fuse module's enable_uring off, a
// mount asked on uring fails and says why, and one on auto is served the
// classic way.
func TestURingRefusedWhenOff(t *testing.T) {
	testenv.SetFUSEURing(t, false)

	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(backing, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	if m, err := Serve(context.Background(), backing, mnt, Options{Transport: TransportURing}); err == nil {
		m.Close()
		t.Fatal("served on uring with enable_uring off")
	} else if !errors.Is(err, errURingRefused) || !strings.Contains(err.Error(), "enable_uring") {
		t.Fatalf("refusal %q does not say why", err)
	}
	if mounted, err := IsMountpoint(mnt); err != nil || mounted {
		t.Fatalf("the refused mount is left at %s (%v)", mnt, err)
	}
	m, err := Serve(context.Background(), backing, mnt, Options{Transport: TransportAuto})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	if m.Transport() != TransportClassic {
		t.Fatalf("auto took %q with enable_uring off", m.Transport())
	}
	must(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("classic"), 0o644))
}
