package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Policy is what one jail may reach, on top of what no jail ever reaches
// (the host, loopback, link-local and metadata, other jails, private
// ranges but the operator's exceptions).
type Policy struct {
	// DefaultDeny refuses every address Allow does not list and the
	// resolver did not answer for an allowed name (AllowResolved).
	DefaultDeny bool
	// Allow and Deny are IPv4 ranges (IPv6 ones are ignored: the jails
	// have no IPv6). Deny wins.
	Allow, Deny []netip.Prefix
	// MaxConnections bounds the jail's open connections; 0 means
	// DefaultMaxConnections.
	MaxConnections int
	// BytesPerSecond shapes the jail's traffic each way; 0 means none.
	BytesPerSecond int64
}

// DefaultMaxConnections bounds a jail's open connections by default: one
// jail cannot fill the host's conntrack table.
const DefaultMaxConnections = 1024

// Link is one jail's link: a veth whose far end is the jail's eth0, its
// addresses and routes, and its chains and sets in the daemon's table.
// Close takes them away.
type Link struct {
	n        *Network
	index    int
	name     string
	host     netip.Addr // the jail's gateway, on the host's end
	addr     netip.Addr // the jail's own
	chains   [3]*nftables.Chain
	allow    *nftables.Set
	deny     *nftables.Set
	resolved *nftables.Set

	// Guarded by n.mu.
	policy Policy
	mark   uint32
	// names are the answers the resolver gave for allowed names, by name,
	// with when they expire: a new policy keeps those of names it still
	// allows.
	names  map[string]answer
	closed bool
}

type answer struct {
	addrs   []netip.Addr
	expires time.Time
}

// Addr is the jail's address (its source, as the resolver sees it).
func (l *Link) Addr() netip.Addr { return l.addr }

// Gateway is the host's end of the jail's link.
func (l *Link) Gateway() netip.Addr { return l.host }

// Name is the host's end's name.
func (l *Link) Name() string { return l.name }

// Attach gives the network namespace ns (a descriptor of it, such as
// /proc/<pid>/ns/net open) a link to the host with policy p. The
// namespace's processes must not run anything before it returns (a jail's
// init waits for its setup).
func (n *Network) Attach(ctx context.Context, ns int, p Policy) (*Link, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("egress: the network is closed")
	}
	i, err := n.allocate()
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	n.mu.Unlock()
	host, addr := n.addrs(i)
	l := &Link{n: n, index: i, name: n.linkName(i), host: host, addr: addr, names: make(map[string]answer)}
	if err := l.wire(ctx, ns, p); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// allocate takes a free jail number. n.mu is held.
