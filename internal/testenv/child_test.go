package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperVar names what the test binary does when it runs as a helper.
const helperVar = "WARREN_TESTENV_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperVar) == "tied-sleep" {
		// A test binary with a tied child: prints the child's pid and
		// waits to be killed.
		cmd := exec.Command("sleep", "600")
		if err := StartTied(cmd); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		fmt.Println(cmd.Process.Pid)
		cmd.Wait()
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// endingThread runs f on an OS thread that ends when f returns (a
// goroutine that returns locked to it) and returns a pidfd of the thread,
// readable once it has ended.
func endingThread(f func()) (int, error) {
	type result struct {
		pidfd int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The runtime never ends the main thread: hold it, so that
			// the next goroutine gets another.
			defer runtime.UnlockOSThread()
			pidfd, err := endingThread(f)
			done <- result{pidfd, err}
			return
		}
		pidfd, err := unix.PidfdOpen(unix.Gettid(), unix.PIDFD_THREAD)
		if err == nil {
			f()
		}
		done <- result{pidfd, err}
	}()
	r := <-done
	return r.pidfd, r.err
}

// pidfdEnded waits until pidfd's process or thread has ended, at most d
// (0: it only looks), and reports whether it has.
func pidfdEnded(t *testing.T, pidfd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); ; {
		left := max(time.Until(deadline), 0)
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			t.Fatalf("poll a pidfd: %v", err)
		case n > 0:
			return true
		case left == 0:
			return false
		}
	}
}

// TestStartTiedOutlivesTheCallersThread: a child started from a thread
// that then ends still runs.
func TestStartTiedOutlivesTheCallersThread(t *testing.T) {
	RequireCommand(t, "cat")
	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var startErr error
	thread, err := endingThread(func() { startErr = StartTied(cmd) })
	if err != nil {
		CannotRun(t, "no pidfd of a thread (Linux 6.9): %v", err)
	}
	defer unix.Close(thread)
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Once the thread has ended, a parent-death signal tied to it has
	// been sent: cat could not answer.
	if !pidfdEnded(t, thread, 10*time.Second) {
		t.Fatal("the thread that started the child did not end")
	}
	if _, err := io.WriteString(in, "alive\n"); err != nil {
		t.Fatalf("write to the child: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "alive\n" {
		t.Fatalf("the child after the thread that started it ended: %q, %v", line, err)
	}
}

// TestStartTiedDiesWithTheTestBinary: a tied child of a test binary
// killed with SIGKILL is killed too.
func TestStartTiedDiesWithTheTestBinary(t *testing.T) {
	RequireCommand(t, "sleep")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := exec.Command(self)
	bin.Env = append(os.Environ(), helperVar+"=tied-sleep")
	bin.Stderr = os.Stderr
	stdout, err := bin.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bin.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			bin.Process.Kill()
			bin.Wait()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		t.Fatalf("the helper: %q, %v", line, err)
	}
	// Opened while the helper lives: the child is its own, unreaped.
	child, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of the child %d: %v", pid, err)
	}
	defer unix.Close(child)
	if err := bin.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	bin.Wait()
	killed = true
	if !pidfdEnded(t, child, 10*time.Second) {
		unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("the tied child %d still runs 10 s after its test binary was killed", pid)
	}
}
