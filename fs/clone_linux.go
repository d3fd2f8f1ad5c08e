package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A root served by a Pool is an entry of its connection's top folder, and
// the root's mount is a bind of that entry: open_tree(OPEN_TREE_CLONE) of
// the connection's own (never attached) mount, at the entry's name. The
// walk to that name is a LOOKUP sent to this very daemon, the one kind of
// request the daemon must never make from a thread that shares its
// descriptor table (doc.go, "Requests to its own mounts": killed while it
// waits, the daemon would stay a zombie holding /dev/fuse open, and its
// mounts would hang instead of failing).
//
// So the clones are made by a cloner: one locked thread with a descriptor
// table of its own, in which every descriptor but its end of a socket pair
// and the runtime's own is closed. The daemon hands it the connection's
// mount descriptor and the name over the pair (SCM_RIGHTS) and gets the
// clone's descriptor back the same way. If the daemon is killed while a
// LOOKUP is in flight, its other threads exit, the last /dev/fuse
// descriptor closes, the kernel aborts the connection and the cloner's
// request fails: nothing waits for an answer no one can give.

// cloner makes the binds of a Pool's roots. Its thread ends when close
// closes the daemon's end of the pair.
type cloner struct {
	mu   sync.Mutex // one request at a time on the pair
	sock int        // the daemon's end; guarded by mu
	done chan struct{}
}

// startCloner starts the cloner's thread.
func startCloner() (*cloner, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fs: cloner: socket pair: %w", err)
	}
	c := &cloner{sock: pair[0], done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(c.done)
		_ = onThreadWithOwnFiles(func() error {
			if err := closeAllBut(pair[1]); err != nil {
				ready <- fmt.Errorf("fs: cloner: %w", err)
				unix.Close(pair[1])
				return err
			}
			ready <- nil
			serveClones(pair[1])
			unix.Close(pair[1])
			return nil
		})
	}()
	err = <-ready
	// The thread has its copy of its end (or failed): the daemon's goes.
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		<-c.done
		return nil, err
	}
	return c, nil
}

// apart runs fn while no clone is under way: for an invalidation of an
// entry of a top folder, which the kernel makes holding that folder's
// lock, exclusive, while a clone's LOOKUP holds it shared until the
// daemon answers. Killed with both under way, the daemon would never
// die: the invalidating thread, waiting for the lock in the kernel (not
// killable), keeps /dev/fuse open, so the connection is not aborted, so
// the LOOKUP is never answered, so the lock is never let go. One at a
// time, whichever is under way at the kill ends: a LOOKUP fails once
// the connection is aborted, an invalidation finds the lock free.
func (c *cloner) apart(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn()
}

// clone returns a detached bind mount of the entry name of the mount
// mntFd's root folder.
func (c *cloner) clone(mntFd int, name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sock < 0 {
		return -1, errors.New("fs: cloner: closed")
	}
	if err := unix.Sendmsg(c.sock, []byte(name), unix.UnixRights(mntFd), nil, 0); err != nil {
		return -1, fmt.Errorf("fs: cloner: send: %w", err)
	}
	buf := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(c.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("fs: cloner: receive: %w", err)
		}
		if n != 4 {
			return -1, errors.New("fs: cloner: the cloner's thread ended")
		}
		fds, err := rightsOf(oob[:oobn])
		if err != nil {
			return -1, fmt.Errorf("fs: cloner: %w", err)
		}
		if errno := syscall.Errno(binary.LittleEndian.Uint32(buf)); errno != 0 {
			closeAll(fds)
			return -1, fmt.Errorf("fs: clone the tree of %s: %w", name, errno)
		}
		if len(fds) != 1 {
			closeAll(fds)
			return -1, fmt.Errorf("fs: cloner: got %d descriptors, want 1", len(fds))
		}
		return fds[0], nil
	}
}

// close ends the cloner's thread and waits for it.
func (c *cloner) close() {
	c.mu.Lock()
	if c.sock >= 0 {
		unix.Close(c.sock)
		c.sock = -1
	}
	c.mu.Unlock()
	<-c.done
}

// serveClones answers clone requests on sock until its peer closes it. It
// runs on the cloner's thread.
func serveClones(sock int) {
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4))
	reply := make([]byte, 4)
	for {
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		fds, err := rightsOf(oob[:oobn])
		var errno syscall.Errno = unix.EBADMSG
		tree := -1
		if err == nil && len(fds) == 1 {
			// One name below the mount's root, no link followed, no
			// automount triggered: the names are the pool's own.
			tree, err = unix.OpenTree(fds[0], string(buf[:n]), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_NO_AUTOMOUNT|unix.AT_SYMLINK_NOFOLLOW)
			errno = 0
			if err != nil {
				errno = errnoOf(err)
			}
		}
		closeAll(fds)
		binary.LittleEndian.PutUint32(reply, uint32(errno))
		var rights []byte
		if tree >= 0 {
			rights = unix.UnixRights(tree)
		}
		err = unix.Sendmsg(sock, reply, rights, nil, 0)
		if tree >= 0 {
			unix.Close(tree)
		}
		if err != nil {
			return
		}
	}
}

// rightsOf returns the descriptors an SCM_RIGHTS message carried.
func rightsOf(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("parse descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return unix.EIO
}

// closeAllBut closes, in the calling thread's descriptor table, every
// descriptor but keep and the runtime's own (its epoll and its wake-up
// eventfd, which it may use on this thread): the /dev/fuse descriptors
// and io_uring rings above all, which would keep the connections up past
// the daemon's death, but also every file, socket and lock the table held
// when it was copied (the API socket, the store's lock), which must not
// outlive their closing in the daemon's own table. As in
// closeFuseDevices, a descriptor is told by the kernel's name of it
// (readlink), never by fstat, which could ask one of the daemon's mounts.
func closeAllBut(keep int) error {
	return eachThreadFd(func(fd int, target string) {
		switch {
		case fd == keep, target == "anon_inode:[eventpoll]", target == "anon_inode:[eventfd]":
		default:
			unix.Close(fd)
		}
	})
}