func (n *Network) allocate() (int, error) {
	slots := n.slots()
	for range slots {
		i := n.next
		n.next = n.next%slots + 1
		if !n.used[i] {
			n.used[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("egress: all %d addresses of subnet %s are taken", slots, n.subnet)
}

// wire makes the veth, its addresses and routes, and the jail's rules.
func (l *Link) wire(ctx context.Context, ns int, p Policy) error {
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: l.name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("egress: add link %s: %w", l.name, err)
	}
	hostEnd, err := netlink.LinkByName(l.name)
	if err != nil {
		return fmt.Errorf("egress: find link %s: %w", l.name, err)
	}
	// No IPv6 on either end: not even a link-local address the jail
	// could reach the host's listeners through.
	if err := sysctl("ipv6/conf/"+l.name+"/disable_ipv6", "1"); err != nil {
		return err
	}
	if err := netlink.AddrAdd(hostEnd, &netlink.Addr{IPNet: ipNet(l.host, 30)}); err != nil {
		return fmt.Errorf("egress: address %s on %s: %w", l.host, l.name, err)
	}
	if err := netlink.LinkSetUp(hostEnd); err != nil {
		return fmt.Errorf("egress: set %s up: %w", l.name, err)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns))
	if err != nil {
		return fmt.Errorf("egress: netlink in the jail's namespace: %w", err)
	}
	defer h.Close()
	jailEnd, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("egress: find the jail's eth0: %w", err)
	}
	if err := h.AddrAdd(jailEnd, &netlink.Addr{IPNet: ipNet(l.addr, 30)}); err != nil {
		return fmt.Errorf("egress: address %s on the jail's eth0: %w", l.addr, err)
	}
	if err := h.LinkSetUp(jailEnd); err != nil {
		return fmt.Errorf("egress: set the jail's eth0 up: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: jailEnd.Attrs().Index, Gw: l.host.AsSlice()}); err != nil {
		return fmt.Errorf("egress: the jail's default route: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if err := l.shape(h, jailEnd, hostEnd, p.BytesPerSecond); err != nil {
		return err
	}
	return l.addRules(p)
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// shape bounds the link's rate each way with a token bucket: on the host's
// end for what the jail receives, on the jail's end (through h, a handle
// in its namespace) for what it sends. Zero takes the bounds away.
func (l *Link) shape(h *netlink.Handle, jailEnd, hostEnd netlink.Link, rate int64) error {
	if err := l.bucket(h.QdiscReplace, h.QdiscDel, jailEnd, rate); err != nil {
		return err
	}
	return l.bucket(netlink.QdiscReplace, netlink.QdiscDel, hostEnd, rate)
}

func (l *Link) bucket(replace, del func(netlink.Qdisc) error, link netlink.Link, rate int64) error {
	attrs := netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}
	if rate <= 0 {
		if err := del(&netlink.Tbf{QdiscAttrs: attrs}); err != nil && !isGone(err) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("egress: take the rate bound off %s: %w", l.name, err)
		}
		return nil
	}
	// A burst of a tenth of a second's worth (at least 64 KiB, so that a
	// slow rate still passes whole TSO segments) and a queue of a quarter
	// second's.
	burst := uint32(max(rate/10, 64<<10))
	tbf := &netlink.Tbf{QdiscAttrs: attrs, Rate: uint64(rate),
		Buffer: netlink.Xmittime(uint64(rate), burst), Limit: uint32(max(rate/4, 128<<10))}
	if err := replace(tbf); err != nil {
		return fmt.Errorf("egress: bound %s to %d bytes/s: %w", l.name, rate, err)
	}
	return nil
}

// SetRate changes the rate bound of a running jail's link both ways; ns is
// the jail's network namespace, as for Attach.
func (l *Link) SetRate(ns int, rate int64) error {
	hostEnd, err := netlink.LinkByName(l.name)
	if err != nil {
		return fmt.Errorf("egress: find link %s: %w", l.name, err)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns))
	if err != nil {
		return fmt.Errorf("egress: netlink in the jail's namespace: %w", err)
	}
	defer h.Close()
	jailEnd, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("egress: find the jail's eth0: %w", err)
	}
	return l.shape(h, jailEnd, hostEnd, rate)
}

// addRules adds the jail's sets and chains, and its entries in the maps,
// in one batch.
func (l *Link) addRules(p Policy) error {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	c, t := n.nft, n.table
	id := strconv.Itoa(l.index)
	l.allow = &nftables.Set{Table: t, Name: "a" + id, Interval: true, KeyType: nftables.TypeIPAddr}
	l.deny = &nftables.Set{Table: t, Name: "d" + id, Interval: true, KeyType: nftables.TypeIPAddr}
	l.resolved = &nftables.Set{Table: t, Name: "r" + id, HasTimeout: true, KeyType: nftables.TypeIPAddr}
	for _, s := range []*nftables.Set{l.allow, l.deny, l.resolved} {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("egress: add set %s: %w", s.Name, err)
		}
	}
	for k, name := range []string{"i", "j", "b"} {
		l.chains[k] = c.AddChain(&nftables.Chain{Name: name + id, Table: t})
	}
	if err := l.fillLocked(p); err != nil {
		n.discardLocked()
		return err
	}
	for k, m := range []*nftables.Set{n.sets.in, n.sets.out, n.sets.back} {
		// A jump, not a goto: a jail's chain that ends without a verdict
		// (it never should) comes back to the base chain, whose next rule
		// refuses every packet of the daemon's links. A goto would end in
		// the base chain's policy, accept: fail open.
		el := nftables.SetElement{Key: ifname(l.name), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: l.chains[k].Name}}
		if err := c.SetAddElements(m, []nftables.SetElement{el}); err != nil {
			return fmt.Errorf("egress: map %s to its chains: %w", l.name, err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: rules of %s: %w", l.name, err)
	}
	return nil
}

