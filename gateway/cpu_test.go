package gateway

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/testenv"
	"warren/meta"
)

// TestExecCPUSetting: a thread's cpuMillis bounds its jail's CPU time, the
// gateway's JailCPUMillis is the default of threads without one, a bound
// out of range is refused, and a new bound is refused while the jail runs
// (it would need another jail) and applies once it is closed.
func TestExecCPUSetting(t *testing.T) {
	testenv.RequireCommand(t, "perl")
	env := startEnv(t, Config{JailCPUMillis: 300})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c

	for _, bad := range []int{MaxCPUMillis + 1, 5, -1} {
		if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{CPUMillis: bad}); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("cpuMillis %d: %v, want invalid", bad, err)
		}
	}

	// A loop of the thread's jail gets no more than its bound of the CPU.
	// Only the bar above counts: a busy machine gives it less, never more.
	settings := meta.Settings{CPUMillis: 50}
	if _, err := c.BindWith(ctx, "acme", "t1", settings); err != nil {
		t.Fatal(err)
	}
	const spin = 1.5
	var out bytes.Buffer
	code, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: `perl -MTime::HiRes=time -e '$e = time + ` +
		strconv.FormatFloat(spin, 'f', -1, 64) + `; 1 while time < $e; @t = times; printf "%.3f\n", $t[0] + $t[1]'`}, &out, nil)
	if err != nil || code != 0 {
		t.Fatalf("spin: exit %d, %v: %q", code, err, out.String())
	}
	cpu, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if err != nil {
		t.Fatalf("spin: %q", out.String())
	}
	t.Logf("a loop bounded to 0.05 CPU got %.3f of a CPU", cpu/spin)
	if cpu/spin > 0.1 {
		t.Errorf("a loop of a thread bounded to 0.05 CPU got %.3f of a CPU", cpu/spin)
	}
	if !strings.Contains(env.logBuf.String(), "1024 processes, 0.05 CPUs") {
		t.Errorf("the jail's limits are not the thread's: %s", env.logBuf.String())
	}

	// Another bound would need another jail: refused while it runs.
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{CPUMillis: 500}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a new CPU bound for a running jail: %v, want conflict", err)
	}
	if ti, err := c.Thread(ctx, "acme", "t1"); err != nil || !reflect.DeepEqual(ti.Settings, settings) {
		t.Errorf("stored settings %+v (%v), want %+v", ti.Settings, err, settings)
	}
	// Once the jail is closed, the thread takes a new bound, and a thread
	// without one gets the gateway's.
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{}); err != nil {
		t.Fatal(err)
	}
	if code, err := c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: "true"}, nil, nil); err != nil || code != 0 {
		t.Fatalf("exec: exit %d, %v", code, err)
	}
	if !strings.Contains(env.logBuf.String(), "1024 processes, 0.3 CPUs") {
		t.Errorf("the jail of a thread without a bound has not the gateway's: %s", env.logBuf.String())
	}
}

// TestConfigCPUBound: a gateway refuses to start with a CPU bound no jail
// can have.
func TestConfigCPUBound(t *testing.T) {
	for _, m := range []int{5, -1, MaxCPUMillis + 1} {
		cfg := Config{DataDir: t.TempDir(), Store: newStore(t), JailCPUMillis: m}
		if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "CPU") {
			t.Errorf("JailCPUMillis %d: %v, want refused", m, err)
		}
	}
}
