package toolserver

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartTied starts cmd so that the kernel kills it (SIGKILL) when this
// process dies, cleanups or not (a test's -timeout panic, os.Exit, a
// kill): no server or load a test or a benchmark starts outlives it.
//
// That is Pdeathsig, which Linux sends when the thread that forked the
// child exits, not the process; and the Go runtime ends a thread whenever
// a goroutine returns locked to it (fs's poll hack does, on purpose). A
// child forked on such a thread would be killed in the middle of its
// test. So the fork is made on a thread locked until the child has ended:
// no goroutine can end it sooner. The caller waits for cmd as usual.
func StartTied(cmd *exec.Cmd) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		// Opened before the caller may wait for the child: the pid is
		// still the child's. A pidfd polls readable once the child has
		// ended, and leaves reaping it to cmd.Wait.
		pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			started <- fmt.Errorf("pidfd of %s: %w", cmd.Path, err)
			return
		}
		defer unix.Close(pidfd)
		started <- nil
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	return <-started
}
