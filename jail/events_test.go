package jail

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunEnded: a command's end says what the kernel saw: the signal that
// ended its process (none for one that exits 137 by itself), and the
// OOM kills and refused forks of the jail's cgroup while it ran.
func TestRunEnded(t *testing.T) {
	j, _ := startJailWith(t, Config{MemoryBytes: 64 << 20, MaxProcs: 64})
	if !strings.HasPrefix(j.Limits, "cgroup") {
		t.Fatalf("this test needs a jail with a cgroup: %s", j.Limits)
	}
	if j.MemoryLimit() != 64<<20 || j.ProcLimit() != 64 {
		t.Errorf("limits %d, %d; want the config's", j.MemoryLimit(), j.ProcLimit())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		script     string
		exit       int
		signal     syscall.Signal
		oom, forks bool
	}{
		{"exit 137", 137, 0, false, false},
		{"kill -9 $$", 137, syscall.SIGKILL, false, false},
		{`x=$(head -c 300000000 /dev/zero | tr '\0' a)`, 137, syscall.SIGKILL, true, false},
		{`sh -c 'i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait'`, 2, 0, false, true},
	} {
		end, err := j.RunEnded(ctx, Cmd{Script: tc.script})
		if err != nil || end.Exit != tc.exit || end.Signal != tc.signal || (end.OOMKills > 0) != tc.oom || (end.ForkFails > 0) != tc.forks {
			t.Errorf("%s: %+v, %v; want exit %d, signal %d, OOM kills %v, refused forks %v", tc.script, end, err, tc.exit, tc.signal, tc.oom, tc.forks)
		}
	}
}
