package meta_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibrary keeps meta the interface alone: what
// merely uses a store (a client, a lease's tests) must not link an engine
// (Badger, etcd, gRPC) or a logger by importing it. The engines live in
// meta/badger and meta/etcd.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "warren/meta").Output()
	if err != nil {
		t.Fatalf("go list -deps warren/meta: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "warren/meta" {
			t.Errorf("warren/meta depends on %s; it may import only the standard library", p)
		}
	}
}
