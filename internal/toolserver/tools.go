package toolserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The modules of the servers, from the repository root.
const (
	// EtcdDir builds etcd.
	EtcdDir = "tools/etcd"
	// S3Dir builds SeaweedFS's weed command; see tools/s3/main.go for
	// why SeaweedFS, and what else was tried.
	S3Dir = "tools/s3"
)

// A Tool is a server built from a Go module of its own under tools/ (its
// main is the server's).
type Tool struct {
	name string // the binary's name in bin/, before its key
	dir  string // its module, from the repository root

	// This process's one build: every caller shares it (every test of a
	// test binary), and a failed build is not tried again.
	mu   sync.Mutex
	done bool
	path string
	err  error
}

// The tools.
var (
	Etcd = &Tool{name: "etcd", dir: EtcdDir}
	S3   = &Tool{name: "s3", dir: S3Dir}
)

// Dir is the tool's module, from the repository root.
func (b *Tool) Dir() string { return b.dir }

// Binary returns the path of the tool's binary, building it if needed;
// logf, if not nil, is told of a build. The binary is kept in the
// repository's bin/ (ignored by git) under a name that hashes the
// module's files and the Go version, so a change to either builds a new
// one and an unchanged tree builds once. Test binaries of several
// packages run at once, so the build holds a lock file: the first
// builds, the others wait and find it. A build from an empty build
// cache takes minutes (S3: about 7.5 on 2 cores).
func (b *Tool) Binary(logf func(format string, args ...any)) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.path, b.err = b.build(logf)
		b.done = true
	}
	return b.path, b.err
}

func (b *Tool) build(logf func(format string, args ...any)) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, b.dir)
	key, err := toolKey(src)
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(root, "bin")
	bin := filepath.Join(binDir, b.name+"-"+key)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(binDir, "."+b.name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // closing the file releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if isExecutable(bin) {
		return bin, nil // another test binary built it while we waited
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	defer os.Remove(tmp)
	start := time.Now()
	cmd := exec.Command(goTool, "build", "-C", src, "-o", tmp, "-ldflags=-s -w", ".")
	// A workspace or cgo setting of the caller's must not change what
	// is built; the tools need no cgo, so they are static binaries.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Tied: a build takes minutes the first time, and must not go on
	// after a test binary (or a benchmark) that timed out or was
	// interrupted.
	if err := StartTied(cmd); err != nil {
		return "", fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.Bytes())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	if logf != nil {
		logf("built %s from %s in %v", b.name, b.dir, time.Since(start).Round(100*time.Millisecond))
	}
	// Binaries of earlier versions of the tool are of no further use.
	old, _ := filepath.Glob(filepath.Join(binDir, b.name+"-*"))
	for _, p := range old {
		if p != bin {
			os.Remove(p)
		}
	}
	return bin, nil
}

// RepoRoot finds the repository root: the nearest folder at or above the
// working directory (a test runs in its package's folder, a benchmark at
// the top) that holds tools/etcd.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, EtcdDir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no " + EtcdDir + "/go.mod at or above the working directory")
		}
		dir = parent
	}
}

// toolKey hashes the files of a tool's module and the Go version, OS and
// architecture that build it.
func toolKey(src string) (string, error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
