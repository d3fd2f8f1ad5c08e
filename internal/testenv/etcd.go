package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/internal/toolserver"
)

// etcdStartTimeout bounds how long a cluster, or a restarted member, may
// take to answer; it is far above the second or two it takes, for a
// loaded CI machine.
const etcdStartTimeout = 60 * time.Second

// Etcd is a cluster of real etcd servers that EtcdCluster started for one
// test, each a process of its own on loopback ports, with its data under
// the test's temporary folder.
type Etcd struct {
	t       testing.TB
	bin     string
	members []*etcdMember
}

// etcdMember is one server of an Etcd cluster.
type etcdMember struct {
	name      string
	clientURL string
	logPath   string   // its stdout and stderr, kept across restarts
	args      []string // the same on every start

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while the member is down
	done chan struct{} // closed once cmd has exited and been waited for
}

// EtcdCluster starts an etcd cluster of members servers, waits until
// every one answers, and stops them when the test ends. It builds the
// server from tools/etcd the first time (toolserver.Tool.Binary). If etcd cannot
// be built or started, the test stops as CannotRun says: a failure when
// CI=true, a skip elsewhere.
func EtcdCluster(t testing.TB, members int) *Etcd {
	t.Helper()
	if members < 1 {
		t.Fatalf("EtcdCluster: %d members, want at least 1", members)
	}
	bin, err := toolserver.Etcd.Binary(t.Logf)
	if err != nil {
		CannotRun(t, "this test needs an etcd server built from %s: %v", toolserver.EtcdDir, err)
	}
	// The ports are found free and then handed to etcd, so another
	// process may take one in between; a start that fails on a taken
	// address is tried again on new ports.
	const tries = 3
	for try := 1; ; try++ {
		e, err := startEtcd(t, bin, members)
		if err == nil {
			return e
		}
		if try == tries || !strings.Contains(err.Error(), "address already in use") {
			CannotRun(t, "start an etcd cluster of %d: %v", members, err)
		}
		t.Logf("start an etcd cluster of %d, try %d: %v", members, try, err)
	}
}

// startEtcd starts one cluster and waits for it; on failure it has
// stopped every process it started.
func startEtcd(t testing.TB, bin string, n int) (*Etcd, error) {
	dir := t.TempDir()
	ports, err := toolserver.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	e := &Etcd{t: t, bin: bin}
	var initial []string
	for i := range n {
		m := &etcdMember{
			name:      fmt.Sprintf("m%d", i),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			logPath:   filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
		}
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		initial = append(initial, m.name+"="+peerURL)
		m.args = []string{
			"--name", m.name,
			"--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", m.clientURL,
			"--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", peerURL,
			"--initial-advertise-peer-urls", peerURL,
			// Without fsync a write is still in the page cache when a
			// member is killed, so kill and restart lose nothing; only
			// a crash of the machine would, and tests don't outlive
			// that. It makes every write several times faster.
			"--unsafe-no-fsync",
			"--log-outputs", "stderr",
		}
		e.members = append(e.members, m)
	}
	// The cluster's members and token are fixed at its first start; a
	// restarted member reads them back from its data folder and ignores
	// these flags.
	token := make([]byte, 8)
	rand.Read(token)
	for _, m := range e.members {
		m.args = append(m.args,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "warren-test-"+hex.EncodeToString(token),
		)
	}
	// Registered before any start, so a test that stops half-way still
	// leaves no server behind; it runs before t.TempDir removes the data.
	t.Cleanup(e.stop)
	for _, m := range e.members {
		if err := m.start(bin); err != nil {
			e.stop()
			return nil, err
		}
	}
	if err := e.waitHealthy(); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

// Endpoints returns the client URLs of every member, down or not, in
// member order.
func (e *Etcd) Endpoints() []string {
	var out []string
	for _, m := range e.members {
		out = append(out, m.clientURL)
	}
	return out
}

// Endpoint returns the client URL of member i.
func (e *Etcd) Endpoint(i int) string { return e.members[i].clientURL }

// Kill stops member i at once with SIGKILL, as a crash would, and waits
// until the process is gone. Its data stays for Restart.
func (e *Etcd) Kill(t testing.TB, i int) {
	t.Helper()
	m := e.members[i]
	if !m.kill() {
		t.Fatalf("etcd member %s: Kill of a member that is down", m.name)
	}
}

// Restart starts member i again on its ports and data folder, and waits
// until every running member answers.
func (e *Etcd) Restart(t testing.TB, i int) {
	t.Helper()
	m := e.members[i]
	m.mu.Lock()
	up := m.cmd != nil
	m.mu.Unlock()
	if up {
		t.Fatalf("etcd member %s: Restart of a member that is running", m.name)
	}
	if err := m.start(e.bin); err != nil {
		t.Fatalf("restart etcd member %s: %v", m.name, err)
	}
	e.WaitHealthy(t)
}

// WaitHealthy waits until every running member reports itself healthy:
// it is up, the cluster has a leader and a read through it succeeds. A
// test calls it after Kill, so the remaining members have elected a new
// leader before the test goes on.
func (e *Etcd) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := e.waitHealthy(); err != nil {
		t.Fatal(err)
	}
}

func (e *Etcd) waitHealthy() error {
	deadline := time.Now().Add(etcdStartTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for _, m := range e.members {
		for {
			done := m.exited()
			if done == nil {
				break // down: nothing to wait for
			}
			err := healthy(client, m.clientURL)
			if err == nil {
				break
			}
			select {
			case <-done:
				return fmt.Errorf("etcd member %s exited while starting:\n%s", m.name, toolserver.Tail(m.logPath, 20))
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s not healthy after %v: %v\n%s", m.name, etcdStartTimeout, err, toolserver.Tail(m.logPath, 20))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// healthy asks one member's /health endpoint.
func healthy(client *http.Client, url string) error {
	resp, err := client.Get(url + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("/health: %s %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// stop kills every member still running and waits for each; on a failed
// test it logs the end of each member's log first.
func (e *Etcd) stop() {
	for _, m := range e.members {
		m.kill()
	}
	if e.t.Failed() {
		for _, m := range e.members {
			e.t.Logf("etcd member %s, end of its log:\n%s", m.name, toolserver.Tail(m.logPath, 15))
		}
	}
}

// start starts the member's process, its output appended to its log.
func (m *etcdMember) start(bin string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd member %s is already running", m.name)
	}
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, m.args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Tied: the server dies with the test binary, cleanups or not.
	if err := StartTied(cmd); err != nil {
		log.Close()
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// kill sends SIGKILL to the member's own process, by its pid, and waits
// until it has been reaped. It reports whether the member was running.
func (m *etcdMember) kill() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	m.cmd.Process.Kill() // fails only if it has already exited
	<-m.done
	m.cmd, m.done = nil, nil
	return true
}

// exited returns a channel closed when the member's process exits, or nil
// if the member is down.
func (m *etcdMember) exited() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	return m.done
}
