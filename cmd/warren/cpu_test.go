package main

import (
	"encoding/json"
	"strings"
	"testing"

	"warren/internal/testenv"
	"warren/meta"
)

func TestParseCPU(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int // -1: refused
	}{
		{"0.5", 500}, {"2", 2000}, {".25", 250}, {"1.125", 1125}, {"0.01", 10}, {"0", 0},
		{"500m", 500}, {"10m", 10}, {"1000000m", 1000000},
		{"0.0005", -1}, {"-1", -1}, {"+1", -1}, {"1e3", -1}, {"", -1}, {".", -1}, {"m", -1},
		{"1.5m", -1}, {"x", -1}, {"1,5", -1}, {"9999999", -1}, {"1234567890m", -1},
	} {
		got, err := parseCPU(c.in)
		if c.want < 0 {
			if err == nil {
				t.Errorf("parseCPU(%q) = %d, want refused", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseCPU(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// TestServeJailCPUUsage: a CPU bound serve cannot give is refused at its
// start, with the reason.
func TestServeJailCPUUsage(t *testing.T) {
	for _, c := range []struct{ value, why string }{
		{"0.005", "--jail-cpu is between 0.01 and 1000 CPUs, not 0.005"},
		{"5m", "--jail-cpu is between 0.01 and 1000 CPUs, not 0.005"},
		{"2000", "--jail-cpu is between 0.01 and 1000 CPUs, not 2000"},
		{"half", `"half" is not a number of CPUs`},
	} {
		code, _, errOut := runCLI(t, "", "serve", "--data", t.TempDir(), "--jail-cpu", c.value)
		if code != 2 || !strings.Contains(errOut, c.why) {
			t.Errorf("--jail-cpu %s: exit %d, stderr %q; want 2 and %q", c.value, code, errOut, c.why)
		}
	}
}

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
