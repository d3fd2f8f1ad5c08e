package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// childEnv names, in a re-executed test binary, the helper it runs
// instead of the tests.
const childEnv = "WARREN_FS_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "mmap-write":
		if err := mmapWrite(os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "flip-opens":
		if err := flipOpens(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "caller-op":
		if err := callerOp(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "increment":
		if err := increment(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "lock-wait":
		if err := lockWait(os.Args[len(os.Args)-3], os.Args[len(os.Args)-2], os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "flood":
		fmt.Fprintln(os.Stderr, flood(os.Args[len(os.Args)-1]))
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "unknown child helper", os.Getenv(childEnv))
		os.Exit(2)
	}
	// Mounts served by this process hold a descriptor per known inode.
	if err := RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	name := os.Getenv(testenv.TransportEnv)
	if name == sharedTransport {
		testShared, name = true, ""
	}
	t, err := ParseTransport(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testTransport = t
	restore, err := testenv.EnableFUSEURing()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	restore()
	os.Exit(code)
}

// testTransport is the one every mount of the tests is served on
// (testenv.TransportEnv's), read once by TestMain.
var testTransport Transport

// serveTest is Serve on the tests' transport, unless opts names one. On
// uring, Serve fails rather than serve the classic way.
func serveTest(ctx context.Context, backing, mountpoint string, opts Options) (*Mount, error) {
	if opts.Transport == "" {
		opts.Transport = testTransport
	}
	if testShared && opts.Transport == TransportClassic && !opts.Debug {
		return servePooled(ctx, backing, mountpoint, opts)
	}
	return Serve(ctx, backing, mountpoint, opts)
}

// sharedTransport, as testenv.TransportEnv, serves the tests' mounts on
// Pools' shared connections: one pool per hub, and a hub and pool of its
// own for a mount that names no hub.
const sharedTransport = "shared"

// testShared says the tests' mounts are served by pools (sharedTransport).
var testShared bool

// testPools are the pools of the tests' hubs, under sharedTransport.
var testPools = struct {
	sync.Mutex
	of map[*Hub]*Pool
}{of: make(map[*Hub]*Pool)}

// servePooled serves a test's mount on a pool of its hub's.
func servePooled(ctx context.Context, backing, mountpoint string, opts Options) (*Mount, error) {
	if opts.Hub == nil {
		hub := NewHub(HubConfig{Logger: opts.Logger})
		p, err := NewPool(PoolConfig{Hub: hub, Logger: opts.Logger})
		if err != nil {
			hub.Close()
			return nil, err
		}
		opts.Hub = hub
		m, err := p.Serve(ctx, backing, mountpoint, opts)
		if err != nil {
			p.Close(time.Second)
			hub.Close()
			return nil, err
		}
		go func() {
			<-m.Done()
			p.Close(time.Minute)
			hub.Close()
		}()
		return m, nil
	}
	testPools.Lock()
	p := testPools.of[opts.Hub]
	if p == nil {
		var err error
		if p, err = NewPool(PoolConfig{Hub: opts.Hub, Logger: opts.Logger}); err != nil {
			testPools.Unlock()
			return nil, err
		}
		testPools.of[opts.Hub] = p
	}
	testPools.Unlock()
	return p.Serve(ctx, backing, mountpoint, opts)
}

// inChild runs helper in a new process of this test binary, started
// outside every mount. A process must never fault in pages of a mount it
// serves itself: the faulting thread cannot be stopped by the garbage
// collector, and the fault waits for a FUSE reply that the stopped world
// cannot send.
func inChild(helper string, args ...string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+helper)
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

// startChild starts helper in a new process of this test binary, outside
// every mount, and returns it running.
func startChild(helper string, args ...string) (*exec.Cmd, *bytes.Buffer, error) {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+helper)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out, cmd.Start()
}

// increment adds one to the number in path, times times, the way a naive
// program does: read it, add one, write it back. A write refused as stale
// (ESTALE) starts that step again from the read; it prints how many were.
func increment(path, times string) error {
	m, err := strconv.Atoi(times)
	if err != nil {
		return err
	}
	retries := 0
	for done := 0; done < m; {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A read that saw the file truncated by another writer reads ""
		// here; a naive program takes that as 0.
		v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// Think a little, as a program between its read and its write
		// does; this is what lets two writers overlap.
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if errors.Is(err, syscall.ESTALE) {
			retries++
			continue
		}
		if err != nil {
			return err
		}
		_, werr := f.WriteString(strconv.Itoa(v + 1))
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return werr
		}
		done++
	}
	fmt.Println("retries", retries)
	return nil
}

// mmapWrite maps the first 8 KiB of path shared, writes into its second
// page and syncs it.
func mmapWrite(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	if !bytes.Equal(mem[:4], []byte("aaaa")) {
		return fmt.Errorf("mapped page reads %q, want aaaa", mem[:4])
	}
	copy(mem[4096:], "written through mmap")
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	return unix.Munmap(mem)
}
