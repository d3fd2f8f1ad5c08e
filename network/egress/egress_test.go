package egress_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"warren/internal/netenv"
	"warren/network/egress"
)

func openNetwork(t *testing.T, cfg egress.Config) *egress.Network {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	cfg.ID = hex.EncodeToString(b)
	n, err := egress.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

func attach(t *testing.T, n *egress.Network, p egress.Policy) (*netenv.NS, *egress.Link) {
	t.Helper()
	ns := netenv.NewNS(t)
	l, err := n.Attach(context.Background(), ns.Fd(), p)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return ns, l
}

// greet dials addr from ns and says whether the greeting came.
func greet(ns *netenv.NS, addr string, want string) error {
	c, err := dialTimeout(ns, addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != want {
		return errors.New("greeted by " + line)
	}
	return nil
}

func dialTimeout(ns *netenv.NS, addr string, d time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, d); return })
	return c, err
}

// refusedFast says a connect failed at once with a refusal, not a timeout.
func refusedFast(t *testing.T, ns *netenv.NS, addr string) {
	t.Helper()
	start := time.Now()
	c, err := dialTimeout(ns, addr, 3*time.Second)
	if err == nil {
		c.Close()
		t.Errorf("%s: reached, want refused", addr)
		return
	}
	if !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) && !errors.Is(err, unix.EACCES) {
		t.Errorf("%s: %v after %v, want refused at once", addr, err, time.Since(start))
	}
}

func TestReachAndRefuse(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	meta := netip.MustParseAddr("169.254.169.254")
	w.Route(t, meta)
	metaL := w.Listen(t, "tcp", meta.String()+":80")
	netenv.Serve(metaL, "metadata")
	priv := netip.MustParseAddr("192.168.250.7")
	w.Route(t, priv)
	privL := w.Listen(t, "tcp", priv.String()+":80")
	netenv.Serve(privL, "private")
	// A listener of the host, on every address.
	hostL, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	netenv.Serve(hostL, "host")
	hostPort := strconv.Itoa(hostL.Addr().(*net.TCPAddr).Port)

	n := openNetwork(t, egress.Config{})
	ns, link := attach(t, n, egress.Policy{})
	otherNS, other := attach(t, n, egress.Policy{})
	otherL := otherNS.Listen(t, "tcp", other.Addr().String()+":8080")
	netenv.Serve(otherL, "other jail")

	if err := greet(ns, out.Addr().String(), "world"); err != nil {
		t.Fatalf("the world from a jail: %v", err)
	}
	refusedFast(t, ns, meta.String()+":80")
	refusedFast(t, ns, priv.String()+":80")
	refusedFast(t, ns, net.JoinHostPort(other.Addr().String(), "8080"))
	refusedFast(t, ns, net.JoinHostPort(link.Gateway().String(), hostPort))
	refusedFast(t, ns, net.JoinHostPort(n.ResolverAddr().Addr().String(), hostPort))
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		refusedFast(t, ns, net.JoinHostPort(a.IP.String(), hostPort))
	}
	// IPv6 is off in the jail: no route, at once.
	refusedFast(t, ns, "[::1]:"+hostPort)
	refusedFast(t, ns, "[2001:db8::1]:80")

	// The operator's exception opens a private range, for every jail of
	// that daemon.
	n2 := openNetwork(t, egress.Config{AllowPrivate: []netip.Prefix{netip.PrefixFrom(priv, 32)}})
	ns2, _ := attach(t, n2, egress.Policy{})
	if err := greet(ns2, priv.String()+":80", "private"); err != nil {
		t.Errorf("an allowed private address: %v", err)
	}
	refusedFast(t, ns2, meta.String()+":80")
}

