package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Reaching a jail's network from the daemon. A socket belongs to the
// network namespace it was made in for its whole life, whatever thread
// uses it later: so the daemon makes one on a thread that entered the
// jail's namespace for the moment of the socket(2) call (InNetNS), goes
// back, and connects from wherever it likes. This works in every network
// mode: in "none" the socket sees the jail's own loopback, which nothing
// on the host can reach otherwise; in "host" it is the host's.
//
// The namespace is found through the init's pid (/proc/<pid>/ns/net). The
// init is the daemon's child, and a child's pid is not given to another
// process before it is reaped: Close reaps it holding reapMu for writing,
// and NetNS opens the file holding it for reading, after it checked that
// the init was not reaped. An init that died and was not reaped yet is a
// zombie, whose namespaces are gone: the open fails, it never finds
// another process's.

// ErrNotAddress refuses a Dial to a host name: the daemon's resolver is
// not the jail's, so a name would be resolved in the wrong place.
var ErrNotAddress = errors.New("jail: dial: the host must be an IP address or localhost")

// NetNS opens the jail's network namespace (the init's
// /proc/<pid>/ns/net), for setns(2) or to keep it. The caller closes the
// file; it keeps the namespace alive while open, even past the jail's
// end. It fails once the jail ended (ErrInitGone).
func (j *Jail) NetNS() (*os.File, error) {
	if err := j.Err(); err != nil {
		return nil, err
	}
	f, err := j.openNetNS()
	if err != nil {
		// A zombie init's namespaces are gone: the jail ended.
		if dead := j.Err(); dead != nil && !errors.Is(err, ErrInitGone) {
			return nil, fmt.Errorf("%w: open its network namespace: %w", ErrInitGone, err)
		}
		return nil, err
	}
	return f, nil
}

// openNetNS opens the init's network namespace by its pid, unless Close
// reaped it. reapMu is a leaf: no other lock is taken under it.
func (j *Jail) openNetNS() (*os.File, error) {
	j.reapMu.RLock()
	defer j.reapMu.RUnlock()
	if j.reaped {
		return nil, fmt.Errorf("%w: the jail is closed", ErrInitGone)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", j.init.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("jail: open its network namespace: %w", err)
	}
	return f, nil
}

// InNetNS runs fn on an OS thread that is in the jail's network namespace
// for the length of the call, and in the daemon's before and after it:
// what fn creates (a socket, a listener) belongs to the jail's network,
// and keeps belonging to it when used from any thread. fn must do only
// that: no blocking, no goroutine it waits for (a goroutine it starts
// runs elsewhere, in the daemon's namespace). It fails, without calling
// fn, once the jail ended.
func (j *Jail) InNetNS(fn func() error) error {
	ns, err := j.NetNS()
	if err != nil {
		return err
	}
	defer ns.Close()
	return inNetNS(int(ns.Fd()), fn)
}