// fillLocked adds to the batch the jail's rules for policy p, in chains
// and sets flushed or new, with a new mark: a connection admitted under
// the former rules has another mark, and is judged again by the new ones
// at its next packet (cut if they refuse it). n.mu is held.
func (l *Link) fillLocked(p Policy) error {
	n := l.n
	c, t := n.nft, n.table
	l.policy = p
	l.mark = n.nextMark
	n.nextMark++
	if n.nextMark == 0 {
		n.nextMark = 1
	}
	maxConns := p.MaxConnections
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections
	}
	for _, set := range []struct {
		s  *nftables.Set
		ps []netip.Prefix
	}{{l.allow, p.Allow}, {l.deny, p.Deny}} {
		if err := c.SetAddElements(set.s, intervalElements(set.ps)); err != nil {
			return fmt.Errorf("egress: rules of %s: set %s: %w", l.name, set.s.Name, err)
		}
	}
	if err := l.addResolvedLocked(time.Now()); err != nil {
		return err
	}

	in, out, back := l.chains[0], l.chains[1], l.chains[2]
	refuse := goTo(n.sets.refuse.Name)
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(parts...)})
	}
	v := func(e expr.Any) []expr.Any { return []expr.Any{e} }
	res := n.resolver
	port := n.cfg.ResolverPort

	// To the host: the resolver's port on its address, nothing else.
	rule(in, nfproto(unix.NFPROTO_IPV6), v(drop()))
	rule(in, ip4(ip4Saddr, l.addr, false), v(drop()))
	rule(in, ip4(ip4Daddr, res, true), l4proto(unix.IPPROTO_UDP), dport(port), v(accept()))
	rule(in, ip4(ip4Daddr, res, true), l4proto(unix.IPPROTO_TCP), dport(port), v(accept()))
	rule(in, v(refuse))

	// Out: the jail's own address only; a connection of this policy
	// passes; a new one within the jail's bound of connections; then the
	// policy on the destination.
	rule(out, nfproto(unix.NFPROTO_IPV6), v(drop()))
	rule(out, ip4(ip4Saddr, l.addr, false), v(drop()))
	rule(out, ctMark(l.mark, true), v(accept()))
	rule(out, ctNew(), ctCountOver(uint32(maxConns)), v(refuse))
	l.policyRules(out, ip4Daddr)

	// Back: replies only, of connections this policy admits (judged again
	// on the source when the policy changed).
	rule(back, ctMark(l.mark, true), v(accept()))
	rule(back, []expr.Any{&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{1}}}, v(drop()))
	l.policyRules(back, ip4Saddr)
	return nil
}

// policyRules judge the far end's address (at offset: the destination of
// what the jail sends, the source of what it receives) and mark what
// passes with the policy's mark.
func (l *Link) policyRules(ch *nftables.Chain, offset uint32) {
	n := l.n
	c, t := n.nft, n.table
	refuse := goTo(n.sets.refuse.Name)
	pass := append(setCtMark(l.mark), accept())
	rule := func(parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(parts...)})
	}
	rule(ip4Set(offset, n.sets.never, true), []expr.Any{refuse})
	rule(ip4Set(offset, n.sets.private, true), ip4Set(offset, n.sets.privok, false), []expr.Any{refuse})
	rule(ip4Set(offset, l.deny, true), []expr.Any{refuse})
	if !l.policy.DefaultDeny {
		rule(pass)
		return
	}
	rule(ip4Set(offset, l.allow, true), pass)
	rule(ip4Set(offset, l.resolved, true), pass)
	rule([]expr.Any{refuse})
}

// SetPolicy applies p (but its rate: SetRate) to the running jail at once: the next connection
// follows it, and an open one it refuses is cut at its next packet. keep
// says which names resolved before still count (those p still allows).
func (l *Link) SetPolicy(p Policy, keep func(name string) bool) error {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed {
		return fmt.Errorf("egress: link %s is closed", l.name)
	}
	for name := range l.names {
		if keep == nil || !keep(name) {
			delete(l.names, name)
		}
	}
	c := n.nft
	c.FlushSet(l.allow)
	c.FlushSet(l.deny)
	c.FlushSet(l.resolved)
	for _, ch := range l.chains {
		c.FlushChain(ch)
	}
	if err := l.fillLocked(p); err != nil {
		// The batch is half made: it must never be sent.
		n.discardLocked()
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: new rules of %s: %w", l.name, err)
	}
	return nil
}

