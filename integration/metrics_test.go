package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/testenv"
)

// TestMetricsMove scrapes /metrics before and after a workload — a
// command, a job, files written through the mount, a refused escape — and
// checks that the series of each moved, by what the workload did. The
// same figures are served on the opt-in TCP listener, which serves
// nothing else.
func TestMetricsMove(t *testing.T) {
	port := freePort(t)
	d := newDaemon(t, "--metrics-addr", "127.0.0.1:"+strconv.Itoa(port))
	mnt := d.bind("default", "t")
	c := d.client()
	ctx := context.Background()

	before := scrape(t, d.opsGet(t, "/metrics"))

	// An event reader, counted while it reads.
	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go c.Events(evCtx, "default", "t", func(api.Event) error { return nil })
	for deadline := time.Now().Add(10 * time.Second); scrape(t, d.opsGet(t, "/metrics"))["warren_event_subscribers"] != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the event reader was never counted")
		}
		time.Sleep(10 * time.Millisecond)
	}

	for i := range 5 {
		must(t, os.WriteFile(filepath.Join(mnt, "f"+strconv.Itoa(i)), []byte("x"), 0o644))
	}
	var out strings.Builder
	if code, err := c.Exec(ctx, "default", "t", api.ExecRequest{Command: "cat f0"}, &out, io.Discard); err != nil || code != 0 {
		t.Fatalf("exec: %d, %v", code, err)
	}
	job, err := c.Spawn(ctx, "default", "t", api.SpawnRequest{Command: "head -c 100000 /dev/zero"})
	must(t, err)
	waitJobEnded(t, c, "t", job.ID)
	if _, err := c.Files().Read(ctx, "default", "t", api.ReadFileRequest{Path: "../../etc/passwd"}); err == nil {
		t.Fatal("a read outside the workspace was answered")
	}

	after := scrape(t, d.opsGet(t, "/metrics"))
	moved := func(series string, atLeast float64) {
		t.Helper()
		got, ok := after[series]
		if !ok {
			t.Errorf("%s: not served", series)
			return
		}
		if got-before[series] < atLeast {
			t.Errorf("%s: %v before, %v after; want it up by %v at least", series, before[series], got, atLeast)
		}
	}
	is := func(series string, want float64) {
		t.Helper()
		if got, ok := after[series]; !ok || got != want {
			t.Errorf("%s = %v (served: %v), want %v", series, got, ok, want)
		}
	}
	moved(`warren_fuse_request_duration_seconds_count{op="create"}`, 5)
	moved(`warren_fuse_request_duration_seconds_count{op="lookup"}`, 1)
	moved(`warren_execs_total`, 1)
	moved(`warren_exec_duration_seconds_count`, 1)
	moved(`warren_jail_starts_total{result="ok"}`, 1)
	moved(`warren_jail_start_duration_seconds_count`, 1)
	moved(`warren_jobs_started_total`, 1)
	moved(`warren_job_output_bytes_total{fate="kept"}`, 100000)
	moved(`warren_refusals_total{kind="escape"}`, 1)
	moved(`warren_api_errors_total{code="outside"}`, 1)
	moved(`warren_store_call_duration_seconds_count{op="CreateJob"}`, 1)
	is(`warren_refusals_total{kind="stale"}`, 0)
	for series, v := range after {
		if strings.HasPrefix(series, "warren_store_errors_total") && v != 0 {
			t.Errorf("%s = %v: the store failed under a plain workload", series, v)
		}
	}
	is(`warren_threads{state="mounted"}`, 1)
	is(`warren_jails`, 1)
	is(`warren_event_subscribers`, 1)
	is(`warren_lease_valid`, 1)
	for _, s := range []string{"warren_fs_descriptors_budget", "process_open_fds", "process_resident_memory_bytes", "go_goroutines"} {
		if after[s] <= 0 {
			t.Errorf("%s = %v, want a positive figure", s, after[s])
		}
	}

	// The TCP listener: the same endpoints, and nothing of the API.
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	tcp := scrape(t, httpGet(t, http.DefaultClient, base+"/metrics", http.StatusOK))
	if tcp[`warren_execs_total`] != after[`warren_execs_total`] {
		t.Errorf("the TCP listener serves warren_execs_total %v, the socket %v", tcp[`warren_execs_total`], after[`warren_execs_total`])
	}
	httpGet(t, http.DefaultClient, base+"/healthz", http.StatusOK)
	httpGet(t, http.DefaultClient, base+"/readyz", http.StatusOK)
	httpGet(t, http.DefaultClient, base+"/v1/threads", http.StatusNotFound)
}

