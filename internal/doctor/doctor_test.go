package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/diskimage"
	"warren/internal/testenv"
)

// fakeHost is a host with every feature, in a folder of the test's own:
// each test takes one away.
func fakeHost(t *testing.T) Host {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/sys/kernel/osrelease":               "6.18.0-1-amd64",
		"proc/sys/kernel/seccomp/actions_avail":   "kill_process kill_thread trap errno user_notif trace log allow",
		"proc/sys/user/max_user_namespaces":       "96364",
		"sys/fs/cgroup/cgroup.controllers":        "cpuset cpu io memory pids",
		"etc/group":                               "root:x:0:\nwarren:x:998:alice,bob\n",
		"sys/module/fuse/parameters/enable_uring": "Y",
		"dev/loop-control":                        "",
		"proc/sys/net/ipv4/ip_forward":            "1",
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A character device for /dev/fuse needs mknod, which needs root; a
	// test that cannot make one says so.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "dev/fuse"), unix.S_IFCHR|0o666, int(unix.Mkdev(10, 229))); err != nil {
		t.Logf("no /dev/fuse in the fake host (mknod: %v): its check fails there", err)
	}
	return Host{
		Root:        root,
		Euid:        0,
		LandlockABI: func() (int, error) { return 7, nil },
		NoFile:      func() (uint64, uint64, error) { return 1 << 20, 1 << 20, nil },
		FreeBytes:   func(string) (uint64, error) { return 100 << 30, nil },
		Chains: func() ([]Chain, error) {
			return []Chain{{Family: "inet", Table: "warren-0a1b2c", Name: "forward", Hook: "forward"}}, nil
		},
	}
}

func find(t *testing.T, rs []Result, name string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no check %q in %+v", name, rs)
	return Result{}
}

// TestAllThere: a host with every feature passes every check.
func TestAllThere(t *testing.T) {
	testenv.RequireRoot(t)                  // mknod of the fake /dev/fuse
	testenv.RequireCommand(t, "mkfs.btrfs") // for the disk image
	rs := Run(fakeHost(t), Options{DataDir: filepath.Join(t.TempDir(), "data"), SocketGroup: "warren"})
	for _, r := range rs {
		if r.Status != OK {
			t.Errorf("%s: %s: %s", r.Name, r.Status, r.Detail)
		}
	}
	if Failed(rs) {
		t.Error("Failed says a check failed")
	}
	if d := find(t, rs, "socket group").Detail; !strings.Contains(d, "998") {
		t.Errorf("socket group: %s", d)
	}
}

// TestMissing takes each feature away in turn: its check, and only its,
// reports it with a fix.
func TestMissing(t *testing.T) {
	testenv.RequireRoot(t) // mknod of the fake /dev/fuse
	for _, c := range []struct {
		check  string
		status Status
		opts   Options
		take   func(t *testing.T, h *Host)
	}{
		{"root", Fail, Options{}, func(t *testing.T, h *Host) { h.Euid = 1000 }},
		{"fuse", Fail, Options{}, func(t *testing.T, h *Host) { remove(t, h, "dev/fuse") }},
		{"fuse", Fail, Options{}, func(t *testing.T, h *Host) {
			remove(t, h, "dev/fuse")
			write(t, h, "dev/fuse", "a plain file")
		}},
		{"passthrough", Warn, Options{}, func(t *testing.T, h *Host) { write(t, h, "proc/sys/kernel/osrelease", "6.1.0-13-amd64") }},
		{"fuse io_uring", Warn, Options{}, func(t *testing.T, h *Host) { write(t, h, "sys/module/fuse/parameters/enable_uring", "N") }},
		{"fuse io_uring", Warn, Options{}, func(t *testing.T, h *Host) { remove(t, h, "sys/module/fuse/parameters/enable_uring") }},
		{"landlock", Warn, Options{}, func(t *testing.T, h *Host) {
			h.LandlockABI = func() (int, error) { return 0, unix.EOPNOTSUPP }
		}},
		{"seccomp", Fail, Options{}, func(t *testing.T, h *Host) { remove(t, h, "proc/sys/kernel/seccomp/actions_avail") }},
		{"namespaces", Warn, Options{}, func(t *testing.T, h *Host) { write(t, h, "proc/sys/user/max_user_namespaces", "0") }},
		{"namespaces", Fail, Options{}, func(t *testing.T, h *Host) { remove(t, h, "proc/sys/user/max_user_namespaces") }},
		{"cgroups", Warn, Options{}, func(t *testing.T, h *Host) { write(t, h, "sys/fs/cgroup/cgroup.controllers", "cpuset io") }},
		{"cgroups", Warn, Options{}, func(t *testing.T, h *Host) { remove(t, h, "sys/fs/cgroup/cgroup.controllers") }},
		{"descriptors", Warn, Options{}, func(t *testing.T, h *Host) {
			h.NoFile = func() (uint64, uint64, error) { return 1024, 4096, nil }
		}},
		{"disk", Fail, Options{DataDir: "/var/lib/warren"}, func(t *testing.T, h *Host) {
			h.FreeBytes = func(string) (uint64, error) { return 100 << 20, nil }
		}},
		{"disk", Fail, Options{DataDir: "/var/lib/warren"}, func(t *testing.T, h *Host) {
			h.FreeBytes = func(string) (uint64, error) { return 0, errors.New("input/output error") }
		}},
		{"socket group", Fail, Options{SocketGroup: "agents"}, func(t *testing.T, h *Host) {}},
		{"disk image", Warn, Options{}, func(t *testing.T, h *Host) { remove(t, h, "dev/loop-control") }},
		{"disk image", Warn, Options{DiskImage: diskimage.Options{Workspaces: "/srv/shared"}}, func(t *testing.T, h *Host) {}},
		{"disk image", Fail, Options{DiskImage: diskimage.Options{Mode: "maybe"}}, func(t *testing.T, h *Host) {}},
		{"ip forwarding", Warn, Options{}, func(t *testing.T, h *Host) { write(t, h, "proc/sys/net/ipv4/ip_forward", "0") }},
		{"egress firewall", Warn, Options{}, func(t *testing.T, h *Host) {
			h.Chains = func() ([]Chain, error) {
				return []Chain{{Family: "ip", Table: "filter", Name: "FORWARD", Hook: "forward", Drop: true}}, nil
			}
		}},
		{"egress firewall", Warn, Options{}, func(t *testing.T, h *Host) {
			h.Chains = func() ([]Chain, error) { return nil, unix.EPERM }
		}},
	} {
		t.Run(c.check, func(t *testing.T) {
			h := fakeHost(t)
			c.take(t, &h)
			rs := Run(h, c.opts)
			got := find(t, rs, c.check)
			if c.check == "disk image" && c.status == Warn && !strings.HasPrefix(got.Detail, "disk unprotected: ") {
				t.Errorf("disk image: %q; want it to say disk unprotected, and why", got.Detail)
			}
			if got.Status != c.status || got.Fix == "" {
				t.Errorf("%s: %s (%s), fix %q; want %s with a fix", c.check, got.Status, got.Detail, got.Fix, c.status)
			}
			for _, r := range rs {
				if r.Name != c.check && r.Status != OK {
					t.Errorf("%s also reported: %s: %s", r.Name, r.Status, r.Detail)
				}
			}
			if Failed(rs) != (c.status == Fail) {
				t.Errorf("Failed = %v with %s %s", Failed(rs), c.check, c.status)
			}
		})
	}
}

