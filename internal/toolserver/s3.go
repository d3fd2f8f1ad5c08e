package toolserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// s3StartTimeout bounds how long the server may take to be ready: about
// 13 s from a fresh start and 16 s after Restart (see waitReady), far
// less than this even on a loaded CI machine.
const s3StartTimeout = 90 * time.Second

// The fixed credentials of every server StartS3 starts. The region is
// the one clients default to; the server accepts a signature for any
// region.
const (
	s3AccessKey = "WARRENTESTACCESSKEY0"
	s3SecretKey = "warren-test-secret-key-0123456789abcdefgh"
	s3Region    = "us-east-1"
)

// S3Server is a real S3-compatible server that StartS3 started:
// SeaweedFS's `weed server -s3` (a master, a volume server, a filer and
// the S3 gateway in one process) on loopback ports, with its data in a
// folder of its own. Clients sign with AccessKey and SecretKey. Stop it
// with Stop.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Host      string // 127.0.0.1:PORT, for clients that take the scheme apart (minio-go)
	AccessKey string
	SecretKey string
	Region    string
	// Dir holds its config, HOME and TMPDIR; Dir/data the store.
	Dir string
	// LogPath is its stdout and stderr, kept across restarts.
	LogPath string

	bin       string
	args      []string // the same on every start
	env       []string
	masterURL string
	sockets   []string // Unix sockets it makes in /tmp (see Stop)

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while the server is down
	done   chan struct{} // closed once cmd has exited and been waited for
	paused bool
}

