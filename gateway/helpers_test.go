package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/fs"
	"warren/gateway/threads"
	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/badger"
)

// tapMounter is the real filesystem with a tap on it: every mount it
// reports is a real FUSE mount made by inner (fuseMounter unless a test
// wraps another real one, like leakyMounter). The tap counts the mounts
// made, records the DetachStale calls and every mount point, and can be
// told to fail a mount or an unmount, for the failures a healthy kernel
// does not produce on demand.
type tapMounter struct {
	inner threads.Mounter // nil means threads.FUSEMounter{}

	mu       sync.Mutex
	mounts   int             // Mount calls that succeeded
	detached []string        // DetachStale calls
	paths    map[string]bool // every mount point it mounted at
	// failMount and failClose, if set, decide per mount point whether the
	// operation fails. A failed Close leaves the real mount in place, as a
	// busy mount that cannot be detached would.
	failMount func(mountpoint string) error
	failClose func(mountpoint string) error
}

var _ threads.Mounter = (*tapMounter)(nil)

func (m *tapMounter) real() threads.Mounter {
	if m.inner == nil {
		return threads.FUSEMounter{}
	}
	return m.inner
}

func (m *tapMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	m.mu.Lock()
	fail := m.failMount
	m.mu.Unlock()
	if fail != nil {
		if err := fail(mountpoint); err != nil {
			return nil, err
		}
	}
	c, err := m.real().Mount(ctx, backing, mountpoint, opts)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mounts++
	if m.paths == nil {
		m.paths = make(map[string]bool)
	}
	m.paths[mountpoint] = true
	return &tapMount{Closer: c, m: m, path: mountpoint}, nil
}

func (m *tapMounter) DetachStale(mountpoint string) error {
	m.mu.Lock()
	m.detached = append(m.detached, mountpoint)
	m.mu.Unlock()
	return m.real().DetachStale(mountpoint)
}

// setFailMount and setFailClose set (or, with nil, clear) the faults.
func (m *tapMounter) setFailMount(f func(string) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failMount = f
}

func (m *tapMounter) setFailClose(f func(string) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failClose = f
}

// made returns how many mounts it made.
func (m *tapMounter) made() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mounts
}

func (m *tapMounter) detachedPaths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.detached)
}

func (m *tapMounter) mountpoints() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.paths))
}

// tapMount is a real mount whose Close may be told to fail.
type tapMount struct {
	io.Closer
	m    *tapMounter
	path string
}

func (t *tapMount) Close() error {
	t.m.mu.Lock()
	fail := t.m.failClose
	t.m.mu.Unlock()
	if fail != nil {
		if err := fail(t.path); err != nil {
			return err
		}
	}
	return t.Closer.Close()
}

// Done forwards the real mount's Done, if it has one; else it is closed.
func (t *tapMount) Done() <-chan struct{} {
	if d, ok := t.Closer.(interface{ Done() <-chan struct{} }); ok {
		return d.Done()
	}
	c := make(chan struct{})
	close(c)
	return c
}

// mountAt returns the mount on top at p, failing the test if there is none.
func mountAt(t testing.TB, p string) testenv.Mount {
	t.Helper()
	var top *testenv.Mount
	for _, e := range testenv.Mounts(t) {
		if e.Path == p {
			top = &e
		}
	}
	if top == nil {
		t.Fatalf("nothing is mounted at %s", p)
	}
	return *top
}

// isMounted reports whether the mount table lists a mount at p.
func isMounted(t testing.TB, p string) bool {
	t.Helper()
	got, err := fs.IsMountpoint(p)
	if err != nil {
		t.Fatalf("IsMountpoint(%s): %v", p, err)
	}
	return got
}

func mustMounted(t testing.TB, p string, want bool) {
	t.Helper()
	if got := isMounted(t, p); got != want {
		t.Errorf("%s: got mounted %v, want %v", p, got, want)
	}
}

// checkReadOnly checks that the mount at p is a warren mount, read-only
// or writable as wanted, in the mount table and to a write.
func checkReadOnly(t testing.TB, p string, want bool) {
	t.Helper()
	e := mountAt(t, p)
	if e.Type != "fuse.warren" {
		t.Errorf("%s: got filesystem type %q, want fuse.warren", p, e.Type)
	}
	if got := slices.Contains(e.Options, "ro"); got != want {
		t.Errorf("%s: got mount options %v, want read-only %v", p, e.Options, want)
	}
	probe := filepath.Join(p, ".write-probe")
	err := os.WriteFile(probe, []byte("x"), 0o644)
	switch {
	case want && !errors.Is(err, syscall.EROFS):
		t.Errorf("write to read-only %s: got %v, want EROFS", p, err)
	case !want && err != nil:
		t.Errorf("write to writable %s: %v", p, err)
	case !want:
		if err := os.Remove(probe); err != nil {
			t.Errorf("remove %s: %v", probe, err)
		}
	}
}

