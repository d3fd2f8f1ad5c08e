package metrics

import (
	"bufio"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/threadlimit"
	"warren/meta"
)

// figures are fixed figures, each a different number.
func figures() Figures {
	return Figures{
		Threads: func() (int, int) { return 7, 2 },
		Admission: func() threadlimit.Headroom {
			return threadlimit.Headroom{Threads: 9, MaxThreads: 100, MaxThreadsPerTenant: 50, TenantMost: 6,
				FDs: 300, FDLimit: 4000, FDReserve: 1000, RSS: 1 << 20, MemoryCap: 3 << 20,
				OSThreads: 20, OSThreadLimit: 500, OSThreadReserve: 100}
		},
		Jails:       func() int { return 3 },
		JailsLive:   func() (int, int) { return 4, 64 },
		JobsRunning: func() int { return 5 },
		Events:      func() (int, uint64) { return 11, 12 },
		Lease:       func() (bool, time.Time) { return true, time.Time{} },
		Descriptors: func() fs.DescriptorStats { return fs.DescriptorStats{Open: 13, Budget: 14, Nodes: 15, Files: 16} },
		LockWaits:   func() int { return 17 },
		RestoreLeft: func() int { return 18 },
		ImageBytes:  func() int64 { return 1 << 20 },
		// A server with a snapshot store (--snapshots s3://...): two
		// checkpoints of 19 bytes waiting, the store up.
		SnapshotUploads:     func() (int, int64, bool) { return 2, 19, true },
		SnapshotCollections: func() (int64, int64, int64) { return 3, 1, 4096 },
	}
}

