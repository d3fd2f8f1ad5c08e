// Package netenv builds, for tests and benchmarks, the network a jail's
// traffic meets: namespaces the caller makes, linked to the host as the
// internet would be, with servers of the caller's own in them. No traffic
// goes anywhere but loopback and these namespaces.
//
// Tests use the helpers that take a testing.TB (NewNS, NewWorld, Listen,
// Route): each cleans up at the test's end. A program (a benchmark) uses
// the core they are built on, OpenNS and OpenWorld, and calls Close when
// finished; if the program dies first, the namespace goes with its last
// descriptor, and the world's link with its namespace, so nothing stays.
package netenv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
	"warren/network/egress"
)

// NS is a network namespace a test made.
type NS struct {
	h netns.NsHandle
}

// Fd is a descriptor of the namespace (for egress.Network.Attach).
func (ns *NS) Fd() int { return int(ns.h) }

// NewNS makes an empty network namespace with its loopback up; it goes at
// the test's end (once the sockets made in it are closed).
func NewNS(t testing.TB) *NS {
	t.Helper()
	testenv.RequireRoot(t)
	ns, err := OpenNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// OpenNS makes an empty network namespace with its loopback up. Call
// Close when finished; the namespace goes once the sockets made in it are
// closed too.
func OpenNS() (*NS, error) {
	var h netns.NsHandle
	err := onThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		h, err = netns.New() // moves this thread into it
		if err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if serr := netns.Set(orig); serr != nil {
			return errThreadLost{serr}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("a network namespace: %w", err)
	}
	return &NS{h: h}, nil
}

// Close lets the namespace go (its descriptor closed).
func (ns *NS) Close() error { return ns.h.Close() }

// errThreadLost says a thread could not go back to the daemon's
// namespace: onThread leaves it locked, so the runtime ends it.
type errThreadLost struct{ error }

// onThread runs fn on a locked thread of its own, unlocked after unless fn
// failed to go back to where it was.
func onThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := fn()
		var lost errThreadLost
		if !errors.As(err, &lost) {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// Do runs fn in the namespace: a socket fn makes is the namespace's, and
// stays so wherever it is used after.
func (ns *NS) Do(fn func() error) error {
	return onThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		if err := netns.Set(ns.h); err != nil {
			return err
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			return errThreadLost{err}
		}
		return ferr
	})
}

// Listen opens a listener in the namespace, closed at the test's end.
func (ns *NS) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = net.Listen(network, addr); return }); err != nil {
		t.Fatalf("listen on %s in a test namespace: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ListenPacket opens a packet socket in the namespace, closed at the
// test's end.
func (ns *NS) ListenPacket(t testing.TB, network, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket(network, addr); return }); err != nil {
		t.Fatalf("listen on %s in a test namespace: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Dial connects from the namespace.
func (ns *NS) Dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) { c, err = net.Dial(network, addr); return })
	return c, err
}

// World is a namespace linked to the host by a veth, on a range no route
// of the host used: reached through the host's routing (and a daemon's
// NAT) the way the internet would be.
type World struct {
	*NS
	// Addr is the world's end of the link; Host the host's.
	Addr, Host netip.Addr
	link       string
}

var worlds atomic.Int32

// worldLock is held by the one test world of the host: its range and the
// addresses routed into it (Route) are the host's, so the tests of every
// package that make a world (go test runs packages at once) take turns.
const worldLock = "/run/warren-test-world.lock"

