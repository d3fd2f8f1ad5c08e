package fs

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/hashicorp/go-hclog"

	"warren/internal/testenv"
)

// mountTemp serves a fresh backing folder and returns (backing, mountpoint).
// The mount is closed when the test ends, also on failure.
func mountTemp(t testing.TB, opts Options) (string, string) {
	t.Helper()
	testenv.RequireRootFUSE(t)
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	mnt := filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn})
	}
	m, err := serveTest(context.Background(), backing, mnt, opts)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return backing, mnt
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// posixLeftOut lists the go-fuse posixtest cases that do not apply, and
// why. Both make symlinks with absolute targets, which the boundary
// refuses by design; TestSymlinkInside and TestOpenSymlinkRaceInside cover
// the same ground with targets inside the root.
var posixLeftOut = map[string]string{
	"SymlinkReadlink": "links to /foobar: absolute targets are refused",
	"OpenSymlinkRace": "links to /etc/passwd: absolute targets are refused",
}

// posixLeftOutURing lists the cases that do not apply to mounts served
// over io_uring, and why: their locks are the kernel's (serveNodes).
var posixLeftOutURing = map[string]string{
	"FcntlFlockLocksFile": "wants two opens of one process to conflict, as locks forwarded to the backing file as OFD locks do; " +
		"on the rings the kernel keeps POSIX locks, which belong to the process, and a process never conflicts with itself",
}

// TestPosix runs go-fuse's POSIX conformance cases, written by people who
// never saw this code, against a warren mount: with passthrough (the
// default as root) and without it (every read and write served here).
func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		if why, ok := posixLeftOut[name]; ok {
			t.Logf("left out %s: %s", name, why)
			continue
		}
		if why, ok := posixLeftOutURing[name]; ok && testTransport == TransportURing {
			t.Logf("left out on uring %s: %s", name, why)
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"passthrough", Options{}},
		{"served", Options{NoPassthrough: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			for _, name := range names {
				t.Run(name, func(t *testing.T) {
					_, mnt := mountTemp(t, mode.opts)
					posixtest.All[name](t, mnt)
				})
			}
		})
	}
}
