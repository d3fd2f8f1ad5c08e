package fs

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// pollHack makes the kernel ask POLL once, on go-fuse's special file, so
// that go-fuse answers ENOSYS and the kernel never polls a file of the
// mount again. Without it, a process that serves a mount and also opens
// its files (the tests do; the jail's do not count) can deadlock: the Go
// runtime registers every file it opens in its epoll, a raw syscall that
// keeps its P while the kernel waits for POLL to be answered, and with
// every P so held no goroutine is left to answer.
//
// It is the one request the daemon makes to its own mount, so it is made
// where it cannot keep the daemon from dying: on a locked thread of its
// own with a copy of the descriptor table (unshare CLONE_FILES) that holds
// no /dev/fuse descriptor. If the daemon is killed while the request is in
// flight, that thread alone waits; the other threads exit and drop the
// real table, the last /dev/fuse descriptor of the connection closes, the
// kernel aborts the connection, the request fails and the thread ends. A
// thread that shared the table would keep the /dev/fuse descriptor open
// and wait for an answer no one can give: the process would stay a zombie
// holding every descriptor, the store's lock too (issue 12).
func pollHack(mntFd int) error {
	return onThreadWithOwnFiles(func() error {
		if err := closeFuseDevices(); err != nil {
			return fmt.Errorf("poll hack: %w", err)
		}
		fd, err := unix.Openat(mntFd, ".go-fuse-epoll-hack", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open poll hack: %w", err)
		}
		defer unix.Close(fd)
		unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
		return nil
	})
}

// onThreadWithOwnFiles runs fn on a locked thread that has a copy of the
// descriptor table of its own (unshare CLONE_FILES), a thread that ends
// when fn returns. Never on the main thread: its table is the one
// /proc/self/fd shows (reopen relies on it), and the main thread never
// ends, so a copy made there would outlive fn and hide every descriptor
// opened later. A goroutine that finds itself there holds the main thread
// (so it cannot be given the next goroutine) and tries again from another.
func onThreadWithOwnFiles(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- onThreadWithOwnFiles(fn)
			runtime.UnlockOSThread()
			return
		}
		// Never unlocked: the thread, with its own table, ends with this
		// goroutine.
		if err := unix.Unshare(unix.CLONE_FILES); err != nil {
			errc <- fmt.Errorf("unshare the descriptor table: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// closeFuseDevices closes, in the calling thread's descriptor table, every
// descriptor of /dev/fuse and every io_uring ring. Only those: the runtime's own (its epoll, its
// wake-up eventfd) must stay, as the runtime may use them on this thread.
func closeFuseDevices() error {
	var fuseDev unix.Stat_t
	if err := unix.Stat("/dev/fuse", &fuseDev); err != nil {
		return fmt.Errorf("stat /dev/fuse: %w", err)
	}
	return eachThreadFd(func(fd int, target string) {
		switch target {
		case "anon_inode:[io_uring]":
			// A ring of the io_uring transport (uring_linux.go): its
			// commands hold /dev/fuse open until the ring goes, and the
			// copy of the table would keep it.
			unix.Close(fd)
		case "/dev/fuse":
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == fuseDev.Rdev {
				unix.Close(fd)
			}
		}
	})
}

// eachThreadFd calls fn with every descriptor of the calling thread's
// descriptor table (but the one it reads the table by) and the kernel's
// name of it, the link's text in /proc/thread-self/fd.
//
// Never fstat a descriptor only to learn what it is: the table holds the
// roots of other mounts of this daemon (fsmount's descriptors), and an
// fstat of one is a GETATTR to this very daemon, made before this thread
// let go of the /dev/fuse descriptors. Killed then, the daemon would stay
// a zombie behind this thread, as the comment above says. The link's text
// is read without asking the file's filesystem; only a descriptor named
// /dev/fuse is then checked to be the device. A descriptor that cannot be
// named is an error, not a skip: left open, /dev/fuse or a ring would keep
// the connection up past the daemon's death.
func eachThreadFd(fn func(fd int, target string)) error {
	dir, err := unix.Open("/proc/thread-self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the descriptor table: %w", err)
	}
	defer unix.Close(dir)
	buf := make([]byte, 8<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(dir, buf)
		if err != nil {
			return fmt.Errorf("read the descriptor table: %w", err)
		}
		if n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd == dir {
			continue
		}
		target, err := os.Readlink("/proc/thread-self/fd/" + name)
		if err != nil {
			return fmt.Errorf("read what descriptor %s is: %w", name, err)
		}
		fn(fd, target)
	}
	return nil
}
