package testenv

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TransportEnv names the FUSE transport the tests serve their mounts on
// (fs's mounts and the daemons' --fuse-transport): classic when unset.
// make test runs the fs suite and the kill -9 tests once on each.
const TransportEnv = "WARREN_FS_TRANSPORT"

// uringParam is the fuse module's switch for FUSE over io_uring.
const uringParam = "/sys/module/fuse/parameters/enable_uring"

// EnableFUSEURing turns the fuse module's enable_uring on for a run on
// the uring transport (TransportEnv=uring), as root (an operator's step
// otherwise), and returns what puts it back as it was.
func EnableFUSEURing() (restore func(), err error) {
	restore = func() {}
	if os.Getenv(TransportEnv) != "uring" || os.Geteuid() != 0 {
		return restore, nil
	}
	was, err := readURingParam()
	if err != nil {
		return restore, err
	}
	if was == "Y" {
		return restore, nil
	}
	if err := writeURingParam("Y"); err != nil {
		return restore, err
	}
	return func() { writeURingParam(was) }, nil
}

// SetFUSEURing sets the fuse module's enable_uring (on or off) for the
// rest of the test, as root, and puts back what it found when the test
// ends. A kernel without FUSE over io_uring cannot run the test
// (CannotRun: a failure under CI=true). The tests of a package run one
// after another, so no other test of it sees the change.
func SetFUSEURing(t testing.TB, on bool) {
	t.Helper()
	RequireRootFUSE(t)
	was, err := readURingParam()
	if errors.Is(err, os.ErrNotExist) {
		CannotRun(t, "this test needs FUSE over io_uring (Linux 6.14 with CONFIG_FUSE_IO_URING): %s is missing", uringParam)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	want := "N"
	if on {
		want = "Y"
	}
	if was == want {
		return
	}
	if err := writeURingParam(want); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := writeURingParam(was); err != nil {
			t.Errorf("put enable_uring back: %v", err)
		}
	})
}

// readURingParam returns enable_uring's value, "Y" or "N".
func readURingParam() (string, error) {
	b, err := os.ReadFile(uringParam)
	if err != nil {
		return "", fmt.Errorf("FUSE over io_uring: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeURingParam(v string) error {
	if err := os.WriteFile(uringParam, []byte(v), 0); err != nil {
		return fmt.Errorf("set %s to %s: %w", uringParam, v, err)
	}
	return nil
}
