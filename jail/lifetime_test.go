package jail

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// onEndingThread runs f on an OS thread that ends when f returns: a
// goroutine that locks its thread and returns without unlocking it, as
// fs's poll hack does. It returns a pidfd of that thread, readable once
// the thread has ended.
func onEndingThread(t *testing.T, f func()) int {
	t.Helper()
	pidfd, err := endingThread(f)
	if err != nil {
		testenv.CannotRun(t, "no pidfd of a thread (Linux 6.9): %v", err)
	}
	return pidfd
}

func endingThread(f func()) (int, error) {
	type result struct {
		pidfd int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The runtime never ends the main thread, even locked: hold
			// it, so that the next goroutine gets another thread.
			defer runtime.UnlockOSThread()
			pidfd, err := endingThread(f)
			done <- result{pidfd, err}
			return
		}
		// Opened by the thread itself: it cannot have ended, and its tid
		// cannot have been reused, before the pidfd holds it.
		pidfd, err := unix.PidfdOpen(unix.Gettid(), unix.PIDFD_THREAD)
		if err == nil {
			f()
		}
		done <- result{pidfd, err}
		// Never unlocked: the thread ends with this goroutine.
	}()
	r := <-done
	return r.pidfd, r.err
}

// waitReadable waits until pidfd says its process or thread has ended,
// at most d (0: it only looks), and reports whether it has.
func waitReadable(t *testing.T, pidfd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
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

// TestJailOutlivesTheThreadThatStartedIt: a jail started on an OS thread
// that then ends (a goroutine locked to it returned) still runs commands.
// Linux sends a parent-death signal when the thread that forked a child
// ends, not its process: a jail tied to its gateway that way died when
// the Go runtime ended the thread it had been forked on.
func TestJailOutlivesTheThreadThatStartedIt(t *testing.T) {
	testenv.RequireRoot(t)
	var (
		j   *Jail
		err error
	)
	thread := onEndingThread(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		j, err = Start(ctx, based(Config{Workspace: t.TempDir()}))
	})
	defer unix.Close(thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	// Once the thread has ended, a signal it was to send on its end has
	// been sent: the init could not run another command.
	if !waitReadable(t, thread, 10*time.Second) {
		t.Fatal("the thread that started the jail did not end")
	}
	if code, out, _ := run(t, j, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("after the thread that started it ended: exit %d, %q", code, out)
	}
	if err := j.Err(); err != nil {
		t.Errorf("after the thread that started it ended: %v", err)
	}
}

// TestJailDiesWithItsGatewayProcess: the jail of a gateway killed with
// SIGKILL ends too: its init, and with it every process of its pid
// namespace.
func TestJailDiesWithItsGatewayProcess(t *testing.T) {
	testenv.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A gateway of its own, in a process this test kills.
	gw := exec.Command(self, t.TempDir())
	gw.Env = append(os.Environ(), helperVar+"=hold-jail-plain")
	gw.Stderr = os.Stderr
	stdout, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			gw.Process.Kill()
			gw.Wait()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		t.Fatalf("the held jail: %q, %v", line, err)
	}
	// Opened while the gateway lives: the init is its child, unreaped,
	// so the pid is still the init's.
	init, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of the init %d: %v", pid, err)
	}
	defer unix.Close(init)
	if waitReadable(t, init, 0) {
		t.Fatalf("the init %d ended before its gateway", pid)
	}
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gw.Wait()
	killed = true
	if !waitReadable(t, init, 10*time.Second) {
		unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("the init %d of a jail whose gateway was killed still runs 10 s later", pid)
	}
}