// AllowResolved lets the jail reach addrs, the answer the resolver gave it
// for an allowed name, for ttl: under a default-deny policy these are the
// only addresses a name rule opens.
func (l *Link) AllowResolved(name string, addrs []netip.Addr, ttl time.Duration) error {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed {
		return nil
	}
	now := time.Now()
	// What the set holds now: each address until the latest answer that
	// gave it expires (an unexpired answer's addresses are in the set).
	held := make(map[netip.Addr]time.Time)
	for _, old := range l.names {
		if old.expires.After(now) {
			for _, a := range old.addrs {
				if a = a.Unmap(); old.expires.After(held[a]) {
					held[a] = old.expires
				}
			}
		}
	}
	expires := now.Add(ttl)
	l.names[name] = answer{addrs: addrs, expires: expires}
	// New addresses are added; one held for less long is deleted and
	// added again, since an element keeps the timeout it was added with;
	// one held longer already is left as it is.
	var add, renew []nftables.SetElement
	for _, a := range addrs {
		if a = a.Unmap(); !a.Is4() {
			continue
		}
		b := a.As4()
		el := nftables.SetElement{Key: b[:], Timeout: ttl}
		switch until, ok := held[a]; {
		case !ok:
			add = append(add, el)
		case expires.After(until):
			renew = append(renew, el)
		}
	}
	if len(add)+len(renew) == 0 {
		return nil
	}
	c := n.nft
	if len(renew) > 0 {
		c.SetDeleteElements(l.resolved, renew)
	}
	c.SetAddElements(l.resolved, append(add, renew...))
	if err := c.Flush(); err != nil {
		// An element the kernel let expire a moment before this record
		// did is not there to delete: add them all alone.
		c.SetAddElements(l.resolved, append(add, renew...))
		if err := c.Flush(); err != nil {
			return fmt.Errorf("egress: allow %s's addresses for %s: %w", name, l.name, err)
		}
	}
	return nil
}

// addResolvedLocked adds to the batch the unexpired answers of the names
// kept. n.mu is held.
func (l *Link) addResolvedLocked(now time.Time) error {
	var els []nftables.SetElement
	seen := make(map[netip.Addr]time.Duration)
	for name, a := range l.names {
		ttl := a.expires.Sub(now)
		if ttl < time.Second {
			delete(l.names, name)
			continue
		}
		for _, addr := range a.addrs {
			if addr = addr.Unmap(); addr.Is4() && seen[addr] < ttl {
				seen[addr] = ttl
			}
		}
	}
	for addr, ttl := range seen {
		b := addr.As4()
		els = append(els, nftables.SetElement{Key: b[:], Timeout: ttl})
	}
	if len(els) > 0 {
		if err := l.n.nft.SetAddElements(l.resolved, els); err != nil {
			return fmt.Errorf("egress: rules of %s: set %s: %w", l.name, l.resolved.Name, err)
		}
	}
	return nil
}

// Close takes the jail's rules and link away (the link may have gone with
// its namespace already) and frees its address.
func (l *Link) Close() error {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var first error
	if l.chains[0] != nil && !n.closed {
		c := n.nft
		for _, m := range []*nftables.Set{n.sets.in, n.sets.out, n.sets.back} {
			c.SetDeleteElements(m, []nftables.SetElement{{Key: ifname(l.name)}})
		}
		for _, ch := range l.chains {
			c.DelChain(ch)
		}
		for _, s := range []*nftables.Set{l.allow, l.deny, l.resolved} {
			c.DelSet(s)
		}
		if err := c.Flush(); err != nil {
			first = fmt.Errorf("egress: delete the rules of %s: %w", l.name, err)
		}
	}
	if link, err := netlink.LinkByName(l.name); err == nil {
		if err := netlink.LinkDel(link); err != nil && !isGone(err) && first == nil {
			first = fmt.Errorf("egress: delete link %s: %w", l.name, err)
		}
	}
	delete(n.used, l.index)
	return first
}
