package fs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv names, in a re-executed test binary, the helper it runs
// instead of the tests.
const childEnv = "WARREN_FS_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "mmap-write":
		if err := mmapWrite(os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "unknown child helper", os.Getenv(childEnv))
		os.Exit(2)
	}
	// Mounts served by this process hold a descriptor per known inode.
	if err := RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// inChild runs helper in a new process of this test binary, started
// outside every mount. A process must never fault in pages of a mount it
// serves itself: the faulting thread cannot be stopped by the garbage
// collector, and the fault waits for a FUSE reply that the stopped world
// cannot send.
func inChild(helper string, args ...string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+helper)
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

// mmapWrite maps the first 8 KiB of path shared, writes into its second
// page and syncs it.
func mmapWrite(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	if !bytes.Equal(mem[:4], []byte("aaaa")) {
		return fmt.Errorf("mapped page reads %q, want aaaa", mem[:4])
	}
	copy(mem[4096:], "written through mmap")
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	return unix.Munmap(mem)
}
