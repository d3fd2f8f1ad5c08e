package testenv

import (
	"os/exec"

	"warren/internal/toolserver"
)

// StartTied starts cmd so that the kernel kills it (SIGKILL) when the
// test binary dies, cleanups or not (a -timeout panic, os.Exit, a kill):
// no server or load a test starts outlives it. See
// toolserver.StartTied, which it is.
func StartTied(cmd *exec.Cmd) error { return toolserver.StartTied(cmd) }
