package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
	"warren/jail"
)

// peerClientEnv makes the test binary act as a tiny API client (see
// TestMain): the peer-uid test runs it as another user.
const peerClientEnv = "WARREN_TEST_PEER_CLIENT_SOCKET"

func TestMain(m *testing.M) {
	if jail.IsInit() {
		jail.RunInit()
	}
	if sock := os.Getenv(peerClientEnv); sock != "" {
		os.Exit(peerClient(sock))
	}
	if spec := os.Getenv(slowUploadsEnv); spec != "" {
		os.Exit(slowUploader(spec))
	}
	if data := os.Getenv(stuckChildEnv); data != "" {
		os.Exit(stuckChild(data))
	}
	os.Exit(m.Run())
}

// peerClient sends GET /v1/threads on sock and prints the status and body.
func peerClient(sock string) int {
	req, _ := http.NewRequest(http.MethodGet, "http://warren/v1/threads", nil)
	resp, err := unixHTTP(sock).Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, body)
	return 0
}

// sharedDir returns a folder that other users can reach (t.TempDir is
// 0700), removed when the test ends.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "warren-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPeerUIDRefused connects as uid 65534 (nobody). The socket mode is
// widened for the test so that only the peer-uid check stands in the way.
func TestPeerUIDRefused(t *testing.T) {
	testenv.RequireRoot(t) // needed to run a client as another uid
	dir := sharedDir(t)
	bin := filepath.Join(dir, "client")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, env *testEnv, uid uint32) string {
		t.Helper()
		if err := os.Chmod(env.g.SocketPath(), 0o666); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = []string{peerClientEnv + "=" + env.g.SocketPath()}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client as uid %d: %v (%s)", uid, err, out)
		}
		return string(out)
	}

	tests := []struct {
		name       string
		allow      []uint32
		wantStatus string
	}{
		{"not allowed", nil, "403 "},
		{"allowed by AllowUIDs", []uint32{65534}, "200 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startEnv(t, Config{SocketPath: filepath.Join(sharedDir(t), "w.sock"), AllowUIDs: tt.allow})
			got := run(t, env, 65534)
			if !strings.HasPrefix(got, tt.wantStatus) {
				t.Fatalf("got answer %q, want status %q", got, tt.wantStatus)
			}
			if tt.wantStatus == "403 " {
				if !strings.Contains(got, `"code":"forbidden"`) {
					t.Errorf("got %q, want a JSON forbidden error", got)
				}
				if log := env.logBuf.String(); !strings.Contains(log, "refused: peer not allowed") || !strings.Contains(log, "peer_uid=65534") {
					t.Errorf("refusal not logged with the peer uid; log:\n%s", log)
				}
			}
		})
	}
}

func TestAllowed(t *testing.T) {
	env := startEnv(t, Config{AllowUIDs: []uint32{1234}})
	self := uint32(os.Getuid())
	tests := []struct {
		uid  uint32
		want bool
	}{
		{self, true},
		{0, true},
		{1234, true},
		{1235, false},
		{65534, false},
	}
	for _, tt := range tests {
		if tt.uid == self && !tt.want {
			// This process's own uid is always allowed.
			continue
		}
		t.Run(fmt.Sprint(tt.uid), func(t *testing.T) {
			if got := env.g.allowed(tt.uid); got != tt.want {
				t.Errorf("allowed(%d) = %v, want %v", tt.uid, got, tt.want)
			}
		})
	}
}

func TestSocketMode(t *testing.T) {
	// A permissive umask must not widen the socket.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	env := startEnv(t, Config{})
	fi, err := os.Stat(env.g.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != socketMode {
		t.Errorf("got socket mode %o, want %o", got, socketMode)
	}
	if fi.Mode().Type() != os.ModeSocket {
		t.Errorf("got file type %v, want a socket", fi.Mode().Type())
	}
}

func TestSocketPathInUse(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr string // "" means Start succeeds
	}{
		{"stale socket", func(t *testing.T, path string) {
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}, ""},
		{"live socket", func(t *testing.T, path string) {
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		}, "another gateway is serving"},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is not a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.sock")
			tt.prepare(t, path)
			cfg := Config{DataDir: filepath.Join(t.TempDir(), "data"), SocketPath: path, Store: newStore(t)}
			g, err := Start(context.Background(), cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				if err := g.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if _, err := os.Lstat(path); !os.IsNotExist(err) {
					t.Errorf("socket left after Close: %v", err)
				}
				return
			}
			if err == nil {
				g.Close()
				t.Fatalf("Start succeeded, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Errorf("Start removed what was at the socket path: %v", err)
			}
		})
	}
}
