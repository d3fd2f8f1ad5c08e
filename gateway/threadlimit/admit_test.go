package threadlimit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/meta"
)

// fakeGauges reads what a test sets, and counts its readings.
type fakeGauges struct {
	fds, fdLimit int
	rss          int64
	threads      int
	err          error
	reads        int
}

func (f *fakeGauges) Descriptors() (int, int, error) {
	f.reads++
	return f.fds, f.fdLimit, f.err
}

func (f *fakeGauges) Memory() (int64, int, error) { return f.rss, f.threads, nil }

// roomy is a process far from every reserve of testConfig.
func roomy() *fakeGauges { return &fakeGauges{fds: 100, fdLimit: 20000, rss: 50 << 20, threads: 20} }

func testConfig(g Gauges) Config {
	return Config{MaxThreads: 3, MaxThreadsPerTenant: 2, FDReserve: 4000, MemoryCap: 1 << 30,
		OSThreadLimit: 10000, OSThreadReserve: 2000, Gauges: g, CacheFor: time.Nanosecond}
}

func newAdmitter(t *testing.T, cfg Config) *Admitter {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func key(tenant, thread string) meta.ThreadKey { return meta.ThreadKey{Tenant: tenant, Thread: thread} }

// limitOf returns the limit err names, "" for nil, and fails the test for
// an error that is not a Refusal matching api.ErrUnavailable.
func limitOf(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var r *Refusal
	if !errors.As(err, &r) || !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("got %v (%T), want a *Refusal matching api.ErrUnavailable", err, err)
	}
	return r.Limit
}

func TestThreadLimits(t *testing.T) {
	a := newAdmitter(t, testConfig(roomy()))
	steps := []struct {
		op        string // admit, release
		k         meta.ThreadKey
		wantLimit string
	}{
		{"admit", key("acme", "a1"), ""},
		{"admit", key("acme", "a2"), ""},
		{"admit", key("acme", "a3"), LimitPerTenant},
		{"admit", key("beta", "b1"), ""},
		{"admit", key("beta", "b2"), LimitThreads},
		// A thread that holds a slot is admitted at the limit.
		{"admit", key("acme", "a1"), ""},
		{"release", key("acme", "a1"), ""},
		{"release", key("acme", "a1"), ""}, // twice: nothing
		{"admit", key("beta", "b2"), ""},
		{"admit", key("acme", "a3"), LimitThreads},
	}
	for i, s := range steps {
		switch s.op {
		case "admit":
			if got := limitOf(t, a.Admit(s.k)); got != s.wantLimit {
				t.Errorf("step %d: Admit(%v): got limit %q, want %q", i, s.k, got, s.wantLimit)
			}
		case "release":
			a.Release(s.k)
		}
	}
	h := a.Headroom()
	if h.Threads != 3 || h.TenantMost != 2 || h.Refused == "" {
		t.Errorf("Headroom: got threads %d, busiest tenant %d, refused %q; want 3, 2 and a refusal", h.Threads, h.TenantMost, h.Refused)
	}
}

func TestMessagesNameTheLimit(t *testing.T) {
	a := newAdmitter(t, Config{MaxThreads: 1, MaxThreadsPerTenant: 1, MemoryCap: 1 << 30, OSThreadLimit: 10000, Gauges: roomy()})
	if err := a.Admit(key("acme", "a1")); err != nil {
		t.Fatal(err)
	}
	err := a.Admit(key("beta", "b1"))
	if want := "This server serves 1 threads, its limit (--max-threads); close idle threads or raise it."; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestReserves(t *testing.T) {
	cases := []struct {
		name      string
		set       func(*fakeGauges)
		wantLimit string
		wantIn    string
	}{
		{"roomy", func(*fakeGauges) {}, "", ""},
		{"descriptors at the reserve", func(g *fakeGauges) { g.fds = 16000 }, LimitDescriptors, "16000 of its 20000 descriptors"},
		{"descriptors just below", func(g *fakeGauges) { g.fds = 15999 }, "", ""},
		{"memory at the cap", func(g *fakeGauges) { g.rss = 1 << 30 }, LimitMemory, "its cap of 1024 MiB"},
		{"OS threads at the reserve", func(g *fakeGauges) { g.threads = 8000 }, LimitOSThreads, "8000 OS threads"},
		{"OS threads just below", func(g *fakeGauges) { g.threads = 7999 }, "", ""},
		// Never fail open.
		{"gauge error", func(g *fakeGauges) { g.err = errors.New("EMFILE") }, LimitGauges, "EMFILE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := roomy()
			c.set(g)
			a := newAdmitter(t, testConfig(g))
			err := a.Admit(key("acme", "a1"))
			if got := limitOf(t, err); got != c.wantLimit {
				t.Fatalf("got limit %q (%v), want %q", got, err, c.wantLimit)
			}
			if c.wantIn != "" && !strings.Contains(err.Error(), c.wantIn) {
				t.Errorf("got message %q, want it to hold %q", err, c.wantIn)
			}
			if c.wantLimit != "" {
				if h := a.Headroom(); h.Refused == "" || h.Threads != 0 {
					t.Errorf("Headroom: got refused %q and %d threads, want a refusal and none", h.Refused, h.Threads)
				}
			}
		})
	}
}

