package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// hostMounts is a folder of the test's, in the test process's (the
// daemon's) own mount namespace, holding many binds under its mnt/, as a
// daemon's data folder holds its threads' mounts.
type hostMounts struct {
	top, mnt, src string
	n             int
}

// newHostMounts makes the folder, a mount of its own: private first, so
// that nothing made under it reaches the host's other namespaces, then
// shared with a peer group of its own, so that a copy of it that stayed
// shared would carry its unmounts back here. It is detached, with
// everything under it, when the test ends.
func newHostMounts(t testing.TB, parent string) *hostMounts {
	t.Helper()
	h := &hostMounts{top: filepath.Join(parent, "host")}
	h.mnt, h.src = filepath.Join(h.top, "mnt"), filepath.Join(h.top, "src")
	for _, d := range []string{h.mnt, h.src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(h.top, h.top, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", h.top, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(h.top, unix.MNT_DETACH); err != nil {
			t.Errorf("detach %s: %v", h.top, err)
		}
	})
	for _, flag := range []uintptr{unix.MS_PRIVATE, unix.MS_SHARED} {
		if err := unix.Mount("", h.top, "", flag, ""); err != nil {
			t.Fatalf("propagation of %s: %v", h.top, err)
		}
	}
	return h
}

// add binds src onto n more folders under mnt/.
func (h *hostMounts) add(t testing.TB, n int) {
	t.Helper()
	for range n {
		dir := filepath.Join(h.mnt, "t"+strconv.Itoa(h.n))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(h.src, dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s: %v", dir, err)
		}
		h.n++
	}
}

// count returns how many of the binds are mounted in the test's
// namespace.
func (h *hostMounts) count(t testing.TB) int {
	t.Helper()
	ms, err := readMountinfo("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if within(m.dir, h.mnt) {
			n++
		}
	}
	return n
}

// birthCounter is an init that counts the mounts of the namespace it was
// born in, before it builds anything: a script that writes the count, and
// how many of them lie under a folder, and then becomes the test binary's
// init.
type birthCounter struct {
	script, out string
}

