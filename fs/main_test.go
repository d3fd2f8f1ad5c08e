package fs

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Mounts served by this process hold a descriptor per known inode.
	if err := RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
