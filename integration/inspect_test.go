package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// peerMountsEnv makes the test binary a client that asks for inspection
// mounts (see runMain): a test runs it as an allowed non-root uid.
const (
	peerMountsEnv = "WARREN_TEST_PEER_MOUNTS_SOCKET"
	peerDirEnv    = "WARREN_TEST_PEER_MOUNTS_DIR"
	peerTriesEnv  = "WARREN_TEST_PEER_MOUNTS_TRIES"
)

// peerMounts asks for a writable inspection mount of thread "t" at the
// folder in peerDirEnv, peerTriesEnv times, and removes each one made. It
// prints one line per call: the method, the status and, for an error
// other than a refusal, the body.
func peerMounts(sock string) int {
	dir := os.Getenv(peerDirEnv)
	tries, err := strconv.Atoi(os.Getenv(peerTriesEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tries:", err)
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	call := func(method, target string, body []byte) (int, string, error) {
		req, err := http.NewRequest(method, "http://warren"+target, bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	body, _ := json.Marshal(map[string]any{"thread": "t", "path": dir, "writable": true})
	for range tries {
		status, msg, err := call(http.MethodPost, "/v1/mounts", body)
		if err != nil {
			fmt.Fprintln(os.Stderr, "POST:", err)
			return 1
		}
		fmt.Printf("POST %d %s\n", status, strings.TrimSpace(msg))
		if status != http.StatusOK {
			continue
		}
		status, msg, err = call(http.MethodDelete, "/v1/mounts?path="+url.QueryEscape(dir), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "DELETE:", err)
			return 1
		}
		fmt.Printf("DELETE %d %s\n", status, strings.TrimSpace(msg))
	}
	return 0
}

// TestInspectionMountSwapRaceAsAllowedUID runs a real daemon that allows
// uid 65534, and a client of that uid that asks again and again for a
// mount of base/p/d, a folder it owns, while base/p is swapped between
// that folder and a link to root's folder that has a d with a file. No
// mount ever covers root's folder, no answer is a 500, and every mount
// made is removed by its DELETE.
func TestInspectionMountSwapRaceAsAllowedUID(t *testing.T) {
	const uid = 65534
	d := newDaemon(t, "--allow-uid", strconv.Itoa(uid))
	// The peer must reach the socket: widen the test's own folders and
	// the socket; only the peer-uid check and the folder checks remain.
	for p := filepath.Dir(d.data); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		must(t, os.Chmod(p, 0o755))
	}
	must(t, os.Chmod(d.socket, 0o666))

	dir := t.TempDir()
	base, victim := filepath.Join(dir, "base"), filepath.Join(dir, "victim")
	asked := filepath.Join(base, "p", "d")
	must(t, os.MkdirAll(asked, 0o755))
	must(t, os.MkdirAll(filepath.Join(victim, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(victim, "d", "secret"), []byte("root's"), 0o600))
	for _, p := range []string{base, filepath.Join(base, "p"), asked} {
		must(t, os.Chown(p, uid, uid))
	}
	q := filepath.Join(base, "q")
	must(t, os.Symlink(victim, q))
	// Runs first: nothing is removed through a mount a failure left.
	t.Cleanup(func() { detachAllUnder(t, dir) })

	// The client: this test binary, copied where uid 65534 can run it.
	self, err := os.Executable()
	must(t, err)
	bin := filepath.Join(filepath.Dir(d.data), "peer")
	data, err := os.ReadFile(self)
	must(t, err)
	must(t, os.WriteFile(bin, data, 0o755))

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		p := filepath.Join(base, "p")
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, q, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{peerMountsEnv + "=" + d.socket, peerDirEnv + "=" + asked, peerTriesEnv + "=200"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("client as uid %d: %v\n%s", uid, err, stderr.String())
	}

	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		method, rest, _ := strings.Cut(sc.Text(), " ")
		status, _, _ := strings.Cut(rest, " ")
		counts[method+" "+status]++
		if strings.HasPrefix(status, "5") {
			t.Errorf("%s answered %s", method, rest)
		}
		if method == "DELETE" && status != "200" {
			t.Errorf("DELETE of a mount made answered %s", rest)
		}
	}
	t.Logf("answers: %v", counts)
	if counts["POST 200"] == 0 || counts["POST 400"] == 0 {
		t.Errorf("answers %v: want some mounts and some refusals (the race did not run)", counts)
	}
	if got := testenv.MountsUnder(t, victim); len(got) > 0 {
		t.Errorf("root's folder is covered: mounts at %v", got)
	}
	if got := testenv.MountsUnder(t, base); len(got) > 0 {
		t.Errorf("mounts left after every DELETE: %v", got)
	}
	if got, err := os.ReadFile(filepath.Join(victim, "d", "secret")); err != nil || string(got) != "root's" {
		t.Errorf("root's file: got %q, %v", got, err)
	}
}