// scrape answers GET /metrics through the handler the route table calls,
// and returns each sample's value by its series ("name{labels}").
func scrape(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	a, err := NewHandlers(m).Metrics(httptest.NewRequest(http.MethodGet, "/metrics", nil), call.Params{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	a.(call.Streamer).ServeStream(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsFigures: the series of state read their figures at each
// scrape, and the counters of every kind, fate and result are there from
// the start, at zero.
func TestMetricsFigures(t *testing.T) {
	m := New()
	m.Watch(figures())
	got := scrape(t, m)
	want := map[string]float64{
		`warren_threads{state="mounted"}`:                          7,
		`warren_threads{state="failed"}`:                           2,
		`warren_jails`:                                             3,
		`warren_jails_max`:                                         64,
		`warren_admitted_threads`:                                  9,
		`warren_max_threads`:                                       100,
		`warren_max_threads_per_tenant`:                            50,
		`warren_tenant_threads_most`:                               6,
		`warren_admission_open`:                                    1,
		`warren_admission_headroom{resource="threads"}`:            91,
		`warren_admission_headroom{resource="tenant_threads"}`:     44,
		`warren_admission_headroom{resource="descriptors"}`:        2700,
		`warren_admission_headroom{resource="memory_bytes"}`:       2 << 20,
		`warren_admission_headroom{resource="os_threads"}`:         380,
		`warren_jobs_running`:                                      5,
		`warren_event_subscribers`:                                 11,
		`warren_events_missed_total`:                               12,
		`warren_lease_valid`:                                       1,
		`warren_lease_remaining_seconds`:                           0,
		`warren_fs_descriptors_open`:                               13,
		`warren_fs_descriptors_budget`:                             14,
		`warren_fs_nodes`:                                          15,
		`warren_fs_open_files`:                                     16,
		`warren_fs_lock_waits`:                                     17,
		`warren_restore_threads_left`:                              18,
		`warren_snapshot_upload_backlog`:                           2,
		`warren_snapshot_upload_backlog_bytes`:                     19,
		`warren_snapshot_store_up`:                                 1,
		`warren_snapshot_store_collections_total{result="ok"}`:     3,
		`warren_snapshot_store_collections_total{result="failed"}`: 1,
		`warren_snapshot_store_freed_bytes_total`:                  4096,
		`warren_refusals_total{kind="escape"}`:                     0,
		`warren_refusals_total{kind="stale"}`:                      0,
		`warren_refusals_total{kind="quota"}`:                      0,
		`warren_refusals_total{kind="pinned"}`:                     0,
		`warren_job_output_bytes_total{fate="kept"}`:               0,
		`warren_job_output_bytes_total{fate="dropped"}`:            0,
		`warren_jail_starts_total{result="ok"}`:                    0,
		`warren_jail_starts_total{result="error"}`:                 0,
		`warren_fuse_request_duration_seconds_count{op="write"}`:   0,
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			t.Errorf("%s = %v (served: %v), want %v", k, v, ok, want[k])
		}
	}
}

// TestMetricsMove: each method moves its series, by what it was told.
func TestMetricsMove(t *testing.T) {
	m := New()
	m.Watch(figures())
	m.APIError(api.CodeOutside)
	m.APIError(api.CodeFenced)
	m.APIError(api.CodeNotFound)
	m.Refused(RefusedStale)
	m.ExecEnded(time.Second)
	m.JobStarted()
	m.JobEnded(100, 30)
	m.JailStarted(time.Second, nil)
	m.JailStarted(0, errors.New("no"))
	m.Fenced(3)
	m.ObserveStore("GetBinding", time.Millisecond, nil)
	m.ObserveStore("GetBinding", time.Millisecond, meta.ErrNotFound)
	m.ObserveStore("GetBinding", time.Millisecond, errors.New("down"))
	obs := m.FUSEObserver(false)
	obs("write", time.Millisecond)
	obs("someday", time.Millisecond) // an op fs does not name yet
	if m.FUSEObserver(true) != nil {
		t.Errorf("FUSEObserver(true): want nil, no observer")
	}
	got := scrape(t, m)
	want := map[string]float64{
		`warren_api_errors_total{code="outside"}`:                   1,
		`warren_api_errors_total{code="fenced"}`:                    1,
		`warren_api_errors_total{code="not_found"}`:                 1,
		`warren_refusals_total{kind="escape"}`:                      1,
		`warren_refusals_total{kind="pinned"}`:                      1,
		`warren_refusals_total{kind="stale"}`:                       1,
		`warren_refusals_total{kind="quota"}`:                       0,
		`warren_execs_total`:                                        1,
		`warren_exec_duration_seconds_count`:                        1,
		`warren_jobs_started_total`:                                 1,
		`warren_job_output_bytes_total{fate="kept"}`:                70,
		`warren_job_output_bytes_total{fate="dropped"}`:             30,
		`warren_jail_starts_total{result="ok"}`:                     1,
		`warren_jail_starts_total{result="error"}`:                  1,
		`warren_jail_start_duration_seconds_count`:                  1,
		`warren_lease_fences_total`:                                 1,
		`warren_fenced_threads_total`:                               3,
		`warren_store_call_duration_seconds_count{op="GetBinding"}`: 3,
		`warren_store_errors_total{op="GetBinding"}`:                1,
		`warren_fuse_request_duration_seconds_count{op="write"}`:    1,
		`warren_fuse_request_duration_seconds_count{op="someday"}`:  1,
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := got[k]; !ok || v != want[k] {
			t.Errorf("%s = %v (served: %v), want %v", k, v, ok, want[k])
		}
	}
}

// TestMetricsDocumented: every warren_ series served is in the table of
// docs/operations.md, and every one the table lists is served.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `warren_") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, name := range regexp.MustCompile("`(warren_[a-z_]+)`").FindAllStringSubmatch(first, -1) {
			documented[name[1]] = true
		}
	}
	m := New()
	m.Watch(figures())
	// These series are made at their first label.
	m.ObserveStore("GetBinding", time.Millisecond, errors.New("down"))
	m.APIError(api.CodeInvalid)
	served := map[string]bool{}
	for k := range scrape(t, m) {
		name := k[:strings.IndexAny(k+"{", "{")]
		if !strings.HasPrefix(name, "warren_") {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && documented[base] {
				name = base
			}
		}
		served[name] = true
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("%s is served but not in docs/operations.md", name)
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("docs/operations.md lists %s, which is not served", name)
		}
	}
}