// NewWorld makes a world on TestNet3 (203.0.113.0/24): the world at .1,
// the host at .254; it goes at the test's end. It waits for any other
// test's world of the host, in this process or another, to go first.
func NewWorld(t testing.TB) *World {
	t.Helper()
	testenv.RequireRoot(t)
	lock, err := os.OpenFile(worldLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("the world's lock: %v", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		t.Fatalf("the world's lock: %v", err)
	}
	// Registered first, so released last: after the world's link,
	// routes and namespace are gone.
	t.Cleanup(func() { lock.Close() })
	w, err := OpenWorld(TestNet3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// The ranges for worlds: no route of a host uses them (RFC 5737). The
// tests' worlds are on TestNet3; a benchmark's on TestNet2, so that it
// never meets a test's. TEST-NET-1 is this machine's own network.
var (
	TestNet2 = netip.MustParsePrefix("198.51.100.0/24")
	TestNet3 = netip.MustParsePrefix("203.0.113.0/24")
)

// ErrTaken says a world's range is in use on the host.
var ErrTaken = errors.New("netenv: the world's range is taken")

// OpenWorld makes a world on an IPv4 range p of /8 to /30: the world at
// its first address, the host at its last but one (.1 and .254 of a /24).
// One world at a time per range: it fails if a route of the host already
// covers the world's address (another world is up). Call Close when
// finished; on failure nothing of it is left.
func OpenWorld(p netip.Prefix) (w *World, err error) {
	p = p.Masked()
	if !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 30 {
		return nil, fmt.Errorf("a world's range is IPv4, /8 to /30, not %s", p)
	}
	last := p.Addr().As4()
	for i, m := 0, uint32(1)<<(32-p.Bits())-1; i < 4; i++ {
		last[3-i] |= byte(m >> (8 * i))
	}
	addr, host := p.Addr().Next(), netip.AddrFrom4(last).Prev()
	if r, ok := routed(addr); ok {
		return nil, fmt.Errorf("%w: the host already routes %s (%s): is another world up?", ErrTaken, addr, r)
	}
	ns, err := OpenNS()
	if err != nil {
		return nil, err
	}
	w = &World{NS: ns, Addr: addr, Host: host,
		link: "wtest" + strconv.Itoa(unix.Getpid()%10000) + "-" + strconv.Itoa(int(worlds.Add(1))%10)}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: w.link}, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns.Fd())}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("the world's link: %w", err)
	}
	hl, err := netlink.LinkByName(w.link)
	if err != nil {
		return nil, fmt.Errorf("the world's link: %w", err)
	}
	if err := netlink.AddrAdd(hl, &netlink.Addr{IPNet: ipNet(w.Host, p.Bits())}); err != nil {
		return nil, fmt.Errorf("the host's address in the world: %w", err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		return nil, fmt.Errorf("the world's link up: %w", err)
	}
	err = ns.Do(func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(w.Addr, p.Bits())}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		// Replies to any address go back to the host.
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: w.Host.AsSlice()})
	})
	if err != nil {
		return nil, fmt.Errorf("the world's end: %w", err)
	}
	return w, nil
}

// routed says whether a route of the host's main table, other than a
// default route, covers a, and which.
func routed(a netip.Addr) (string, bool) {
	routes, err := egress.Dump(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return "", false
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones > 0 && r.Dst.Contains(a.AsSlice()) {
			return r.Dst.String(), true
		}
	}
	return "", false
}

// Close takes the world away: its link (both ends, with the host's
// address and routes on it), then its namespace.
func (w *World) Close() error {
	var err error
	if l, lerr := netlink.LinkByName(w.link); lerr == nil {
		err = netlink.LinkDel(l)
	}
	return errors.Join(err, w.NS.Close())
}

// Route sends the traffic of one more address (a /32: a metadata or a
// private address a test must see refused) into the world, where it is
// one of the world's own: a leak reaches the test's own listener, never
// the machine's network.
func (w *World) Route(t testing.TB, a netip.Addr) {
	t.Helper()
	host, err := netlink.LinkByName(w.link)
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipNet(a, 32), Gw: w.Addr.AsSlice()}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("route %s into the world: %v", a, err)
	}
	t.Cleanup(func() { netlink.RouteDel(r) })
	err = w.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(a, 32)})
	})
	if err != nil {
		t.Fatalf("address %s in the world: %v", a, err)
	}
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// Serve answers every connection of l with greeting, then echoes: a
// client that reads the greeting knows it reached this listener.
func Serve(l net.Listener, greeting string) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, greeting)
				buf := make([]byte, 32<<10)
				for {
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
}
