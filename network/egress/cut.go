package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The TCP states a socket can be cut in: a connection under way or open.
// Listening, TIME_WAIT and closed sockets have nothing to learn.
var cutStates = map[uint8]bool{
	unix.BPF_TCP_ESTABLISHED: true, unix.BPF_TCP_SYN_SENT: true, unix.BPF_TCP_SYN_RECV: true,
	unix.BPF_TCP_FIN_WAIT1: true, unix.BPF_TCP_FIN_WAIT2: true, unix.BPF_TCP_CLOSE_WAIT: true,
	unix.BPF_TCP_LAST_ACK: true, unix.BPF_TCP_CLOSING: true,
}

// Cut destroys the jail's TCP connections that its policy refuses now
// (call it after SetPolicy), through sock_diag's SOCK_DESTROY in its
// network namespace ns: a process blocked in a read on one learns at once
// (ECONNABORTED), not at the connection's next packet, which may never
// come. It returns how many it cut. A kernel that cannot
// (CONFIG_INET_DIAG_DESTROY off) is logged once, and the rules' cut at
// the next packet stays the only one.
func (l *Link) Cut(ns int) (int, error) {
	n := l.n
	if n.noDestroy.Load() {
		return 0, nil
	}
	refused := l.refusedNow()
	h, err := netlink.NewHandleAt(netns.NsHandle(ns), unix.NETLINK_INET_DIAG)
	if err != nil {
		return 0, fmt.Errorf("egress: sock_diag in the jail's namespace of %s: %w", l.name, err)
	}
	defer h.Close()
	socks, err := Dump(func() ([]*netlink.Socket, error) { return h.SocketDiagTCP(unix.AF_INET) })
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return 0, fmt.Errorf("egress: list the TCP sockets of %s: %w", l.name, err)
	}
	cut := 0
	for _, s := range socks {
		local, ok1 := netip.AddrFromSlice(s.ID.Source)
		remote, ok2 := netip.AddrFromSlice(s.ID.Destination)
		// Its own loopback connections and the resolver are the jail's
		// to keep.
		if !ok1 || !ok2 || local.Unmap() != l.addr || remote.Unmap() == n.resolver || !cutStates[s.State] || !refused(remote.Unmap()) {
			continue
		}
		err := h.SocketDestroy(
			&net.TCPAddr{IP: s.ID.Source, Port: int(s.ID.SourcePort)},
			&net.TCPAddr{IP: s.ID.Destination, Port: int(s.ID.DestinationPort)})
		switch {
		case err == nil:
			cut++
		case errors.Is(err, unix.ENOENT):
			// It closed meanwhile.
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM):
			if n.noDestroy.CompareAndSwap(false, true) {
				n.log.Warn("the kernel does not destroy sockets (CONFIG_INET_DIAG_DESTROY): a refused open connection is cut at its next packet only", "error", err)
			}
			return cut, nil
		default:
			return cut, fmt.Errorf("egress: cut %s's connection to %s: %w", l.name, remote, err)
		}
	}
	return cut, nil
}

// refusedNow returns whether the jail's policy refuses an address now, as
// its rules do (the never and private ranges, the deny ranges, and under
// the default deny all but the allowed ranges and unexpired answers).
func (l *Link) refusedNow() func(netip.Addr) bool {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	p := l.policy
	now := time.Now()
	resolved := make(map[netip.Addr]bool)
	for _, a := range l.names {
		if a.expires.After(now) {
			for _, addr := range a.addrs {
				resolved[addr.Unmap()] = true
			}
		}
	}
	never := append(mustPrefixes(neverRanges), n.subnet)
	private, privok := mustPrefixes(privateRanges), n.cfg.AllowPrivate
	in := func(a netip.Addr, ps []netip.Prefix) bool {
		for _, q := range ps {
			if q.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(a netip.Addr) bool {
		switch {
		case in(a, never), in(a, private) && !in(a, privok), in(a, p.Deny):
			return true
		case !p.DefaultDeny:
			return false
		}
		return !in(a, p.Allow) && !resolved[a]
	}
}
