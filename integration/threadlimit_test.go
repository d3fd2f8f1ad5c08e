package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/meta"
)

// refusedAt checks that err is a 503 "unavailable" whose message names
// flag.
func refusedAt(t *testing.T, what string, err error, flag string) {
	t.Helper()
	var apiErr *api.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: got %v, want a 503 naming %s", what, err, flag)
	}
	if apiErr.Status != http.StatusServiceUnavailable || apiErr.Code != api.CodeUnavailable || !strings.Contains(apiErr.Message, "("+flag+")") {
		t.Fatalf("%s: got %d %s %q, want 503 unavailable naming (%s)", what, apiErr.Status, apiErr.Code, apiErr.Message, flag)
	}
}

// TestAdmitThreadLimits: with --max-threads 3 --max-threads-per-tenant
// 2, a tenant's third thread is refused (a bind, and an exec that would
// bind), another tenant's is served, the fourth in all is refused,
// threads served keep working, and a closed or deleted thread frees its
// slot. /readyz's admission check and the metrics follow.
func TestAdmitThreadLimits(t *testing.T) {
	d := newDaemon(t, "--max-threads", "3", "--max-threads-per-tenant", "2")
	c := d.client()
	ctx := context.Background()

	for _, th := range []string{"a1", "a2"} {
		if _, err := c.Bind(ctx, "acme", th); err != nil {
			t.Fatalf("bind acme/%s: %v", th, err)
		}
	}
	_, err := c.Bind(ctx, "acme", "a3")
	refusedAt(t, "the tenant's third bind", err, "--max-threads-per-tenant")
	_, err = c.Exec(ctx, "acme", "a3", api.ExecRequest{Command: "true"}, io.Discard, io.Discard)
	refusedAt(t, "an exec that binds the tenant's third thread", err, "--max-threads-per-tenant")
	_, err = c.Files().Write(ctx, "acme", "a3", api.WriteFileRequest{Path: "f", Content: "x"})
	refusedAt(t, "a file write that binds the tenant's third thread", err, "--max-threads-per-tenant")
	if ti, err := c.Thread(ctx, "acme", "a3"); err == nil {
		t.Errorf("a refused thread has a binding: %+v", ti)
	}

	if _, err := c.Bind(ctx, "beta", "b1"); err != nil {
		t.Fatalf("another tenant's bind: %v", err)
	}
	_, err = c.Bind(ctx, "beta", "b2")
	refusedAt(t, "the fourth thread", err, "--max-threads")

	// The refusal says when to try again, on the wire.
	resp, err := d.opsClient().Post("http://warren/v1/tenants/beta/threads/b2/bind", "application/json", strings.NewReader("{}"))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("raw bind past the limit: %s, Retry-After %q; want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}

	// Threads served keep working at the limit.
	var out strings.Builder
	if code, err := c.Exec(ctx, "acme", "a1", api.ExecRequest{Command: "echo served > f; cat f"}, &out, io.Discard); err != nil || code != 0 || out.String() != "served\n" {
		t.Fatalf("exec in a served thread at the limit: %d %q %v", code, out.String(), err)
	}
	if _, err := c.Files().Write(ctx, "beta", "b1", api.WriteFileRequest{Path: "g", Content: "y"}); err != nil {
		t.Fatalf("write in a served thread at the limit: %v", err)
	}
	if _, err := c.Bind(ctx, "acme", "a2"); err != nil {
		t.Fatalf("bind again of a served thread at the limit: %v", err)
	}

	rd := d.readiness(t)
	adm := check(rd, "admission")
	if rd.Ready || adm.OK || !strings.Contains(adm.Detail, "threads 3 of 3 (--max-threads)") || !strings.Contains(adm.Detail, "busiest tenant 2 of 2") {
		t.Errorf("/readyz at the limit: ready %v, admission %+v; want not ready, the admission check failing with the counts", rd.Ready, adm)
	}
	m := scrape(t, d.opsGet(t, "/metrics"))
	for series, want := range map[string]float64{
		"warren_admitted_threads":                              3,
		"warren_max_threads":                                   3,
		"warren_max_threads_per_tenant":                        2,
		"warren_tenant_threads_most":                           2,
		"warren_admission_open":                                0,
		`warren_admission_headroom{resource="threads"}`:        0,
		`warren_api_errors_total{code="unavailable"}`:          5,
		`warren_admission_headroom{resource="tenant_threads"}`: 0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (served: %v), want %v", series, got, ok, want)
		}
	}
	for _, r := range []string{"descriptors", "memory_bytes", "os_threads"} {
		if got := m[`warren_admission_headroom{resource="`+r+`"}`]; got <= 0 {
			t.Errorf("headroom of %s = %v, want some", r, got)
		}
	}

	// warren doctor shows the headroom, from the admission check (the
	// doctor may fail other checks on this machine: only its row counts).
	doc, _ := d.warren("doctor", "--data", d.data)
	var row string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "headroom") {
			row = line
		}
	}
	if !strings.Contains(row, "warn") || !strings.Contains(row, "threads 3 of 3 (--max-threads)") {
		t.Errorf("warren doctor's headroom row at the limit: %q; all of it:\n%s", row, doc)
	}

	// A closed thread frees its slot; bound again, it needs one.
	if _, err := c.CloseThread(ctx, "acme", "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Bind(ctx, "beta", "b2"); err != nil {
		t.Fatalf("bind after a close freed a slot: %v", err)
	}
	_, err = c.Bind(ctx, "acme", "a1")
	refusedAt(t, "a closed thread bound again at the limit", err, "--max-threads")
	// So does a deleted one.
	if err := c.DeleteThread(ctx, "acme", "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Bind(ctx, "acme", "a1"); err != nil {
		t.Fatalf("bind again after a delete freed a slot: %v", err)
	}
	var got strings.Builder
	if code, err := c.Exec(ctx, "acme", "a1", api.ExecRequest{Command: "cat f"}, &got, io.Discard); err != nil || code != 0 || got.String() != "served\n" {
		t.Fatalf("the closed thread, bound again, lost its files: %d %q %v", code, got.String(), err)
	}

	// Below the limits again: ready.
	if _, err := c.CloseThread(ctx, "beta", "b2"); err != nil {
		t.Fatal(err)
	}
	rd = waitReadiness(t, d, "the admission check to pass", func(rd api.Readiness) bool { return rd.Ready })
	if adm := check(rd, "admission"); !strings.Contains(adm.Detail, "threads 2 of 3") {
		t.Errorf("admission below the limit: %+v", adm)
	}
	m = scrape(t, d.opsGet(t, "/metrics"))
	if m["warren_admitted_threads"] != 2 || m["warren_admission_open"] != 1 {
		t.Errorf("metrics below the limit: admitted %v, open %v; want 2, 1", m["warren_admitted_threads"], m["warren_admission_open"])
	}
}

