package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/meta"
)

// fakeMounter stands in for FUSE where a test is about the gateway's own
// bookkeeping. It records what is mounted and can be told to fail.
type fakeMounter struct {
	mu       sync.Mutex
	mounted  map[string]fs.Options // by mount point
	mounts   int                   // Mount calls that succeeded
	detached []string              // DetachStale calls
	// failMount and failClose, if set, decide per mount point whether the
	// operation fails.
	failMount func(mountpoint string) error
	failClose func(mountpoint string) error
}

var _ Mounter = (*fakeMounter)(nil)

func newFakeMounter() *fakeMounter {
	return &fakeMounter{mounted: make(map[string]fs.Options)}
}

func (f *fakeMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failMount != nil {
		if err := f.failMount(mountpoint); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(backing); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fake mount: backing %s: %v", backing, err)
	}
	if fi, err := os.Stat(mountpoint); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fake mount: mount point %s: %v", mountpoint, err)
	}
	if _, ok := f.mounted[mountpoint]; ok {
		return nil, fmt.Errorf("fake mount: %s is mounted already", mountpoint)
	}
	f.mounted[mountpoint] = opts
	f.mounts++
	return &fakeMount{f: f, path: mountpoint}, nil
}

func (f *fakeMounter) DetachStale(mountpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detached = append(f.detached, mountpoint)
	return nil
}

func (f *fakeMounter) isMounted(p string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.mounted[p]
	return ok
}

func (f *fakeMounter) count() (live, made int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mounted), f.mounts
}

type fakeMount struct {
	f    *fakeMounter
	path string
}

func (m *fakeMount) Close() error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.f.failClose != nil {
		if err := m.f.failClose(m.path); err != nil {
			return err
		}
	}
	if _, ok := m.f.mounted[m.path]; !ok {
		return fmt.Errorf("fake unmount: %s is not mounted", m.path)
	}
	delete(m.f.mounted, m.path)
	return nil
}

// testLogger logs into the test's output.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Debug, Output: t.Output()})
}

// testEnv is a gateway on a real Unix socket in a temporary folder.
type testEnv struct {
	g      *Gateway
	c      *Client
	cfg    Config
	m      *fakeMounter // nil with real FUSE
	logBuf *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startEnv starts a gateway with a fake mounter (or the real one if
// mounter is FUSEMounter{}) and stops it when the test ends. cfg's zero
// fields get test defaults.
func startEnv(t testing.TB, cfg Config) *testEnv {
	t.Helper()
	env := &testEnv{logBuf: &syncBuffer{}}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	if cfg.Store == nil {
		cfg.Store = newStore(t)
	}
	if cfg.Mounter == nil {
		env.m = newFakeMounter()
		cfg.Mounter = env.m
	} else if fm, ok := cfg.Mounter.(*fakeMounter); ok {
		env.m = fm
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{
			Name:   "gateway",
			Level:  hclog.Debug,
			Output: io.MultiWriter(t.Output(), env.logBuf),
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
	env.c = NewClient(g.SocketPath())
	t.Cleanup(env.c.CloseIdleConnections)
	return env
}

// newStore returns an empty Badger store closed when the test ends.
func newStore(t testing.TB) meta.Store {
	t.Helper()
	s, err := meta.OpenBadger(context.Background(), filepath.Join(t.TempDir(), "meta"), hclog.NewNullLogger())
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
func (r rawResponse) apiError(t testing.TB) *APIError {
	t.Helper()
	var eb errorBody
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

// requireFUSE skips a test that needs real FUSE mounts where they cannot
// be made, except in CI, where a missing /dev/fuse or root is a failure:
// the suite must not pass there by skipping its real tests.
func requireFUSE(t testing.TB) {
	t.Helper()
	var missing string
	if os.Geteuid() != 0 {
		missing = "root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = "/dev/fuse"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs FUSE mounts, and %s is missing in CI", missing)
	}
	t.Skipf("this test needs FUSE mounts; %s is missing", missing)
}