// inNetNS runs fn on a locked thread moved into the network namespace ns,
// then moves the thread back to the namespace it came from. A thread that
// cannot be moved back is never unlocked: its goroutine returns locked,
// and the runtime ends the thread instead of running other goroutines in
// the jail's network. Never on the main thread, which the runtime parks
// instead of ending it (and whose namespace /proc/self/net shows): a
// goroutine that finds itself there holds the main thread and tries again
// from another, as onDiscardedThread does.
func inNetNS(ns int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- inNetNS(ns, fn)
			runtime.UnlockOSThread()
			return
		}
		// The thread's own namespace: the daemon's (no goroutine leaves
		// a thread elsewhere unlocked), to go back to.
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("jail: open the daemon's network namespace: %w", err)
			return
		}
		defer unix.Close(own)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("jail: enter the jail's network namespace: %w", err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(own, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread ends with this goroutine.
			errc <- errors.Join(fnErr, fmt.Errorf("jail: back to the daemon's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// Dial connects to addr inside the jail's network namespace: "tcp",
// "tcp4" or "tcp6" (a stream) or "udp", "udp4", "udp6" (a connected
// datagram socket), to an IP address and port ("127.0.0.1:3000",
// "[::1]:3000"); the host "localhost" or "" is the loopback. A name is
// refused (ErrNotAddress): the daemon's resolver is not the jail's. ctx
// bounds the connection's set-up, not the connection. It fails once the
// jail ended.
func (j *Jail) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ns, err := j.NetNS()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: jailAddr(addr), Err: err}
	}
	defer ns.Close()
	return DialIn(ctx, ns, network, addr)
}

// DialIn is Dial in the network namespace ns, an open
// /proc/<pid>/ns/net (NetNS's, or a process's the caller holds): for
// code that holds a namespace rather than a Jail (a benchmark, a tool).
func DialIn(ctx context.Context, ns *os.File, network, addr string) (net.Conn, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: jailAddr(addr), Err: err}
	}
	sa, family, typ, err := sockaddrOf(network, addr)
	if err != nil {
		return nil, opErr(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(err)
	}
	fd := -1
	err = inNetNS(int(ns.Fd()), func() error {
		var err error
		fd, err = unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("jail: socket: %w", err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, opErr(err)
	}
	// Nonblocking, it goes to the runtime's poller: the wait for the
	// connection honours ctx.
	f := os.NewFile(uintptr(fd), "jail-socket")
	defer f.Close() // FileConn holds a copy
	if err := connect(ctx, f, sa); err != nil {
		return nil, opErr(err)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, opErr(err)
	}
	return c, nil
}

// connect connects the nonblocking socket f to sa, waiting for it until
// ctx ends.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var connErr error
	if err := rc.Control(func(fd uintptr) { connErr = unix.Connect(int(fd), sa) }); err != nil {
		return err
	}
	switch {
	case connErr == nil:
		return nil
	case !errors.Is(connErr, unix.EINPROGRESS):
		return os.NewSyscallError("connect", connErr)
	}
	if dl, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var soErr error
	err = rc.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			soErr = os.NewSyscallError("getsockopt", err)
			return true
		case v != 0:
			soErr = os.NewSyscallError("connect", unix.Errno(v))
			return true
		}
		// No error yet: connected, or still connecting (the first
		// call comes before any wait).
		_, err = unix.Getpeername(int(fd))
		return err == nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return soErr
}

// sockaddrOf parses a Dial's network and address.
func sockaddrOf(network, addr string) (sa unix.Sockaddr, family, typ int, err error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		typ = unix.SOCK_STREAM
	case "udp", "udp4", "udp6":
		typ = unix.SOCK_DGRAM
	default:
		return nil, 0, 0, fmt.Errorf("jail: dial: network %q is not tcp or udp", network)
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("jail: dial: %w", err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, 0, 0, fmt.Errorf("jail: dial: port %q is not a number from 1 to 65535", portText)
	}
	var ip netip.Addr
	switch host {
	case "", "localhost":
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if network[len(network)-1] == '6' {
			ip = netip.IPv6Loopback()
		}
	default:
		if ip, err = netip.ParseAddr(host); err != nil || ip.Zone() != "" {
			return nil, 0, 0, fmt.Errorf("%w, not %q", ErrNotAddress, host)
		}
		ip = ip.Unmap()
	}
	switch last := network[len(network)-1]; {
	case ip.Is4() && last == '6', ip.Is6() && last == '4':
		return nil, 0, 0, fmt.Errorf("jail: dial: %s is not a %s address", ip, network)
	case ip.Is4():
		return &unix.SockaddrInet4{Port: int(port), Addr: ip.As4()}, unix.AF_INET, typ, nil
	default:
		return &unix.SockaddrInet6{Port: int(port), Addr: ip.As16()}, unix.AF_INET6, typ, nil
	}
}

// jailAddr is an address in a jail's network, for errors.
type jailAddr string

func (a jailAddr) Network() string { return "jail" }
func (a jailAddr) String() string  { return string(a) }