func newBirthCounter(t testing.TB, under string) birthCounter {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := birthCounter{script: filepath.Join(dir, "init"), out: filepath.Join(dir, "count")}
	script := fmt.Sprintf(`#!/bin/sh
all=$(wc -l < /proc/self/mountinfo)
under=$(grep -cF ' %s/' /proc/self/mountinfo)
echo "$all $under" > %s
exec %s "$@"
`, under, c.out, self)
	if err := os.WriteFile(c.script, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// start starts a jail through the counter and returns the counts of its
// birth: every mount, and those under the folder.
func (c birthCounter) start(t testing.TB, cfg Config) (*Jail, int, int) {
	t.Helper()
	os.Remove(c.out)
	cfg.Binary = c.script
	if cfg.Workspace == "" {
		cfg.Workspace = t.TempDir()
		// The jail's user writes it, as the gateway gives it.
		if err := os.Chown(cfg.Workspace, NobodyID, NobodyID); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	b, err := os.ReadFile(c.out)
	if err != nil {
		t.Fatal(err)
	}
	var all, under int
	if _, err := fmt.Sscan(string(b), &all, &under); err != nil {
		t.Fatalf("the counter's output %q: %v", b, err)
	}
	return j, all, under
}

// TestBaseMountsIndependentOfHost: a jail forked from a Base is born in a
// namespace of a few mounts, however many the daemon holds, and none of
// the daemon's mounts under its mount folder, made before the base or
// after; a jail forked from the daemon's namespace is born with them all.
// Making the base and the jails detaches nothing on the host, and a
// jail's own view holds none of them either way.
func TestBaseMountsIndependentOfHost(t *testing.T) {
	testenv.RequireRoot(t)
	const n = 2000
	h := newHostMounts(t, t.TempDir())
	h.add(t, n)
	counter := newBirthCounter(t, h.mnt)

	_, plainAll, plainUnder := counter.start(t, Config{})
	t.Logf("from the daemon's namespace: born with %d mounts, %d of them the host's binds", plainAll, plainUnder)
	if plainUnder != n {
		t.Fatalf("from the daemon's namespace: born with %d of the %d binds; the counter does not count", plainUnder, n)
	}

	base, err := NewBase(BaseConfig{Binary: counter.script, Hide: []string{h.mnt}})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	if got := h.count(t); got != n {
		t.Fatalf("after the base was made, %d of the %d binds are left on the host", got, n)
	}
	j, all, under := counter.start(t, Config{Base: base})
	t.Logf("from the base (%d mounts): born with %d mounts, %d of them the host's binds", base.Mounts(), all, under)
	if under != 0 || all >= plainAll-n/2 || all > base.Mounts() {
		t.Errorf("from the base: born with %d mounts, %d of them the host's binds; want at most the base's %d, none of them", all, under, base.Mounts())
	}

	// More of the daemon's mounts change nothing for the next jail.
	h.add(t, n)
	_, again, under := counter.start(t, Config{Base: base})
	if again != all || under != 0 {
		t.Errorf("with %d more binds on the host: born with %d mounts (%d of them the host's binds), not %d", n, again, under, all)
	}
	if got := h.count(t); got != 2*n {
		t.Errorf("after the jails started, %d of the %d binds are left on the host", got, 2*n)
	}

	// The jail's own view, from the base: its root, no host bind.
	_, info, _ := run(t, j, "cat /proc/self/mountinfo")
	if strings.Contains(info, h.mnt) || strings.Contains(info, h.top) {
		t.Errorf("the jail sees the host's binds:\n%s", info)
	}
	lines := strings.Count(info, "\n")
	if lines > 40 {
		t.Errorf("the jail holds %d mounts:\n%s", lines, info)
	}
	// Its workspace is the one it was given, writable.
	if code, _, errOut := run(t, j, "echo hi > /workspace/f && cat /workspace/f"); code != 0 {
		t.Errorf("write the workspace: exit %d: %s", code, errOut)
	}
}

// TestBaseHides: a folder hidden from the base holds no mount in it, even
// inside a folder the base keeps with its mounts; the rest of the kept
// folder's mounts stay.
func TestBaseHides(t *testing.T) {
	testenv.RequireRoot(t)
	// Not under /tmp: the jail's root goes over it, and a read-only
	// folder there would not be found to bind.
	parent, err := os.MkdirTemp("/var/tmp", "jail-base-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	h := newHostMounts(t, parent)
	h.add(t, 10)
	kept := filepath.Join(h.top, "kept")
	if err := os.Mkdir(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(h.src, kept, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	counter := newBirthCounter(t, h.top)
	readOnly := append(DefaultReadOnly(), h.top)
	for _, c := range []struct {
		name      string
		hide      []string
		wantUnder int // mounts under h.top at the init's birth: the top itself, kept, the binds
	}{
		{"kept", nil, 2 + h.n},
		{"hidden", []string{h.mnt}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			base, err := NewBase(BaseConfig{ReadOnly: readOnly, Binary: counter.script, Hide: c.hide})
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			j, _, under := counter.start(t, Config{Base: base, ReadOnly: readOnly})
			if under != c.wantUnder-1 { // grep counts mounts under h.top/, not h.top itself
				t.Errorf("born with %d mounts under %s, want %d", under, h.top, c.wantUnder-1)
			}
			// The jail binds the kept folder, and with it its mounts:
			// the hidden ones are not there.
			_, info, _ := run(t, j, "cat /proc/self/mountinfo")
			if got, want := strings.Count(info, h.mnt+"/"), c.wantUnder-2; got != want {
				t.Errorf("the jail holds %d binds under %s, want %d:\n%s", got, h.mnt, want, info)
			}
		})
	}
}

// TestBaseRefuses: a jail the base was not made for is refused (its
// folders or its binary might not be there), and so is any once the base
// is closed.
func TestBaseRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	base, err := NewBase(BaseConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	ctx := context.Background()
	for _, cfg := range []Config{
		{ReadOnly: []string{"/usr", "/opt"}},
		{Binary: "/bin/true"},
	} {
		cfg.Workspace, cfg.Base = t.TempDir(), base
		if j, err := Start(ctx, cfg); err == nil {
			j.Close()
			t.Errorf("a jail with read-only folders %v and binary %q started from a base of neither", cfg.ReadOnly, cfg.Binary)
		}
	}
	if _, err := NewBase(BaseConfig{Hide: []string{"/"}}); err == nil {
		t.Error("a base hiding / was made")
	}
	if _, err := NewBase(BaseConfig{Binary: "relative/init"}); err == nil {
		t.Error("a base with a relative binary was made")
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j, err := Start(ctx, Config{Workspace: file, Base: base}); err == nil {
		j.Close()
		t.Error("a jail over a file started")
	}
	base.Close()
	j, err := Start(ctx, Config{Workspace: t.TempDir(), Base: base})
	if err == nil {
		j.Close()
		t.Fatal("a jail started from a closed base")
	}
	if !errors.Is(err, errBaseClosed) {
		t.Errorf("from a closed base: %v, want %v", err, errBaseClosed)
	}
}

// TestBaseWorkspaceFlags: the workspace a jail forked from a base gets
// has the mount flags the one bound by path gets (nosuid, nodev, and not
// the host view's nosymfollow), and is the same folder.
func TestBaseWorkspaceFlags(t *testing.T) {
	testenv.RequireRoot(t)
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, NobodyID, NobodyID); err != nil {
		t.Fatal(err)
	}
	// The host's mount of the workspace, as a thread's is: nosymfollow,
	// and noexec and noatime besides, to see what the jail keeps of them.
	if err := unix.Mount(ws, ws, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(ws, unix.MNT_DETACH) })
	if err := unix.Mount("", ws, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOATIME|unix.MS_NOSYMFOLLOW, ""); err != nil {
		t.Fatal(err)
	}
	base, err := NewBase(BaseConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	opts := map[string]string{}
	for name, b := range map[string]*Base{"by path": nil, "from a base": base} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		j, err := Start(ctx, Config{Workspace: ws, Base: b})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { j.Close() })
		code, out, errOut := run(t, j, `awk '$5 == "/workspace" { print $6 }' /proc/self/mountinfo; echo x > /workspace/`+strings.ReplaceAll(name, " ", "-"))
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		opts[name] = strings.TrimSpace(out)
		if _, err := os.Stat(filepath.Join(ws, strings.ReplaceAll(name, " ", "-"))); err != nil {
			t.Errorf("%s: the file written in the jail is not in the workspace: %v", name, err)
		}
	}
	t.Logf("workspace mount options: %v", opts)
	if opts["by path"] != opts["from a base"] {
		t.Errorf("workspace mount options: by path %q, from a base %q", opts["by path"], opts["from a base"])
	}
	if o := opts["from a base"]; !strings.Contains(o, "nosuid") || !strings.Contains(o, "nodev") || strings.Contains(o, "nosymfollow") {
		t.Errorf("workspace mount options from a base: %q, want nosuid and nodev, no nosymfollow", o)
	}
}

// TestBaseLeavesMainThread: the threads that make the base and fork from
// it are never the main thread, which the runtime never ends: left in the
// base, it would make /proc/self (mountinfo, which the daemon reads) show
// the base's mounts for good.
func TestBaseLeavesMainThread(t *testing.T) {
	testenv.RequireRoot(t)
	nsOf := func(path string) uint64 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	before := nsOf("/proc/self/ns/mnt")
	var bases []*Base
	defer func() {
		for _, b := range bases {
			b.Close()
		}
	}()
	for range 20 {
		b, err := NewBase(BaseConfig{})
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, b)
		for range 20 {
			if err := b.startIn(func() error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := nsOf("/proc/self/ns/mnt"); after != before {
		t.Fatalf("the main thread's mount namespace changed from %d to %d", before, after)
	}
}
