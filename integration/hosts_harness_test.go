package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
)

// Timings of the servers of the hosts tests: short, so that a lease
// expires within the tests' budget. etcd grants no lease shorter than
// about 2 s.
const (
	renewEvery   = 200 * time.Millisecond
	expiresAfter = 2 * time.Second
)

// hostCluster is a 3-member etcd cluster that several warren servers
// share, each with a host id and a data folder of its own.
type hostCluster struct {
	t    testing.TB
	etcd *testenv.Etcd
}

func newHostCluster(t testing.TB) *hostCluster {
	t.Helper()
	testenv.RequireRootFUSE(t)
	// Registered before any daemon, so its cleanup (stopping etcd) runs
	// after theirs: a daemon stops while its store still answers.
	return &hostCluster{t: t, etcd: testenv.EtcdCluster(t, 3)}
}

// serveArgs are the flags of a server with host id id on the cluster.
func (c *hostCluster) serveArgs(id string, extra ...string) []string {
	return append([]string{
		"--store", "etcd",
		"--etcd-endpoints", strings.Join(c.etcd.Endpoints(), ","),
		"--etcd-prefix", "warren-it/",
		"--host-id", id,
		"--renew-every", renewEvery.String(),
		"--expires-after", expiresAfter.String(),
	}, extra...)
}

// host starts a server with host id id on the cluster.
func (c *hostCluster) host(id string, extra ...string) *daemon {
	c.t.Helper()
	return newDaemon(c.t, c.serveArgs(id, extra...)...)
}

// pid is the daemon's process id, 0 while it is down.
func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// pause stops the daemon with SIGSTOP, by its pid; resume continues it.
// The test's cleanup continues it if the test ends while it is stopped,
// so that the daemon's own cleanup can stop it with SIGTERM.
func (d *daemon) pause() {
	d.t.Helper()
	pid := d.pid()
	if pid == 0 {
		d.t.Fatal("pause of a daemon that is down")
	}
	d.t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	must(d.t, syscall.Kill(pid, syscall.SIGSTOP))
}

func (d *daemon) resume() {
	d.t.Helper()
	pid := d.pid()
	if pid == 0 {
		d.t.Fatal("resume of a daemon that is down")
	}
	must(d.t, syscall.Kill(pid, syscall.SIGCONT))
}

// client is an API client on the daemon's socket, closed with the test.
func (d *daemon) client() *client.Client {
	c := client.New(d.socket)
	d.t.Cleanup(c.CloseIdleConnections)
	return c
}

// cliResult is how one run of the CLI ended.
type cliResult struct {
	stdout, stderr string
	code           int  // exit code; -1 if it did not exit by itself
	timedOut       bool // it ran longer than its timeout and was killed
	took           time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d (timed out %v, %v): stdout %q, stderr %q", r.code, r.timedOut, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// run runs the CLI against this daemon, killing it (by its pid) after
// timeout. Unlike warren it keeps the exit code and stderr apart.
func (d *daemon) run(timeout time.Duration, args ...string) cliResult {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, warrenBin, args...)
	cmd.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start), timedOut: ctx.Err() != nil}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		r.code = 0
	case errors.As(err, &exitErr) && exitErr.Exited():
		r.code = exitErr.ExitCode()
	case errors.As(err, &exitErr):
		r.code = -1
	default:
		d.t.Fatalf("run warren %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// threadInfo binds thread (default tenant) and returns its record.
func (d *daemon) threadInfo(thread string) api.ThreadInfo {
	d.t.Helper()
	var b api.ThreadInfo
	out := d.mustWarren("bind", "--thread", thread, "--json")
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		d.t.Fatalf("bind --json: %v: %q", err, out)
	}
	return b
}

// listed returns the record of thread (default tenant) in `warren ls
// --json`, and whether it is there.
func (d *daemon) listed(thread string) (api.ThreadInfo, bool) {
	d.t.Helper()
	out := d.mustWarren("ls", "--json")
	var list []api.ThreadInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		var wrapped struct{ Bindings []api.ThreadInfo }
		if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
			d.t.Fatalf("ls --json: %v / %v: %q", err, err2, out)
		}
		list = wrapped.Bindings
	}
	for _, b := range list {
		if b.Tenant == api.DefaultTenant && b.Thread == thread {
			return b, true
		}
	}
	return api.ThreadInfo{}, false
}

// hostEntry is one host of `warren hosts --json`.
type hostEntry struct {
	ID       string    `json:"id"`
	LastBeat time.Time `json:"lastBeat"`
	Alive    bool      `json:"alive"`
}

// hosts lists the hosts through `warren hosts --json`.
func (d *daemon) hosts() map[string]hostEntry {
	d.t.Helper()
	out := d.mustWarren("hosts", "--json")
	var list []hostEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		var wrapped struct{ Hosts []hostEntry }
		if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
			d.t.Fatalf("hosts --json: %v / %v: %q", err, err2, out)
		}
		list = wrapped.Hosts
	}
	m := map[string]hostEntry{}
	for _, h := range list {
		m[h.ID] = h
	}
	return m
}