// checkNoMountsLeft fails the test for every mount still at or below
// roots, and detaches it so that no test leaves a mount behind.
func checkNoMountsLeft(t testing.TB, roots ...string) {
	t.Helper()
	for _, p := range testenv.MountsUnder(t, roots...) {
		t.Errorf("mount left at %s after the test", p)
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("detach %s: %v", p, err)
		}
	}
}

// testLogger logs into the test's output.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Debug, Output: t.Output()})
}

// testEnv is a gateway on a real Unix socket in a temporary folder.
type testEnv struct {
	g      *Gateway
	c      *client.Client
	cfg    Config
	m      *tapMounter // the real mounts, tapped
	logBuf *testenv.SyncBuffer
}

// startEnv starts a gateway that mounts with FUSE and stops it when the
// test ends, then checks that no mount it made is left. cfg's zero fields
// get test defaults. cfg.mounter is tapped (see tapMounter) unless it is a
// tap already; nil means the real fuseMounter. It needs root and FUSE
// (testenv.RequireRootFUSE), so the tests that call it do not ask again.
func startEnv(t testing.TB, cfg Config) *testEnv {
	t.Helper()
	testenv.RequireRootFUSE(t)
	env := &testEnv{logBuf: &testenv.SyncBuffer{}}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	if cfg.Store == nil {
		cfg.Store = newStore(t)
	}
	if tm, ok := cfg.mounter.(*tapMounter); ok {
		env.m = tm
	} else {
		env.m = &tapMounter{inner: cfg.mounter}
	}
	cfg.mounter = env.m
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{
			Name:   "gateway",
			Level:  hclog.Debug,
			Output: io.MultiWriter(t.Output(), env.logBuf),
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Registered before Close, so it runs after it.
	t.Cleanup(func() {
		checkNoMountsLeft(t, append(env.m.mountpoints(), cfg.DataDir)...)
		testenv.UnsealMountPoints(t, cfg.DataDir)
	})
	g, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	env.g, env.cfg = g, cfg
	if cfg.remountGate == nil {
		// The tests written before the restore went to the background
		// look at the mounts as soon as Start returns.
		env.waitRestored(t)
	}
	env.c = client.New(g.SocketPath())
	t.Cleanup(env.c.CloseIdleConnections)
	return env
}

// waitRestored waits until the start's background restore is done.
func (e *testEnv) waitRestored(t testing.TB) {
	t.Helper()
	select {
	case <-e.g.threads.RestoreDone():
	case <-time.After(time.Minute):
		t.Fatalf("the background restore did not end within a minute: %d threads left", e.g.threads.RestoreLeft())
	}
}

// live lists the mounts at or below the data folder, any mount point the
// env's mounter mounted at, and extra: what the gateway has mounted (or
// left mounted).
func (e *testEnv) live(t testing.TB, extra ...string) []string {
	t.Helper()
	return testenv.MountsUnder(t, append(append(e.m.mountpoints(), e.cfg.DataDir), extra...)...)
}

// newStore returns an empty Badger store closed when the test ends.
func newStore(t testing.TB) meta.Store {
	t.Helper()
	s, err := badger.Open(context.Background(), filepath.Join(t.TempDir(), "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawResponse is an answer to rawRequest.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// apiError decodes the JSON error of the answer.
func (r rawResponse) apiError(t testing.TB) *api.APIError {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error == nil {
		t.Fatalf("answer %d %q is not a JSON error: %v", r.status, r.body, err)
	}
	return eb.Error
}

// rawRequest sends one request with target written on the request line
// exactly as given: no client library gets to clean or re-escape it.
func rawRequest(t testing.TB, socket, method, target string, body []byte) rawResponse {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: warren\r\nConnection: close\r\n", method, target)
	if body != nil {
		fmt.Fprintf(&req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := c.Write(req.Bytes()); err != nil && !errors.Is(err, net.ErrClosed) {
		// A server may answer 413 and close before reading all of a
		// large body; the answer is still there to read.
		t.Logf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, target, err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: data}
}

// unixHTTP returns a plain HTTP client of the gateway's socket, for tests
// that need an answer's body as it streams, past what package client shows.
func unixHTTP(sock string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", sock)
	}}}
}
