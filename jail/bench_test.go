package jail

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"warren/internal/testenv"
)

// BenchmarkTrueInJail runs /bin/true in a warm jail; compare with
// BenchmarkTrueForkExec (go test -bench True ./jail).
func BenchmarkTrueInJail(b *testing.B) {
	j, err := Start(context.Background(), based(Config{Workspace: b.TempDir()}))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	env, _ := Env(nil, nil)
	b.ResetTimer()
	for b.Loop() {
		if code, err := j.Run(context.Background(), Cmd{Args: []string{"/bin/true"}, Env: env}); err != nil || code != 0 {
			b.Fatal(code, err)
		}
	}
}

// BenchmarkTrueForkExec runs /bin/true with a plain fork and exec.
func BenchmarkTrueForkExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartManyMounts starts a jail and runs its first command with
// many mounts in the daemon's namespace (WARREN_BENCH_MOUNTS, 2,000 by
// default; the gateway holds one per bound thread), forked from the
// daemon's namespace and from a Base, and reports both and their ratio
// (go test -bench StartManyMounts -benchtime 20x ./jail).
func BenchmarkStartManyMounts(b *testing.B) {
	testenv.RequireRoot(b)
	n := 2000
	if s := os.Getenv("WARREN_BENCH_MOUNTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("WARREN_BENCH_MOUNTS=%q: %v", s, err)
		}
	}
	h := newHostMounts(b, b.TempDir())
	h.add(b, n)
	base, err := NewBase(BaseConfig{Hide: []string{h.mnt}})
	if err != nil {
		b.Fatal(err)
	}
	defer base.Close()
	ws := b.TempDir()
	env, _ := Env(nil, nil)
	first := func(base *Base) time.Duration {
		start := time.Now()
		j, err := Start(context.Background(), Config{Workspace: ws, Base: base})
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		if code, err := j.Run(context.Background(), Cmd{Args: []string{"/bin/true"}, Env: env}); err != nil || code != 0 {
			b.Fatal(code, err)
		}
		return time.Since(start)
	}
	var plain, based []time.Duration
	for b.Loop() {
		plain = append(plain, first(nil))
		based = append(based, first(base))
	}
	p, q := median(plain), median(based)
	b.ReportMetric(float64(p.Microseconds())/1000, "plain-ms")
	b.ReportMetric(float64(q.Microseconds())/1000, "base-ms")
	b.ReportMetric(float64(p)/float64(q), "ratio")
	b.Logf("%d mounts on the host (base: %d): first command from the daemon's namespace %v, from the base %v (median of %d): %.1f×",
		h.count(b), base.Mounts(), p, q, len(plain), float64(p)/float64(q))
}

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
