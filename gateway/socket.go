package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// socketMode lets the owner and the group of the socket connect. The peer
// uid check behind it is the second gate.
const socketMode = 0o660

// listenSocket listens on the Unix socket at path with mode socketMode,
// in group gid unless it is zero.
//
// A socket file left by a crashed daemon is removed, but only if nothing
// answers on it: a second daemon must not steal the socket of a live one.
// Any other kind of file at path is an error, never removed.
//
// The socket is made in a private (0700) folder next to path, set to its
// mode there and then renamed into place, so it is never reachable with
// the wider mode the umask would give it. The listener does not unlink the
// socket on Close (it would unlink the private name); the gateway removes
// path itself.
func listenSocket(path string, gid int) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create socket folder: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, ".warren-sock-")
	if err != nil {
		return nil, fmt.Errorf("create private socket folder: %w", err)
	}
	defer os.RemoveAll(private)

	tmp := filepath.Join(private, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set socket mode: %w", err)
	}
	if gid != 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("give the socket to group %d: %w", gid, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("move socket into place at %s: %w", path, err)
	}
	return ln, nil
}

// removeStaleSocket removes a socket at path that nobody answers on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check socket path: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("socket path %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another gateway is serving on %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("check whether %s is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
