package egress

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The daemon's table (family inet, so one table sees both families):
//
//	input    iifname vmap @in     a jail's packets to the host: jump i<N>
//	forward  iifname vmap @out    a jail's packets out: jump j<N>
//	         oifname vmap @back   packets to a jail: jump b<N>
//	         iifname/oifname w<ID>-* refuse: a link with no chain (being
//	                                made), or back from one without a verdict
//	post     masquerade of the subnet, leaving by any other link
//	refuse   tcp: reset; else icmp admin-prohibited
//
// A jail's chains start with its anti-spoofing (its link and its address
// go together: a jail cannot send as another) and end in its policy. The
// sets never (loopback, link-local and the metadata address, multicast,
// the subnet: every other jail), private (RFC 1918, CGNAT) and privok (the
// operator's exceptions) are the same for every jail. Addresses of the
// host itself never reach forward: the input chain refuses them all but
// the resolver's port.

// tableSets are the sets and maps every jail's rules refer to.
type tableSets struct {
	never, private, privok *nftables.Set
	in, out, back          *nftables.Set
	refuse                 *nftables.Chain
}

// neverRanges are refused whatever a policy says (and the subnet too).
var neverRanges = []string{"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}

// privateRanges are refused unless the operator lists an exception.
var privateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}

func mustPrefixes(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// build makes the dummy link and the table.
func (n *Network) build() error {
	if _, err := EnableForwarding(); err != nil {
		return err
	}
	// The resolver's link: a veth whose two ends stay on the host (the
	// host may have no dummy links), the far one numbered 0, the
	// resolver's slot.
	dummy := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.prefix}, PeerName: n.linkName(0)}
	if err := netlink.LinkAdd(dummy); err != nil {
		return fmt.Errorf("egress: add link %s: %w", n.prefix, err)
	}
	// The resolver's address, with the whole subnet: the subnet's route
	// claims the range for this daemon (PickSubnet of another one sees
	// it); the jails' /30s are more specific.
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.resolver.AsSlice(), Mask: net.CIDRMask(n.subnet.Bits(), 32)}}
	if err := netlink.AddrAdd(dummy, addr); err != nil {
		return fmt.Errorf("egress: address %s on %s: %w", n.resolver, n.prefix, err)
	}
	for _, name := range []string{n.linkName(0), n.prefix} {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("egress: set %s up: %w", name, err)
		}
	}

	c := n.nft
	t := c.AddTable(n.table)
	s := &n.sets
	var err error
	never := append(mustPrefixes(neverRanges), n.subnet)
	if s.never, err = n.addIntervalSet("never", never); err != nil {
		return err
	}
	if s.private, err = n.addIntervalSet("private", mustPrefixes(privateRanges)); err != nil {
		return err
	}
	var ok4 []netip.Prefix
	for _, p := range n.cfg.AllowPrivate {
		if p.Addr().Is4() {
			ok4 = append(ok4, p)
		}
	}
	if s.privok, err = n.addIntervalSet("privok", ok4); err != nil {
		return err
	}
	vmaps := []struct {
		to   **nftables.Set
		name string
	}{{&s.in, "in"}, {&s.out, "out"}, {&s.back, "back"}}
	for _, m := range vmaps {
		*m.to = &nftables.Set{Table: t, Name: m.name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
		if err := c.AddSet(*m.to, nil); err != nil {
			return fmt.Errorf("egress: add map %s: %w", m.name, err)
		}
	}
	s.refuse = c.AddChain(&nftables.Chain{Name: "refuse", Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: s.refuse, Exprs: append(l4proto(unix.IPPROTO_TCP), rejectTCP())})
	c.AddRule(&nftables.Rule{Table: t, Chain: s.refuse, Exprs: []expr.Any{rejectOther()}})

	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: vmap(expr.MetaKeyIIFNAME, s.in)})
	c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: append(ifPrefix(expr.MetaKeyIIFNAME, n.prefix+"-", true), goTo(s.refuse.Name))})

	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: vmap(expr.MetaKeyIIFNAME, s.out)})
	c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: vmap(expr.MetaKeyOIFNAME, s.back)})
	c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: append(ifPrefix(expr.MetaKeyIIFNAME, n.prefix+"-", true), goTo(s.refuse.Name))})
	c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: append(ifPrefix(expr.MetaKeyOIFNAME, n.prefix+"-", true), goTo(s.refuse.Name))})

	post := c.AddChain(&nftables.Chain{Name: "post", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(
		nfproto(unix.NFPROTO_IPV4),
		ip4In(ip4Saddr, n.subnet),
		ifPrefix(expr.MetaKeyOIFNAME, n.prefix+"-", false),
		[]expr.Any{&expr.Masq{}},
	)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: make table inet %s: %w", n.table.Name, err)
	}
	return nil
}

// vmap jumps to the chain a map gives for the packet's link.
func vmap(key expr.MetaKey, m *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: reg1},
		&expr.Lookup{SourceRegister: reg1, SetName: m.Name, SetID: m.ID, IsDestRegSet: true, DestRegister: 0},
	}
}

// addIntervalSet adds a set of IPv4 ranges to the batch.
func (n *Network) addIntervalSet(name string, ps []netip.Prefix) (*nftables.Set, error) {
	s := &nftables.Set{Table: n.table, Name: name, Interval: true, KeyType: nftables.TypeIPAddr}
	if err := n.nft.AddSet(s, intervalElements(ps)); err != nil {
		return nil, fmt.Errorf("egress: add set %s: %w", name, err)
	}
	return s, nil
}

// intervalElements are the elements of an interval set holding ps: each
// range as its first address and, marked as an interval's end, the
// address after its last. Overlapping and adjacent ranges are merged (the
// kernel refuses overlaps).
func intervalElements(ps []netip.Prefix) []nftables.SetElement {
	type span struct{ lo, hi uint64 } // hi is one past the end
	var spans []span
	for _, p := range ps {
		if !p.Addr().Unmap().Is4() {
			continue
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), 32)).Masked()
		a := p.Addr().As4()
		lo := uint64(binary.BigEndian.Uint32(a[:]))
		spans = append(spans, span{lo, lo + 1<<(32-p.Bits())})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
	var merged []span
	for _, s := range spans {
		if k := len(merged); k > 0 && s.lo <= merged[k-1].hi {
			merged[k-1].hi = max(merged[k-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	var els []nftables.SetElement
	for _, s := range merged {
		els = append(els, nftables.SetElement{Key: be32(uint32(s.lo))})
		if s.hi <= 0xffffffff {
			els = append(els, nftables.SetElement{Key: be32(uint32(s.hi)), IntervalEnd: true})
		}
	}
	return els
}

func be32(v uint32) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, v)
	return b
}
