package replica

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// TestMain runs the tests' folders (t.TempDir) on a tmpfs where /dev/shm
// is one, as package snapshot's tests do: the workspaces of 20,000 files
// the tests build would measure the disk's inode costs, not this package.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var fs unix.Statfs_t
	if unix.Statfs("/dev/shm", &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		dir, err := os.MkdirTemp("/dev/shm", "replica-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Setenv("TMPDIR", dir)
	}
	code := m.Run()
	if code == 0 {
		// Every Upload and Fetch waits for its goroutines, every Repo was
		// closed: none may be left (the HTTP client's idle connections are
		// not this package's).
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left:", err)
			return 1
		}
	}
	return code
}
