package snapshot

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// diskTemp is the temporary folder of the machine's disk, kept by TestMain
// for diskTempDir before it points TMPDIR elsewhere.
var diskTemp = os.TempDir()

// TestMain runs the tests' folders (t.TempDir) on a tmpfs where
// /dev/shm is one, unless SNAPSHOT_TEST_DISK=1: on this project's
// machines ext4 takes about 1 ms of kernel time to make an inode (file or
// folder), so a repository's 256 fan-out folders cost 0.3 s and a
// 20,000-file workspace 20 s, which would measure the disk, not the
// package. The tests that check the durable path on a real disk use
// diskTempDir.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if what := os.Getenv(childEnv); what != "" {
		return runChild(what)
	}
	var fs unix.Statfs_t
	if os.Getenv("SNAPSHOT_TEST_DISK") != "1" && unix.Statfs("/dev/shm", &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		dir, err := os.MkdirTemp("/dev/shm", "snapshot-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Setenv("TMPDIR", dir)
	}
	code := m.Run()
	if code == 0 {
		// Every Repo a test opened was closed, and Close waits for its
		// spreader: no goroutine of this package's may be left.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left:", err)
			return 1
		}
	}
	return code
}

// diskTempDir is t.TempDir on the machine's disk.
func diskTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(diskTemp, "snapshot-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