// TestHealthAndReadiness: /healthz answers, and /readyz lists its checks,
// all passing on a server that runs as it should.
func TestHealthAndReadiness(t *testing.T) {
	d := newDaemon(t)
	var h api.Health
	must(t, json.Unmarshal([]byte(d.opsGet(t, "/healthz")), &h))
	if h.Status != "ok" {
		t.Errorf("/healthz: %+v", h)
	}
	rd := d.readiness(t)
	if !rd.Ready {
		t.Errorf("/readyz: not ready: %+v", rd)
	}
	var names []string
	for _, c := range rd.Checks {
		names = append(names, c.Name)
		if !c.OK || c.Detail == "" {
			t.Errorf("check %+v", c)
		}
	}
	if got := strings.Join(names, ","); got != "serving,store,lease,disk,descriptors,admission,restore" {
		t.Errorf("checks %s", got)
	}
	// Only GET.
	resp, err := d.opsClient().Post("http://warren/readyz", "application/json", nil)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %s", resp.Status)
	}
}

// TestReadyWhileStoreDownAndFenced stops the only etcd member under a
// server with a host id: /readyz says not ready as soon as the store
// stops answering, and the lease check fails once the lease ran out (the
// server is fenced), as warren_lease_valid says too. With etcd back the
// server gets a new lease and is ready again.
func TestReadyWhileStoreDownAndFenced(t *testing.T) {
	testenv.RequireRootFUSE(t)
	c := &hostCluster{t: t, etcd: testenv.EtcdCluster(t, 1)}
	d := c.host("web-1")
	if rd := d.readiness(t); !rd.Ready {
		t.Fatalf("before: not ready: %+v", rd)
	}
	c.etcd.Kill(t, 0)
	storeDown := waitReadiness(t, d, "the store check to fail", func(rd api.Readiness) bool { return !check(rd, "store").OK })
	if storeDown.Ready {
		t.Errorf("store down, yet ready: %+v", storeDown)
	}
	fenced := waitReadiness(t, d, "the lease check to fail", func(rd api.Readiness) bool { return !check(rd, "lease").OK })
	if fenced.Ready || !strings.Contains(check(fenced, "lease").Detail, "fenced") {
		t.Errorf("fenced, yet: %+v", fenced)
	}
	if m := scrape(t, d.opsGet(t, "/metrics")); m["warren_lease_valid"] != 0 || m[`warren_store_errors_total{op="Heartbeat"}`] < 1 {
		t.Errorf("fenced: warren_lease_valid %v, heartbeat errors %v", m["warren_lease_valid"], m[`warren_store_errors_total{op="Heartbeat"}`])
	}
	c.etcd.Restart(t, 0)
	waitReadiness(t, d, "ready again", func(rd api.Readiness) bool { return rd.Ready })
}

// check returns the check named name of rd.
func check(rd api.Readiness, name string) api.ReadyCheck {
	for _, c := range rd.Checks {
		if c.Name == name {
			return c
		}
	}
	return api.ReadyCheck{Name: name, Detail: "missing"}
}

// waitReadiness polls /readyz until ok accepts its answer, for 30 s.
func waitReadiness(t *testing.T, d *daemon, what string, ok func(api.Readiness) bool) api.Readiness {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rd := d.readiness(t)
		if ok(rd) {
			return rd
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s: %+v", what, rd)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readiness reads /readyz on the socket; its status must agree with its
// body.
func (d *daemon) readiness(t *testing.T) api.Readiness {
	t.Helper()
	resp, err := d.opsClient().Get("http://warren/readyz")
	must(t, err)
	defer resp.Body.Close()
	var rd api.Readiness
	must(t, json.NewDecoder(resp.Body).Decode(&rd))
	if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[rd.Ready]; resp.StatusCode != want {
		t.Errorf("/readyz answered %s with ready %v", resp.Status, rd.Ready)
	}
	return rd
}

// opsClient is an HTTP client on the daemon's socket.
func (d *daemon) opsClient() *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.socket)
	}}
	d.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// opsGet GETs path on the daemon's socket, which must answer 200.
func (d *daemon) opsGet(t *testing.T, path string) string {
	t.Helper()
	return httpGet(t, d.opsClient(), "http://warren"+path, http.StatusOK)
}

func httpGet(t testing.TB, c *http.Client, url string, status int) string {
	t.Helper()
	resp, err := c.Get(url)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, status, b)
	}
	return string(b)
}

// scrape parses Prometheus' text format into series (name and labels, as
// written) and values.
func scrape(t testing.TB, text string) map[string]float64 {
	t.Helper()
	m := make(map[string]float64)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m
}

// freePort returns a TCP port free on the loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
