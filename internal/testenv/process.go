package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// OSThreads counts the test process's OS threads (Threads: of
// /proc/self/status): what a test of "no OS thread per ..." counts.
func OSThreads(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}
