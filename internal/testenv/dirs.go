package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LongNames returns n folder names of 250 bytes each, told apart by their
// first three: nested, they make a path far past PATH_MAX.
func LongNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%03d", i) + strings.Repeat("n", 247)
	}
	return names
}

// NestedDirs makes (if missing) the nested folders names below dir with
// fd-relative calls, so their joined path may exceed PATH_MAX, and returns
// an O_PATH descriptor of dir and of each, closed when the test ends.
func NestedDirs(t testing.TB, dir string, names []string) []int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	fds := []int{fd}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	for _, name := range names {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			t.Fatalf("mkdir %.8s...: %v", name, err)
		}
		fd, err = unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open %.8s...: %v", name, err)
		}
		fds = append(fds, fd)
	}
	return fds
}