func TestPolicy(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	second := netip.MustParseAddr("198.51.100.9") // TEST-NET-2, routed into the world
	w.Route(t, second)
	secondL := w.Listen(t, "tcp", second.String()+":80")
	netenv.Serve(secondL, "second")

	n := openNetwork(t, egress.Config{})
	world := netip.PrefixFrom(w.Addr, 32)
	ns, link := attach(t, n, egress.Policy{Deny: []netip.Prefix{world}})
	refusedFast(t, ns, out.Addr().String())
	if err := greet(ns, second.String()+":80", "second"); err != nil {
		t.Errorf("default allow: %v", err)
	}

	// Default deny: only what is allowed, by range or by an answer.
	if err := link.SetPolicy(egress.Policy{DefaultDeny: true, Allow: []netip.Prefix{world}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := greet(ns, out.Addr().String(), "world"); err != nil {
		t.Errorf("an allowed range: %v", err)
	}
	refusedFast(t, ns, second.String()+":80")
	if err := link.AllowResolved("second.test", []netip.Addr{second}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := greet(ns, second.String()+":80", "second"); err != nil {
		t.Errorf("a resolved address: %v", err)
	}

	// An open connection the new rules refuse is cut.
	c, err := dialTimeout(ns, out.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := link.SetPolicy(egress.Policy{DefaultDeny: true}, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write([]byte("ping\n"))
	if line, err := r.ReadString('\n'); err == nil {
		t.Errorf("a refused connection still echoes %q", line)
	} else if !errors.Is(err, unix.ECONNRESET) {
		t.Errorf("a refused connection: %v, want reset", err)
	}
	// The name kept its answer across the change.
	if err := greet(ns, second.String()+":80", "second"); err != nil {
		t.Errorf("a resolved address after a change: %v", err)
	}
	// An open connection the new rules still allow goes on.
	link.SetPolicy(egress.Policy{Allow: []netip.Prefix{world}}, nil)
	c2, err := dialTimeout(ns, out.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	r2.ReadString('\n')
	link.SetPolicy(egress.Policy{Allow: []netip.Prefix{world}, Deny: []netip.Prefix{netip.PrefixFrom(second, 32)}}, nil)
	c2.SetDeadline(time.Now().Add(3 * time.Second))
	c2.Write([]byte("ping\n"))
	if line, err := r2.ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("an allowed connection after a change: %q, %v", line, err)
	}
}

func TestMaxConnections(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	n := openNetwork(t, egress.Config{})
	ns, _ := attach(t, n, egress.Policy{MaxConnections: 5})
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range 5 {
		c, err := dialTimeout(ns, out.Addr().String(), 2*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	refusedFast(t, ns, out.Addr().String())
}

func TestCloseLeavesNothing(t *testing.T) {
	n := openNetwork(t, egress.Config{})
	ns := netenv.NewNS(t)
	l, err := n.Attach(context.Background(), ns.Fd(), egress.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	links, _ := netlink.LinkList()
	for _, k := range links {
		if strings.HasPrefix(k.Attrs().Name, n.LinkPrefix()) {
			t.Errorf("link %s is left", k.Attrs().Name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := c.ListTables()
	for _, tb := range tables {
		if tb.Name == n.Table() {
			t.Errorf("table %s is left", tb.Name)
		}
	}
}

// TestResolvedLifetimes: an address lives in a jail's set as long as the
// latest answer that gave it; a shorter answer for another name does not
// cut it short.
func TestResolvedLifetimes(t *testing.T) {
	n := openNetwork(t, egress.Config{})
	_, link := attach(t, n, egress.Policy{DefaultDeny: true})
	a := netip.MustParseAddr("198.51.100.20")
	expires := func() time.Duration {
		t.Helper()
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		table := &nftables.Table{Name: n.Table(), Family: nftables.TableFamilyINet}
		sets, err := c.GetSets(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if !s.HasTimeout {
				continue
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, el := range els {
				if netip.AddrFrom4([4]byte(el.Key)) == a {
					return el.Expires
				}
			}
		}
		return 0
	}
	if err := link.AllowResolved("one.test", []netip.Addr{a}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := expires(); e < 20*time.Second || e > 30*time.Second {
		t.Fatalf("an answer of 30 s: the address expires in %v", e)
	}
	if err := link.AllowResolved("two.test", []netip.Addr{a}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := expires(); e < 20*time.Second {
		t.Errorf("a shorter answer for another name cut the address to %v", e)
	}
	if err := link.AllowResolved("one.test", []netip.Addr{a}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if e := expires(); e < 9*time.Minute {
		t.Errorf("a longer answer left the address at %v", e)
	}
}

// TestJailChainsFailClosed: the base chains reach a jail's chains by a
// jump, and refuse whatever comes back: a jail's chain left without a
// verdict (flushed, half made) refuses its traffic rather than letting it
// through by the base chain's accept policy.
func TestJailChainsFailClosed(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	n := openNetwork(t, egress.Config{})
	ns, _ := attach(t, n, egress.Policy{})
	if err := greet(ns, out.Addr().String(), "world"); err != nil {
		t.Fatalf("the world before: %v", err)
	}
	// Every chain of the jail emptied behind the daemon's back.
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: n.Table(), Family: nftables.TableFamilyINet}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	flushed := 0
	for _, ch := range chains {
		if ch.Table.Name == n.Table() && ch.Hooknum == nil && ch.Name != "refuse" {
			c.FlushChain(&nftables.Chain{Name: ch.Name, Table: table})
			flushed++
		}
	}
	if err := c.Flush(); err != nil || flushed != 3 {
		t.Fatalf("flush the jail's %d chains: %v", flushed, err)
	}
	refusedFast(t, ns, out.Addr().String())
}
