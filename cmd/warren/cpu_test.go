package main

import (
	"encoding/json"
	"strings"
	"testing"

	"warren/internal/testenv"
	"warren/meta"
)

// TestBindCPU: bind --cpu gives the thread its CPU bound, in thousandths
// of a CPU, and a bound out of range is refused by the gateway.
func TestBindCPU(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "bind", "--thread", "t1", "--cpu", "0.25", "--json")
	if code != 0 {
		t.Fatalf("bind --cpu 0.25: exit %d, %q", code, errOut)
	}
	var b meta.Binding
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Settings.CPUMillis != 250 {
		t.Errorf("bind --cpu 0.25: settings %+v (%v) of %s; want cpuMillis 250", b.Settings, err, out)
	}
	if code, _, errOut := runCLI(t, sock, "bind", "--thread", "t2", "--cpu", "5m"); code != 1 || !strings.Contains(errOut, "cpuMillis 5 is not between 10 and 1000000") {
		t.Errorf("bind --cpu 5m: exit %d, %q; want 1 and the reason", code, errOut)
	}
	if code, _, _ := runCLI(t, sock, "bind", "--thread", "t2", "--cpu", "lots"); code != 2 {
		t.Errorf("bind --cpu lots: exit %d, want 2", code)
	}
}