// TestHeldPassesReserves: a thread served already is never refused, even
// when the gauges cannot be read.
func TestHeldPassesReserves(t *testing.T) {
	g := roomy()
	a := newAdmitter(t, testConfig(g))
	a.Hold(key("acme", "restored"))
	g.err = errors.New("no /proc")
	if err := a.Admit(key("acme", "restored")); err != nil {
		t.Errorf("Admit of a held thread: %v", err)
	}
	if got := limitOf(t, a.Admit(key("acme", "new"))); got != LimitGauges {
		t.Errorf("Admit of a new thread: got limit %q, want %q", got, LimitGauges)
	}
}

func TestGaugesCached(t *testing.T) {
	g := roomy()
	now := time.Unix(1000, 0)
	cfg := testConfig(g)
	cfg.MaxThreads, cfg.MaxThreadsPerTenant = 100, 100
	cfg.CacheFor = time.Second
	cfg.Now = func() time.Time { return now }
	a := newAdmitter(t, cfg)
	for i := range 10 {
		if err := a.Admit(key("acme", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if g.reads != 1 {
		t.Errorf("10 binds within CacheFor: got %d readings, want 1", g.reads)
	}
	g.fds = 19000
	now = now.Add(time.Second)
	if got := limitOf(t, a.Admit(key("acme", "late"))); got != LimitDescriptors || g.reads != 2 {
		t.Errorf("after CacheFor: got limit %q after %d readings, want %q after 2", got, g.reads, LimitDescriptors)
	}
}

func TestNewRefusesNoRoom(t *testing.T) {
	for _, cfg := range []Config{
		{MaxThreads: 0, MaxThreadsPerTenant: 1, MemoryCap: 1, OSThreadLimit: 10},
		{MaxThreads: 1, MaxThreadsPerTenant: 1, MemoryCap: 0, OSThreadLimit: 10},
		{MaxThreads: 1, MaxThreadsPerTenant: 1, MemoryCap: 1, OSThreadLimit: 10, OSThreadReserve: 10},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): got no error", cfg)
		}
	}
}

// TestDefaults: on the machine of issue 29 (24 GiB, 20,000 descriptors)
// the default admits at least 10,000 threads.
func TestDefaults(t *testing.T) {
	m := Machine{MemoryBytes: 24 << 30, NoFile: 20000, MountMax: 100000, OSThreadLimit: 20000}
	if got := m.MaxThreads(); got != 16000 {
		t.Errorf("MaxThreads: got %d, want 16000 ((20000 - 4000) descriptors at 1 each)", got)
	}
	if got := m.OSThreadReserve(); got != 2000 {
		t.Errorf("OSThreadReserve: got %d, want 2000", got)
	}
	if got := m.MaxJails(); got != 384 {
		t.Errorf("MaxJails: got %d, want 384 (6 GiB at 16 MiB)", got)
	}
	small := Machine{MemoryBytes: 1 << 30, NoFile: 1024, MountMax: 100000, OSThreadLimit: 10000}
	if got := small.MaxThreads(); got != 768 {
		t.Errorf("small MaxThreads: got %d, want 768", got)
	}
	if _, err := New(m.Config(0, 0)); err != nil {
		t.Errorf("New(defaults): %v", err)
	}
}

func TestParseStat(t *testing.T) {
	// A command with spaces and parentheses of its own.
	line := "4242 (a) (b c) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 37 0 100 1000000 2500 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	rss, threads, err := parseStat([]byte(line), 4096)
	if err != nil || rss != 2500*4096 || threads != 37 {
		t.Errorf("got rss %d, threads %d, %v; want %d, 37", rss, threads, err, 2500*4096)
	}
	if _, _, err := parseStat([]byte("4242 (x S 1"), 4096); err == nil {
		t.Error("a cut line: got no error")
	}
}

func TestProcess(t *testing.T) {
	open, limit, err := Process().Descriptors()
	if err != nil || open < 3 || limit < open {
		t.Errorf("Descriptors: got %d of %d, %v", open, limit, err)
	}
	rss, threads, err := Process().Memory()
	if err != nil || rss <= 0 || threads < 1 {
		t.Errorf("Memory: got %d bytes, %d threads, %v", rss, threads, err)
	}
	if _, err := ReadMachine(10000); err != nil {
		t.Errorf("ReadMachine: %v", err)
	}
}