// TestThisMachine: the machine the tests run on (as root, in CI) has what
// the tests themselves need, so none of those checks fails here.
func TestThisMachine(t *testing.T) {
	testenv.RequireRoot(t) // the checks of a server run as root
	rs := Run(System(), Options{DataDir: t.TempDir(), MinFreeBytes: 1})
	for _, name := range []string{"root", "fuse", "seccomp", "namespaces", "disk", "socket group"} {
		if r := find(t, rs, name); r.Status == Fail {
			t.Errorf("%s: %s: %s", name, r.Status, r.Detail)
		}
	}
}

func TestKernelVersion(t *testing.T) {
	for rel, want := range map[string][2]int{"6.18.44-fc-v782": {6, 18}, "6.9": {6, 9}, "5.10.0-28-amd64": {5, 10}, "6.9rc1": {6, 9}, "junk": {0, 0}} {
		if a, b := kernelVersion(rel); a != want[0] || b != want[1] {
			t.Errorf("%q: %d.%d, want %v", rel, a, b, want)
		}
	}
}

func remove(t *testing.T, h *Host, p string) {
	t.Helper()
	if err := os.Remove(filepath.Join(h.Root, p)); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, h *Host, p, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.Root, p), []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHeadroom: the headroom row is the daemon's admission check; no
// daemon is no failure (the doctor runs before warren serve), one that
// refuses new threads a warning with a fix, and no row without a way to
// ask.
func TestHeadroom(t *testing.T) {
	ready := func(ok bool, detail string) func() (api.Readiness, error) {
		return func() (api.Readiness, error) {
			return api.Readiness{Ready: ok, Checks: []api.ReadyCheck{{Name: "store", OK: true}, {Name: "admission", OK: ok, Detail: detail}}}, nil
		}
	}
	cases := []struct {
		name       string
		ready      func() (api.Readiness, error)
		want       Status
		wantDetail string
	}{
		{"room", ready(true, "threads 2 of 3 (--max-threads)"), OK, "threads 2 of 3"},
		{"full", ready(false, "threads 3 of 3 (--max-threads); new threads refused"), Warn, "new threads refused"},
		{"no daemon", func() (api.Readiness, error) { return api.Readiness{}, fmt.Errorf("dial: %w", unix.ENOENT) }, OK, "no daemon serves"},
		{"nobody listens", func() (api.Readiness, error) { return api.Readiness{}, fmt.Errorf("dial: %w", unix.ECONNREFUSED) }, OK, "no daemon serves"},
		{"daemon errs", func() (api.Readiness, error) { return api.Readiness{}, errors.New("answer cut") }, Warn, "answer cut"},
		{"older daemon", func() (api.Readiness, error) { return api.Readiness{Ready: true}, nil }, Warn, "no admission check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := Host{Ready: c.ready}
			r := h.headroom()
			if r.Name != "headroom" || r.Status != c.want || !strings.Contains(r.Detail, c.wantDetail) || (r.Status != OK && r.Fix == "") {
				t.Errorf("got %+v, want %s with %q", r, c.want, c.wantDetail)
			}
		})
	}
	// Without Ready, Run has no headroom row; with it, the row comes last.
	h := fakeHost(t)
	rs := Run(h, Options{DataDir: t.TempDir()})
	for _, r := range rs {
		if r.Name == "headroom" {
			t.Errorf("a headroom row without a daemon to ask: %+v", r)
		}
	}
	h.Ready = ready(true, "threads 0 of 3")
	if rs := Run(h, Options{DataDir: t.TempDir()}); rs[len(rs)-1].Name != "headroom" {
		t.Errorf("last row %+v, want headroom", rs[len(rs)-1])
	}
}
