package testenv

import (
	"fmt"
	"os"
	"strings"
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
	b, err := os.ReadFile(uringParam)
	if err != nil {
		return restore, fmt.Errorf("FUSE over io_uring: %w", err)
	}
	if strings.TrimSpace(string(b)) == "Y" {
		return restore, nil
	}
	if err := os.WriteFile(uringParam, []byte("Y"), 0); err != nil {
		return restore, fmt.Errorf("turn on FUSE over io_uring for the tests: %w", err)
	}
	return func() { os.WriteFile(uringParam, []byte("N"), 0) }, nil
}