// jobs lists thread's jobs through `warren jobs --json`.
func (d *daemon) jobs(thread string) map[string]api.JobInfo {
	d.t.Helper()
	out := d.mustWarren("jobs", "--thread", thread, "--json")
	var list []api.JobInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		var wrapped struct{ Jobs []api.JobInfo }
		if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
			d.t.Fatalf("jobs --json: %v / %v: %q", err, err2, out)
		}
		list = wrapped.Jobs
	}
	m := map[string]api.JobInfo{}
	for _, j := range list {
		m[j.ID] = j
	}
	return m
}

// pinnedMessage is the refusal of a thread that host owns, root being its
// folder there.
func pinnedMessage(root, host string) string {
	return fmt.Sprintf("The workspace of this thread is %s on the host %s. Only that host can continue the thread.", root, host)
}

// goneMessage is the refusal of a thread whose folder, root on host, can
// no longer be reached.
func goneMessage(root, host string) string {
	return fmt.Sprintf("The workspace of this thread, %s on the host %s, is gone, so the tools cannot work on it.", root, host)
}

// apiError returns err as an API error answer, or nil if it is not one.
func apiError(err error) *api.APIError {
	var e *api.APIError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// execAPI runs command in thread (default tenant) through the API, with
// its own timeout, and returns its stdout.
func execAPI(c *client.Client, timeout time.Duration, thread, command string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	code, err := c.Exec(ctx, "", thread, api.ExecRequest{Command: command}, &out, nil)
	return out.String(), code, err
}

// eventLog collects the events of one subscription to a daemon's event
// stream.
type eventLog struct {
	mu     sync.Mutex
	events []api.Event
	err    error  // why the stream ended, once it has
	end    func() // ends the subscription and waits for its reader
}

// stop ends the subscription (the reader goes away) and waits until its
// reader ended; the events collected stay. Calling it again does nothing.
func (l *eventLog) stop() { l.end() }

// subscribe opens the daemon's event stream (for thread of the default
// tenant, or every thread if thread is "") and collects its events until
// the stream ends or the test does. The stream is registered when it
// returns: the gateway sends the answer's headers only then.
func (d *daemon) subscribe(thread string) *eventLog {
	d.t.Helper()
	q := url.Values{}
	if thread != "" {
		q.Set("thread", thread)
	}
	return d.subscribeQuery(q)
}

// subscribeQuery is subscribe with the query q (thread, tenant, prefix).
func (d *daemon) subscribeQuery(q url.Values) *eventLog {
	d.t.Helper()
	socket := d.socket
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", socket)
	}}
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://warren/v1/events?"+q.Encode(), nil)
	if err != nil {
		cancel()
		d.t.Fatal(err)
	}
	headers, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	stop := context.AfterFunc(headers, cancel) // no headers in time: give up
	resp, err := hc.Do(req)
	stop()
	if err != nil {
		cancel()
		d.t.Fatalf("open the event stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		d.t.Fatalf("open the event stream: %s: %s", resp.Status, b)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev api.Event
			if err := dec.Decode(&ev); err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	var once sync.Once
	l.end = func() {
		once.Do(func() {
			cancel()
			<-done
			tr.CloseIdleConnections()
		})
	}
	d.t.Cleanup(l.end)
	return l
}

// all returns the events collected so far.
func (l *eventLog) all() []api.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]api.Event(nil), l.events...)
}

// count counts the events collected so far that match.
func (l *eventLog) count(match func(api.Event) bool) int {
	n := 0
	for _, ev := range l.all() {
		if match(ev) {
			n++
		}
	}
	return n
}

// waitFor waits up to timeout for an event that matches.
func (l *eventLog) waitFor(timeout time.Duration, match func(api.Event) bool) (api.Event, bool) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		for _, ev := range l.all() {
			if match(ev) {
				return ev, true
			}
		}
		if time.Now().After(deadline) {
			return api.Event{}, false
		}
	}
}

func (l *eventLog) String() string {
	var b strings.Builder
	for _, ev := range l.all() {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// etcdLeader returns the index of the cluster's leader, asked of the
// members' status through etcd's JSON gateway.
func etcdLeader(t *testing.T, e *testenv.Etcd) int {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for i, ep := range e.Endpoints() {
			resp, err := hc.Post(ep+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
			if err != nil {
				continue
			}
			var st struct {
				Header struct {
					MemberID string `json:"member_id"`
				} `json:"header"`
				Leader string `json:"leader"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Leader != "" && st.Leader != "0" && st.Header.MemberID == st.Leader {
				return i
			}
		}
	}
	t.Fatal("no etcd member says it is the leader")
	return -1
}

// processesUnder returns the pids of the processes below ancestor (its
// descendants, in the host's pid namespace) whose command line is argv.
func processesUnder(ancestor int, argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || string(cmdline) != want {
			continue
		}
		for p := pid; p > 1; {
			p = parentPid(p)
			if p == ancestor {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// statFields are the fields of /proc/PID/stat after the command name
// (state, ppid, ...), nil if the process is gone. The name, in
// parentheses, may hold spaces: the fields start after its last ')'.
func statFields(pid int) []string {
	return statFieldsAt(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

// statFieldsAt is statFields of a stat file: a process's or one of its
// threads' (/proc/PID/task/TID/stat).
func statFieldsAt(path string) []string {
	stat, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(stat, ')')
	return strings.Fields(string(stat[i+1:]))
}

// parentPid reads a process's parent from /proc, 0 if it is gone.
func parentPid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z"
}
