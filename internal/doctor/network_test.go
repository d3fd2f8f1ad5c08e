package doctor

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"

	"warren/internal/netenv"
	"warren/network/egress"
)

// TestEgressFirewall: a real table of another owner, with a forward chain
// that drops by default (as Docker's ip filter FORWARD does), is seen and
// named, with a fix that names the daemon's subnet; input too; once it is
// gone, or with egress not allowed, nothing is reported. The table lives
// in a network namespace of the test's own, so the host forwards as
// before meanwhile.
func TestEgressFirewall(t *testing.T) {
	ns := netenv.NewNS(t)
	c, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	drop := nftables.ChainPolicyDrop
	table := c.AddTable(&nftables.Table{Name: "othersfw", Family: nftables.TableFamilyINet})
	c.AddChain(&nftables.Chain{Name: "fwd", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	ipt := c.AddTable(&nftables.Table{Name: "filter", Family: nftables.TableFamilyIPv4})
	c.AddChain(&nftables.Chain{Name: "INPUT", Table: ipt, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	if err := c.Flush(); err != nil {
		t.Fatalf("make the tables: %v", err)
	}
	t.Cleanup(func() {
		c.DelTable(table)
		c.DelTable(ipt)
		c.Flush()
	})

	h := Host{Chains: func() ([]Chain, error) { return Chains(nftables.WithNetNSFd(ns.Fd())) }}
	subnet := netip.MustParsePrefix("10.250.0.0/16")
	r := h.firewall(Options{EgressSubnet: subnet})
	t.Logf("%s: %s\n  fix: %s", r.Status, r.Detail, r.Fix)
	if r.Status != Warn {
		t.Fatalf("a forward chain that drops: %s, %q", r.Status, r.Detail)
	}
	for _, want := range []string{"table inet othersfw, chain fwd (hook forward", "table ip filter, chain INPUT (hook input"} {
		if !strings.Contains(r.Detail, want) {
			t.Errorf("detail %q does not say %q", r.Detail, want)
		}
	}
	for _, want := range []string{"nft insert rule inet othersfw fwd ip saddr 10.250.0.0/16 accept", "iptables -I INPUT -s 10.250.0.0/16 -p udp --dport 53",
		"--allow-networks none,host"} {
		if !strings.Contains(r.Fix, want) {
			t.Errorf("fix %q does not say %q", r.Fix, want)
		}
	}
	if r := h.firewall(Options{Networks: []string{"none", "host"}}); r.Status != OK {
		t.Errorf("without egress: %s, %q", r.Status, r.Detail)
	}

	c.DelTable(table)
	c.DelTable(ipt)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if r := h.firewall(Options{}); r.Status != OK {
		t.Errorf("the tables gone: %s, %q", r.Status, r.Detail)
	}
}

// TestEgressID: the doctor finds a daemon's link by the id the daemon
// gives it.
func TestEgressID(t *testing.T) {
	for _, dir := range []string{"/var/lib/warren", "/srv/a b"} {
		if got, want := egressID(dir), egress.IDOf(dir); got != want {
			t.Errorf("%s: %s, want %s", dir, got, want)
		}
	}
}
