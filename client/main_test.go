package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/client"
)

// socketPath is the socket of the daemon TestMain starts for the examples.
// It is set once, before any example runs.
var socketPath string

// TestMain runs the examples against a real daemon: warrend, built from
// this tree and started on a data folder of its own, with real FUSE mounts
// and jails. It needs root and /dev/fuse; where they are missing it fails
// under CI=true and skips the package elsewhere, as testenv's checks do.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		return cannotRun("the examples need root and /dev/fuse; root is missing")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return cannotRun(fmt.Sprintf("the examples need root and /dev/fuse; /dev/fuse is missing: %v", err))
	}
	dir, err := os.MkdirTemp("", "warren-client-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	d, err := startDaemon(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the daemon:", err)
		return 1
	}
	socketPath = d.socket
	code := m.Run()
	if err := d.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the daemon:", err)
		code = 1
	}
	return code
}

// cannotRun is testenv.CannotRun for a whole package: exit status 1 under
// CI=true, where the suite must not pass by skipping, 0 elsewhere.
func cannotRun(why string) int {
	if os.Getenv("CI") == "true" {
		fmt.Fprintln(os.Stderr, "CI=true:", why)
		return 1
	}
	fmt.Println("skipped:", why)
	return 0
}

// daemon is a warrend process serving the examples.
type daemon struct {
	cmd    *exec.Cmd
	exited chan error // the result of cmd.Wait, once it returned
	data   string
	socket string
	log    *os.File
}

// startDaemon builds warrend into dir, starts it on dir/data and returns
// once its socket answers.
func startDaemon(dir string) (*daemon, error) {
	bin := filepath.Join(dir, "warrend")
	build := exec.Command("go", "build", "-o", bin, "warren/cmd/warrend")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build warrend: %v\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(dir, "warrend.log"))
	if err != nil {
		return nil, err
	}
	d := &daemon{data: filepath.Join(dir, "data"), exited: make(chan error, 1), log: log}
	d.socket = filepath.Join(d.data, "warren.sock")
	d.cmd = exec.Command(bin, "--data", d.data, "--log-level", "debug")
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start warrend: %w", err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Threads(context.Background())
		if err == nil {
			return d, nil
		}
		select {
		case werr := <-d.exited:
			d.exited <- werr
			d.stop()
			return nil, fmt.Errorf("warrend exited at start (%v):\n%s", werr, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("warrend did not answer within 20s: %v\n%s", err, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the daemon with SIGTERM (SIGKILL if it does not stop within
// 30 s) and checks that it left no mount; it detaches any it left, and
// clears the immutable flag of its mount points so that the folder can be
// removed.
func (d *daemon) stop() error {
	defer d.log.Close()
	var errs []error
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		if err != nil {
			errs = append(errs, fmt.Errorf("warrend ended with %v:\n%s", err, d.logs()))
		}
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		errs = append(errs, fmt.Errorf("warrend did not stop within 30s of SIGTERM:\n%s", d.logs()))
	}
	left, err := mountsUnder(d.data)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range left {
		errs = append(errs, fmt.Errorf("mount left at %s", p))
		unix.Unmount(p, unix.MNT_DETACH)
	}
	paths, _ := filepath.Glob(filepath.Join(d.data, "mnt", "*", "*"))
	for _, p := range paths {
		if err := unseal(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *daemon) logs() string {
	b, _ := os.ReadFile(d.log.Name())
	return string(b)
}

// mountsUnder lists the mount points at or below root.
func mountsUnder(root string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == root || strings.HasPrefix(f[4], root+"/")) {
			out = append(out, f[4])
		}
	}
	return out, nil
}

// unseal clears the immutable flag the daemon sets on a mount point
// (testenv.UnsealMountPoints, which needs a testing.TB).
func unseal(p string) error {
	const immutableFL = 0x00000010 // FS_IMMUTABLE_FL of <linux/fs.h>
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil // not a folder the daemon sealed
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil || flags&immutableFL == 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^immutableFL)); err != nil {
		return fmt.Errorf("clear the immutable flag of %s: %w", p, err)
	}
	return nil
}