// TestAdmitRestoredThreads: threads a former run served are served again
// at start whatever the limits (they hold their slots), and count against
// new ones.
func TestAdmitRestoredThreads(t *testing.T) {
	d := newDaemon(t, "--max-threads", "2")
	c := d.client()
	ctx := context.Background()
	for _, th := range []string{"r1", "r2"} {
		if _, err := c.Bind(ctx, "default", th); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	d.start()
	c = d.client()
	waitReadiness(t, d, "the restore", func(rd api.Readiness) bool { return rd.Restoring == 0 && !check(rd, "admission").OK })
	for _, th := range []string{"r1", "r2"} {
		if ti, err := c.Thread(ctx, "default", th); err != nil || !ti.Mounted {
			t.Fatalf("restored %s: %+v %v", th, ti, err)
		}
	}
	_, err := c.Bind(ctx, "default", "r3")
	refusedAt(t, "a new thread beside the restored ones", err, "--max-threads")
}

// TestMaxJails: with --max-jails 2, commands in three threads in turn
// all run, the least recently used idle jail making room (its thread
// stays bound, its files intact); with both jails busy (a job, a command
// held open) a third thread's command is refused with 503 naming the
// limit, and runs once the job ends.
func TestMaxJails(t *testing.T) {
	d := newDaemon(t, "--max-jails", "2")
	c := d.client()
	ctx := context.Background()
	threads := []string{"t1", "t2", "t3"}
	for _, th := range threads {
		mnt := d.bind("default", th)
		must(t, os.WriteFile(filepath.Join(mnt, "name"), []byte(th), 0o644))
	}
	run := func(th, command string) (string, error) {
		t.Helper()
		var out strings.Builder
		code, err := c.Exec(ctx, "default", th, api.ExecRequest{Command: command}, &out, io.Discard)
		if err == nil && code != 0 {
			t.Fatalf("exec %q in %s: exit %d", command, th, code)
		}
		return out.String(), err
	}
	jails := func() float64 { return scrape(t, d.opsGet(t, "/metrics"))["warren_jails"] }
	for _, th := range threads {
		if out, err := run(th, "cat name"); err != nil || out != th {
			t.Fatalf("exec in %s: %q %v", th, out, err)
		}
		if n := jails(); n > 2 {
			t.Fatalf("after %s: %v jails, past the bound of 2", th, n)
		}
	}
	if !strings.Contains(d.allLogs(), "jail reclaimed") {
		t.Error("no jail reclaimed was logged")
	}
	// t1's jail made room for t3's; t1 stays bound and mounted, and its
	// next command starts a jail anew (t2's, the least recently used, goes).
	if ti, err := c.Thread(ctx, "default", "t1"); err != nil || !ti.Mounted || ti.State != meta.StateBound {
		t.Fatalf("t1 after its jail was reclaimed: %+v %v", ti, err)
	}
	if out, err := run("t1", "cat name"); err != nil || out != "t1" {
		t.Fatalf("t1 after its jail was reclaimed: %q %v", out, err)
	}
	if m := scrape(t, d.opsGet(t, "/metrics")); m["warren_jails"] != 2 || m["warren_jails_max"] != 2 {
		t.Errorf("jails %v of %v, want 2 of 2", m["warren_jails"], m["warren_jails_max"])
	}

	// Both jails busy: a job in t1, a command held open in t2.
	job, err := c.Spawn(ctx, "default", "t1", api.SpawnRequest{Command: "sleep 1000"})
	must(t, err)
	held := make(chan string, 1)
	execDone := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "default", "t2", api.ExecRequest{Command: "sleep 1000"}, func(id string) { held <- id }, io.Discard, io.Discard)
		execDone <- err
	}()
	var execID string
	select {
	case execID = <-held:
	case err := <-execDone:
		t.Fatalf("the held command ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the held command never started")
	}
	_, err = run("t3", "cat name")
	refusedAt(t, "a command with every jail busy", err, "--max-jails")
	if ti, err := c.Thread(ctx, "default", "t3"); err != nil || !ti.Mounted {
		t.Errorf("t3, refused a jail, is no longer served: %+v %v", ti, err)
	}

	// The job ends: its jail is idle, and makes room.
	if _, err := c.StopJob(ctx, "default", "t1", job.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	waitJobEnded(t, c, "t1", job.ID)
	if out, err := run("t3", "cat name"); err != nil || out != "t3" {
		t.Fatalf("t3 once the job ended: %q %v", out, err)
	}
	if _, err := c.Signal(ctx, "default", "t2", execID, "KILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-execDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the held command did not end")
	}
}
