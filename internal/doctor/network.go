package doctor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/nftables"
)

// Chain is a base chain of the host's nftables, as the egress checks see
// it: iptables-nft's chains are there too (table ip filter, chain FORWARD).
type Chain struct {
	Family, Table, Name string
	Hook                string // "input", "forward", ...
	Drop                bool   // its policy drops what no rule accepted
}

func (c Chain) String() string {
	return fmt.Sprintf("table %s %s, chain %s (hook %s, policy drop)", c.Family, c.Table, c.Name, c.Hook)
}

// Chains reads the base chains of the nftables of the network namespace
// the connection options name (none: the caller's), through netlink (no
// nft(8)).
func Chains(opts ...nftables.ConnOption) ([]Chain, error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("netlink to nftables: %w", err)
	}
	defer c.CloseLasting()
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	var out []Chain
	for _, ch := range chains {
		if ch.Hooknum == nil || ch.Table == nil {
			continue
		}
		fam, hook := "", ""
		switch ch.Table.Family {
		case nftables.TableFamilyIPv4:
			fam = "ip"
		case nftables.TableFamilyINet:
			fam = "inet"
		default:
			continue // the jails have IPv4 only; bridge and netdev hooks are not theirs
		}
		switch *ch.Hooknum {
		case *nftables.ChainHookInput:
			hook = "input"
		case *nftables.ChainHookForward:
			hook = "forward"
		default:
			continue
		}
		out = append(out, Chain{Family: fam, Table: ch.Table.Name, Name: ch.Name, Hook: hook,
			Drop: ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop})
	}
	return out, nil
}

// egressID is the id of the daemon of dataDir's egress network, as
// network/egress.IDOf makes it (TestEgressID holds them together; the
// CLI links none of the daemon).
func egressID(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:])[:6]
}

// claimedSubnet is the subnet the running daemon of dataDir holds (its
// resolver link w<id>'s address), if one runs.
func claimedSubnet(dataDir string) (netip.Prefix, bool) {
	real, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return netip.Prefix{}, false
	}
	ifc, err := net.InterfaceByName("w" + egressID(real))
	if err != nil {
		return netip.Prefix{}, false
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Prefix{}, false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

// egressAllowed says whether the networks o allows include egress.
func (o Options) egressAllowed() bool {
	return o.Networks == nil || slices.Contains(o.Networks, "egress")
}

// subnet is how the fixes name the jails' range.
func (h Host) subnet(o Options) string {
	if o.EgressSubnet.IsValid() {
		return o.EgressSubnet.String()
	}
	if h.EgressSubnet != nil {
		if p, ok := h.EgressSubnet(o.DataDir); ok {
			return p.String()
		}
	}
	return "SUBNET (the daemon's --egress-subnet; warren serve logs it: egress network ready subnet=...)"
}

// forwarding checks net.ipv4.ip_forward: the jails' replies come in on
// the host's uplink, whose forwarding decides. warren serve turns it on
// when egress is allowed; a host tool that turns it off again cuts every
// egress jail.
func (h Host) forwarding(o Options) Result {
	const name = "ip forwarding"
	if !o.egressAllowed() {
		return Result{Name: name, Status: OK, Detail: "egress is not allowed (--allow-networks): not needed"}
	}
	v, err := h.read("/proc/sys/net/ipv4/ip_forward")
	switch {
	case err != nil:
		return Result{name, Warn, fmt.Sprintf("net.ipv4.ip_forward: %v", err),
			"egress jails need IPv4 forwarding; or serve with --allow-networks none,host if egress is not wanted"}
	case v != "1":
		return Result{name, Warn, "net.ipv4.ip_forward is " + v + ": egress jails cannot reach out until it is 1",
			"warren serve sets it to 1 at start when egress is allowed; keep it so (net.ipv4.ip_forward = 1 in /etc/sysctl.d/, so that no other tool turns it off), or serve with --allow-networks none,host if egress is not wanted"}
	}
	return Result{Name: name, Status: OK, Detail: "net.ipv4.ip_forward is 1"}
}

// firewall looks for base chains of other tables that drop, by their
// policy, what the egress jails send out (hook forward) or ask the
// daemon's resolver (hook input): nftables runs every table's chain on a
// hook, and a drop in any one of them is final, whatever warren's own
// table accepts. ufw, firewalld and Docker (table ip filter, chain
// FORWARD, through iptables-nft) make such chains.
func (h Host) firewall(o Options) Result {
	const name = "egress firewall"
	if !o.egressAllowed() {
		return Result{Name: name, Status: OK, Detail: "egress is not allowed (--allow-networks): nothing to check"}
	}
	if h.Chains == nil {
		return Result{Name: name, Status: OK, Detail: "not checked"}
	}
	chains, err := h.Chains()
	if err != nil {
		return Result{name, Warn, fmt.Sprintf("cannot read the nftables ruleset: %v", err),
			"run warren doctor as root to see whether a host firewall drops the egress jails' traffic"}
	}
	var drops []Chain
	for _, c := range chains {
		if c.Drop && !strings.HasPrefix(c.Table, "warren-") {
			drops = append(drops, c)
		}
	}
	if len(drops) == 0 {
		return Result{Name: name, Status: OK, Detail: "no input or forward chain of another table drops by default"}
	}
	subnet := h.subnet(o)
	var found, fixes []string
	for _, c := range drops {
		found = append(found, c.String())
		fixes = append(fixes, acceptFix(c, subnet))
	}
	it := "it drops"
	if len(drops) > 1 {
		it = "each drops"
	}
	return Result{name, Warn,
		strings.Join(found, "; ") + ": " + it + " the egress jails' traffic unless one of its rules accepts " + subnet,
		strings.Join(fixes, "; ") + "; or, if the jails need no egress, serve with --allow-networks none,host (docs/operations.md, The egress network)"}
}

// acceptFix is what lets the jails' traffic through chain c.
func acceptFix(c Chain, subnet string) string {
	ipt := c.Family == "ip" && c.Table == "filter" // iptables-nft's: keep to iptables(8)
	if c.Hook == "input" {
		if ipt {
			return fmt.Sprintf("iptables -I %s -s %s -p udp --dport 53 -j ACCEPT and the same with -p tcp (the daemon's resolver)", c.Name, subnet)
		}
		return fmt.Sprintf("nft insert rule %s %s %s ip saddr %s meta l4proto { udp, tcp } th dport 53 accept (the daemon's resolver)", c.Family, c.Table, c.Name, subnet)
	}
	if ipt {
		return fmt.Sprintf("iptables -I %[1]s -s %[2]s -j ACCEPT and iptables -I %[1]s -d %[2]s -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT "+
			"(under Docker, in chain DOCKER-USER instead; ufw: ufw route allow from %[2]s)", c.Name, subnet)
	}
	return fmt.Sprintf("nft insert rule %[1]s %[2]s %[3]s ip saddr %[4]s accept and nft insert rule %[1]s %[2]s %[3]s ip daddr %[4]s ct state established,related accept "+
		"(firewalld: firewall-cmd --permanent --zone=trusted --add-source=%[4]s)", c.Family, c.Table, c.Name, subnet)
}
