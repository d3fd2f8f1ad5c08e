package netenv

import (
	"fmt"
	"slices"
	"testing"

	"warren/network/egress"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Snapshot is what the host's network holds, one line per thing, for a
// test to compare with what it held before: its links, their addresses,
// the routes of every table, and every nftables table, chain and set.
type Snapshot map[string]bool

// Take reads the host's network now.
func Take(t testing.TB) Snapshot {
	t.Helper()
	s := make(Snapshot)
	links, err := egress.Dump(netlink.LinkList)
	if err != nil {
		t.Fatalf("list links: %v", err)
	}
	names := make(map[int]string)
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		s["link "+a.Name] = true
	}
	addrs, err := egress.Dump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		t.Fatalf("list addresses: %v", err)
	}
	for _, a := range addrs {
		s[fmt.Sprintf("addr %s dev %s", a.IPNet, names[a.LinkIndex])] = true
	}
	routes, err := egress.Dump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
	for _, r := range routes {
		dst := "default"
		if r.Dst != nil {
			dst = r.Dst.String()
		}
		s[fmt.Sprintf("route %s via %s dev %s table %d", dst, r.Gw, names[r.LinkIndex], r.Table)] = true
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatalf("netlink to nftables: %v", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTables()
	if err != nil {
		t.Fatalf("list nftables tables: %v", err)
	}
	for _, tb := range tables {
		s[fmt.Sprintf("table %s %s", family(tb.Family), tb.Name)] = true
		sets, err := c.GetSets(tb)
		if err != nil {
			t.Fatalf("list the sets of table %s: %v", tb.Name, err)
		}
		for _, set := range sets {
			s[fmt.Sprintf("set %s %s %s", family(tb.Family), tb.Name, set.Name)] = true
		}
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatalf("list nftables chains: %v", err)
	}
	for _, ch := range chains {
		s[fmt.Sprintf("chain %s %s %s", family(ch.Table.Family), ch.Table.Name, ch.Name)] = true
	}
	return s
}

// family is a table family as nft(8) writes it.
func family(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprint(int(f))
}

// New lists, sorted, what s holds that before did not.
func (s Snapshot) New(before Snapshot) []string {
	var out []string
	for k := range s {
		if !before[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