// StartS3 starts an S3-compatible server from bin (S3.Binary) in a new
// folder under parent, and waits until it serves requests. The server is
// tied to this process (StartTied): it dies with it. On failure nothing
// it started is left running.
func StartS3(bin, parent string) (*S3Server, error) {
	// The ports are found free and then handed to the server, so another
	// process may take one in between; a start that fails on a taken
	// address is tried again on new ports.
	const tries = 3
	for try := 1; ; try++ {
		dir, err := os.MkdirTemp(parent, "s3-")
		if err != nil {
			return nil, err
		}
		s, err := startS3(bin, dir)
		if err == nil {
			return s, nil
		}
		if try == tries || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
}

// startS3 starts one server in dir and waits for it; on failure it has
// stopped the process it started.
func startS3(bin, dir string) (*S3Server, error) {
	ports, err := FreePorts(8)
	if err != nil {
		return nil, err
	}
	master, masterGrpc, volume, volumeGrpc := ports[0], ports[1], ports[2], ports[3]
	filer, filerGrpc, s3, s3Grpc := ports[4], ports[5], ports[6], ports[7]
	s := &S3Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", s3),
		Host:      fmt.Sprintf("127.0.0.1:%d", s3),
		AccessKey: s3AccessKey,
		SecretKey: s3SecretKey,
		Region:    s3Region,
		Dir:       dir,
		LogPath:   filepath.Join(dir, "s3.log"),
		bin:       bin,
		masterURL: fmt.Sprintf("http://127.0.0.1:%d", master),
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	s.args = []string{
		// Global flags, before the command: the config folder holds
		// master.toml, and logs go to stderr only, not to files in /tmp.
		"-config_dir=" + dir,
		"-logtostderr",
		"server",
		"-ip=127.0.0.1",
		"-dir=" + filepath.Join(dir, "data"),
		// One master, no peers: a restarted master is its own leader at
		// once, where a cluster of one would wait for an election (20 s).
		"-master.peers=none",
		"-master.port=" + strconv.Itoa(master),
		"-master.port.grpc=" + strconv.Itoa(masterGrpc),
		// It would report statistics to a server on the internet.
		"-master.telemetry=false",
		// Small volumes, many allowed: every bucket is a collection
		// with volumes of its own, and the files are sparse.
		"-master.volumeSizeLimitMB=64",
		"-volume.max=100",
		"-volume.port=" + strconv.Itoa(volume),
		"-volume.port.grpc=" + strconv.Itoa(volumeGrpc),
		"-filer.port=" + strconv.Itoa(filer),
		"-filer.port.grpc=" + strconv.Itoa(filerGrpc),
		"-s3",
		"-s3.port=" + strconv.Itoa(s3),
		"-s3.port.grpc=" + strconv.Itoa(s3Grpc),
		"-s3.config=" + filepath.Join(dir, "s3.json"),
		// Its Iceberg and Lance catalogues listen on fixed ports by
		// default, which two servers at once would both take.
		"-s3.port.iceberg=0",
		"-s3.port.lance=0",
	}
	// weed also listens on Unix sockets whose paths it derives from the
	// ports, in /tmp whatever TMPDIR says; stop removes them.
	for _, p := range []struct {
		name string
		port int
	}{
		{"master-grpc", masterGrpc}, {"volume-grpc", volumeGrpc},
		{"filer", filer}, {"filer-grpc", filerGrpc},
		{"s3", s3}, {"s3-grpc", s3Grpc},
	} {
		s.sockets = append(s.sockets, fmt.Sprintf("/tmp/seaweedfs-%s-%d.sock", p.name, p.port))
	}
	// weed reads WEED_* variables as configuration, and config files in
	// $HOME/.seaweedfs: this server must not see the machine's. Its
	// scratch files go to its folder too.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEED_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TMPDIR=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "HOME="+dir, "TMPDIR="+dir)

	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.waitReady(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// writeConfig writes the server's identities (the fixed credentials, with
// every right) and master.toml.
func (s *S3Server) writeConfig() error {
	identities := map[string]any{
		"identities": []any{map[string]any{
			"name":        "warren-test",
			"credentials": []any{map[string]string{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
			"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
		}},
	}
	data, err := json.Marshal(identities)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "s3.json"), data, 0o600); err != nil {
		return err
	}
	// A collection's first write grows 7 volumes by default, which
	// takes seconds and soon fills -volume.max; one is plenty here.
	const masterToml = "[master.volume_growth]\ncopy_1 = 1\n"
	return os.WriteFile(filepath.Join(s.Dir, "master.toml"), []byte(masterToml), 0o644)
}

// MakeBucket creates the bucket name.
func (s *S3Server) MakeBucket(name string) error {
	resp, err := s.request(http.MethodPut, "/"+name, "")
	if err != nil {
		return fmt.Errorf("make bucket %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("make bucket %s: %s %s", name, resp.Status, body)
	}
	return nil
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// until the process is gone: the store refuses connections until Restart.
// Its data stays. It reports whether the server was running.
func (s *S3Server) Kill() bool { return s.kill() }

// Restart starts the server again on its ports and data, and waits until
// it serves reads and writes. That takes about 16 s: a master that comes
// back to volumes holds every write for three heartbeats (15 s) while the
// volume servers report in.
func (s *S3Server) Restart() error {
	s.mu.Lock()
	up := s.cmd != nil
	s.mu.Unlock()
	if up {
		return errors.New("S3 server: Restart of a server that is running")
	}
	if err := s.start(); err != nil {
		return fmt.Errorf("restart the S3 server: %w", err)
	}
	return s.waitReady()
}

// Pause stops the server with SIGSTOP and waits until it is stopped: the
// store accepts connections and answers nothing, as a hung or partitioned
// one would, until Resume.
func (s *S3Server) Pause() error {
	if err := s.signal(syscall.SIGSTOP, true); err != nil {
		return fmt.Errorf("pause the S3 server: %w", err)
	}
	return nil
}

// Resume continues a paused server and waits until it serves requests.
func (s *S3Server) Resume() error {
	if err := s.signal(syscall.SIGCONT, false); err != nil {
		return fmt.Errorf("resume the S3 server: %w", err)
	}
	return s.waitReady()
}

// Pid is the server's process, 0 while it is down.
func (s *S3Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// signal sends sig to the server's process, by its pid, and waits until
// the process's state says it is stopped or not.
func (s *S3Server) signal(sig syscall.Signal, stop bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("the server is down")
	}
	switch {
	case stop && s.paused:
		return errors.New("the server is already paused")
	case !stop && !s.paused:
		return errors.New("the server is not paused")
	}
	pid := s.cmd.Process.Pid
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, err := processState(pid)
		if err != nil {
			return err
		}
		if (state == 'T') == stop {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: state %c 10 s after %v", pid, state, sig)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.paused = stop
	return nil
}

// processState returns the state letter of /proc/PID/stat: R, S, T...
func processState(pid int) (byte, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the state
	// follows the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	return data[i+2], nil
}

// waitReady waits until the server serves reads and writes. A write is
// what takes longest to come: it waits until the filer has joined the
// master's cluster, whose lock ring guards every object write (the filer
// first waits twice 3 s for peers that a fresh cluster does not have: 12 s
// after a fresh start in all), and until the master, back on its old
// volumes, has warmed up (15 s after a restart).
func (s *S3Server) waitReady() error {
	deadline := time.Now().Add(s3StartTimeout)
	for {
		done := s.exited()
		if done == nil {
			return errors.New("S3 server: waiting for a server that is down")
		}
		err := s.ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("S3 server exited while starting:\n%s", Tail(s.LogPath, 20))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("S3 server not ready after %v: %v\n%s", s3StartTimeout, err, Tail(s.LogPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// s3Probe is the client of readiness probes. A write may wait in the
// server for seconds (see waitReady), and is better waited for than sent
// again.
var s3Probe = &http.Client{Timeout: 30 * time.Second}

// s3ProbeBucket is where ready writes; it is gone again once ready
// returns nil, so callers find the store empty.
const s3ProbeBucket = "warren-testenv-probe"

// ready reports whether the server serves reads and writes, or why not:
// the master has its volume server (a read of an object needs its volume
// known), the gateway lists buckets for the credentials, and an
// object can be written and deleted.
func (s *S3Server) ready() error {
	resp, err := s3Probe.Get(s.masterURL + "/dir/status")
	if err != nil {
		return err
	}
	var status struct{ Topology struct{ Max int } }
	err = json.NewDecoder(resp.Body).Decode(&status)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("master /dir/status: %s: %w", resp.Status, err)
	}
	if status.Topology.Max == 0 {
		return errors.New("master /dir/status: no volume server yet")
	}
	steps := []struct {
		method, path string
		body         string
		ok           []int
	}{
		{http.MethodGet, "/", "", []int{http.StatusOK}},
		// 409: a step before failed after it made the bucket.
		{http.MethodPut, "/" + s3ProbeBucket, "", []int{http.StatusOK, http.StatusConflict}},
		{http.MethodPut, "/" + s3ProbeBucket + "/probe", "ready", []int{http.StatusOK}},
		{http.MethodDelete, "/" + s3ProbeBucket + "/probe", "", []int{http.StatusNoContent}},
		{http.MethodDelete, "/" + s3ProbeBucket, "", []int{http.StatusNoContent}},
	}
	for _, st := range steps {
		resp, err := s.request(st.method, st.path, st.body)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !slices.Contains(st.ok, resp.StatusCode) {
			return fmt.Errorf("%s %s: %s %s", st.method, st.path, resp.Status, bytes.TrimSpace(body))
		}
	}
	return nil
}

// request sends a request with body to path on the S3 endpoint, signed
// with the server's credentials.
func (s *S3Server) request(method, path, body string) (*http.Response, error) {
	req, err := http.NewRequest(method, s.Endpoint+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(body))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	return s3Probe.Do(signer.SignV4(*req, s.AccessKey, s.SecretKey, "", s.Region))
}

// start starts the server's process, its output appended to its log.
func (s *S3Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("the S3 server is already running")
	}
	log, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir, cmd.Env = s.Dir, s.env
	cmd.Stdout, cmd.Stderr = log, log
	// Tied: the server dies with this process, cleanups or not.
	if err := StartTied(cmd); err != nil {
		log.Close()
		return fmt.Errorf("start the S3 server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	s.cmd, s.done, s.paused = cmd, done, false
	return nil
}

// kill sends SIGKILL to the server's own process, by its pid, and waits
// until it has been reaped; SIGKILL ends a paused process too. It
// reports whether the server was running.
func (s *S3Server) kill() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	s.cmd.Process.Kill() // fails only if it has already exited
	<-s.done
	s.cmd, s.done, s.paused = nil, nil, false
	return true
}

// Exited returns a channel closed when the server's process exits, or
// nil if the server is down.
func (s *S3Server) Exited() <-chan struct{} { return s.exited() }

// exited returns a channel closed when the server's process exits, or nil
// if the server is down.
func (s *S3Server) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	return s.done
}

// Stop kills the server if it runs and removes the Unix sockets it left
// in /tmp (a killed weed removes none). Its folder stays, for its log;
// the caller removes it.
func (s *S3Server) Stop() {
	s.kill()
	for _, p := range s.sockets {
		os.Remove(p)
	}
}

// Sockets are the Unix sockets the server makes in /tmp, whatever TMPDIR
// says, and leaves there when it is killed: Stop removes them, and so
// must whoever kills the server otherwise (its parent killed with
// SIGKILL takes it along, tied).
func (s *S3Server) Sockets() []string { return slices.Clone(s.sockets) }

// LogTail returns the last n lines of the server's log.
func (s *S3Server) LogTail(n int) string { return Tail(s.LogPath, n) }

// FreePorts returns n loopback TCP ports that were free a moment ago. All
// n are held open together, so they differ.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Tail returns the last n lines of the file at path, or why it can't.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
