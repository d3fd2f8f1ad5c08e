package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/hashicorp/go-hclog"
	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Config is a daemon's egress network.
type Config struct {
	// ID names this daemon's table and links on the host: a few lower-case
	// hex digits (IDLen), the same at every start of one daemon and
	// different for two daemons of a host (a hash of the data folder).
	ID string
	// Subnet is the range the jails' addresses come from, IPv4, /16 to
	// /24; the zero value picks a free private /16 (PickSubnet).
	Subnet netip.Prefix
	// AllowPrivate are the private ranges the jails may reach anyway
	// (package mirrors on the operator's network).
	AllowPrivate []netip.Prefix
	// Avoid are addresses the subnet must not hold: the host's name
	// servers (the daemon's resolver asks them), which may sit in a
	// private range no route names.
	Avoid []netip.Addr
	// ResolverPort is the port of the daemon's resolver on ResolverAddr;
	// 0 means 53.
	ResolverPort uint16
	Log          hclog.Logger
}

// IDLen is the length of Config.ID: with "w", "-" and a jail's number it
// keeps a link's name within the kernel's 15 bytes.
const IDLen = 6

// IDOf is the Config.ID of the daemon whose data folder is dataDir (its
// real path): a hash of it.
func IDOf(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:])[:IDLen]
}

// Network is a daemon's egress network: its nftables table, its subnet, the
// dummy link that holds the resolver's address and claims the subnet on
// the host, and the jails' links (Link). Close takes all of it away.
type Network struct {
	cfg      Config
	log      hclog.Logger
	subnet   netip.Prefix
	resolver netip.Addr
	prefix   string // every link's name starts with it: "w" + ID
	table    *nftables.Table
	sets     tableSets
	// nflog reads the refusals the rules log to group (ReadRefusals);
	// Close closes it.
	nflog *mnl.Conn
	group uint16

	// mu guards the numbers of the jails' links, the marks, the nftables
	// connection (one batch at a time) and closed.
	mu       sync.Mutex
	nft      *nftables.Conn
	used     map[int]bool
	next     int
	nextMark uint32
	closed   bool

	// noDestroy is set once the kernel refused to destroy a socket
	// (Link.Cut): it is not asked again.
	noDestroy atomic.Bool
}

// Open sets up a daemon's egress network, first taking away what a
// former run of the same daemon left (a kill -9 leaves the table and the
// dummy link; the jails' links went with their namespaces).
func Open(ctx context.Context, cfg Config) (*Network, error) {
	if len(cfg.ID) != IDLen || strings.Trim(cfg.ID, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("egress: id %q is not %d hex digits", cfg.ID, IDLen)
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.ResolverPort == 0 {
		cfg.ResolverPort = 53
	}
	n := &Network{
		cfg: cfg, log: cfg.Log, prefix: "w" + cfg.ID,
		table: &nftables.Table{Name: "warren-" + cfg.ID, Family: nftables.TableFamilyINet},
		used:  make(map[int]bool), next: 1, nextMark: 1,
	}
	nft, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("egress: netlink to nftables: %w", err)
	}
	n.nft = nft
	// One daemon of the host at a time picks and claims its range: two
	// that looked at the same moment would take the same one.
	unlock, err := lockHost()
	if err != nil {
		nft.CloseLasting()
		return nil, err
	}
	defer unlock()
	if err := n.clean(); err != nil {
		nft.CloseLasting()
		return nil, err
	}
	if cfg.Subnet.IsValid() {
		if err := checkSubnet(cfg.Subnet); err != nil {
			nft.CloseLasting()
			return nil, err
		}
		if used, why, err := subnetUsed(cfg.Subnet, cfg.Avoid); err != nil || used {
			nft.CloseLasting()
			if err == nil {
				err = fmt.Errorf("egress: subnet %s is in use on this host (%s): pick another with --egress-subnet", cfg.Subnet, why)
			}
			return nil, err
		}
		n.subnet = cfg.Subnet.Masked()
	} else if n.subnet, err = PickSubnet(cfg.Avoid); err != nil {
		nft.CloseLasting()
		return nil, err
	}
	n.resolver = n.subnet.Addr().Next()
	if err := ctx.Err(); err != nil {
		nft.CloseLasting()
		return nil, fmt.Errorf("egress: %w", err)
	}
	// The log group is bound before the rules name it.
	if n.nflog, n.group, err = openLog(cfg.ID); err != nil {
		nft.CloseLasting()
		return nil, err
	}
	if err := n.build(); err != nil {
		n.clean()
		nft.CloseLasting()
		n.nflog.Close()
		return nil, err
	}
	n.log.Info("egress network ready", "subnet", n.subnet, "resolver", n.ResolverAddr(), "table", "inet "+n.table.Name, "log group", n.group)
	return n, nil
}

// Subnet is the range of the jails' addresses.
func (n *Network) Subnet() netip.Prefix { return n.subnet }

// ResolverAddr is where the jails send their name queries: the daemon's
// resolver listens there (the caller opens that listener).
func (n *Network) ResolverAddr() netip.AddrPort {
	return netip.AddrPortFrom(n.resolver, n.cfg.ResolverPort)
}

// Table is the name of the daemon's nftables table (family inet).
func (n *Network) Table() string { return n.table.Name }

// LogGroup is the NFLOG group the rules log the refusals to.
func (n *Network) LogGroup() uint16 { return n.group }

// LinkPrefix is the start of the name of every link of this daemon.
func (n *Network) LinkPrefix() string { return n.prefix }

// Close takes the table and the dummy link away. The jails' links must be
// closed first (a jail's namespace ending takes its link too).
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	err := n.clean()
	n.nft.CloseLasting()
	// Ends ReadRefusals, which finds closed set.
	n.nflog.Close()
	return err
}

// discardLocked drops a batch that failed to be made: the nftables
// connection queues messages until Flush and has no way to forget them,
// so it is replaced. n.mu is held.
func (n *Network) discardLocked() {
	nft, err := nftables.New(nftables.AsLasting())
	if err != nil {
		// The half batch goes with the next one. What it holds is a
		// jail's chains flushed, which fails closed: the base chains
		// drop what comes back from an empty one (Link.addRules).
		n.log.Error("reopen the nftables connection after a failed batch", "error", err)
		return
	}
	n.nft.CloseLasting()
	n.nft = nft
}

// clean deletes this daemon's table and every link whose name is its own.
func (n *Network) clean() error {
	tables, err := n.nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("egress: list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == n.table.Name {
			n.nft.DelTable(n.table)
			if err := n.nft.Flush(); err != nil {
				return fmt.Errorf("egress: delete table inet %s: %w", n.table.Name, err)
			}
		}
	}
	links, err := Dump(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("egress: list links: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if name == n.prefix || strings.HasPrefix(name, n.prefix+"-") {
			if err := netlink.LinkDel(l); err != nil && !isGone(err) {
				return fmt.Errorf("egress: delete link %s: %w", name, err)
			}
		}
	}
	return nil
}

// lockFile serialises the daemons of a host while they claim a range.
const lockFile = "/run/warren-egress.lock"

func lockHost() (unlock func(), err error) {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("egress: lock %s: %w", lockFile, err)
	}
	return func() { f.Close() }, nil
}

// isGone says a link (or an element) was not there any more.
func isGone(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// checkSubnet refuses a range the jails cannot live in.
func checkSubnet(p netip.Prefix) error {
	if !p.Addr().Is4() {
		return fmt.Errorf("egress: subnet %s is not IPv4 (the jails' IPv6 is off)", p)
	}
	if p.Bits() < 16 || p.Bits() > 24 {
		return fmt.Errorf("egress: subnet %s: want a prefix of /16 to /24", p)
	}
	if !p.Addr().IsPrivate() {
		return fmt.Errorf("egress: subnet %s is not a private range (10/8, 172.16/12, 192.168/16)", p)
	}
	return nil
}

// PickSubnet finds a private /16 that no address or route of the host
// overlaps, from the top of 10/8 down, then 172.16/12: several daemons
// on one host each take their own (a running daemon's dummy link claims
// its range). Nor does it hold any address of avoid.
func PickSubnet(avoid []netip.Addr) (netip.Prefix, error) {
	var cands []netip.Prefix
	for b := 255; b >= 16; b-- {
		cands = append(cands, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16))
	}
	for b := 31; b >= 16; b-- {
		cands = append(cands, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(b), 0, 0}), 16))
	}
	used, err := hostPrefixes(avoid)
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, c := range cands {
		if _, clash := overlaps(c, used); !clash {
			return c, nil
		}
	}
	return netip.Prefix{}, errors.New("egress: no private /16 is free of this host's routes; name one with --egress-subnet")
}

// subnetUsed says whether a route or an address of the host overlaps p.
func subnetUsed(p netip.Prefix, avoid []netip.Addr) (bool, string, error) {
	used, err := hostPrefixes(avoid)
	if err != nil {
		return false, "", err
	}
	why, clash := overlaps(p, used)
	return clash, why, nil
}

func overlaps(p netip.Prefix, used []netip.Prefix) (string, bool) {
	for _, u := range used {
		if u.Overlaps(p) {
			return u.String(), true
		}
	}
	return "", false
}

// hostPrefixes are the IPv4 destinations of every route of every table
// (default routes aside: they overlap everything) and every address of
// the host, and the addresses of avoid.
func hostPrefixes(avoid []netip.Addr) ([]netip.Prefix, error) {
	routes, err := Dump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("egress: list routes: %w", err)
	}
	var out []netip.Prefix
	for _, a := range avoid {
		if a = a.Unmap(); a.Is4() {
			out = append(out, netip.PrefixFrom(a, 32))
		}
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := prefixOf(r.Dst); ok && p.Bits() > 0 {
			out = append(out, p)
		}
	}
	addrs, err := Dump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("egress: list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// sysctl writes a value under /proc/sys/net of the calling thread's
// network namespace.
func sysctl(path, value string) error {
	if err := os.WriteFile("/proc/sys/net/"+path, []byte(value), 0); err != nil {
		return fmt.Errorf("egress: sysctl net.%s=%s: %w", strings.ReplaceAll(path, "/", "."), value, err)
	}
	return nil
}

// EnableForwarding turns on the host's IPv4 forwarding, which the jails'
// traffic needs both ways (the replies come in on the host's uplink, whose
// own forwarding decides). It says whether it was off.
func EnableForwarding() (bool, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return false, fmt.Errorf("egress: read net.ipv4.ip_forward: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return false, nil
	}
	return true, sysctl("ipv4/ip_forward", "1")
}

// linkName is the host end of jail i's link.
func (n *Network) linkName(i int) string { return n.prefix + "-" + strconv.Itoa(i) }

// slots is how many jails the subnet holds: one /30 each, the first /30
// being the resolver's.
func (n *Network) slots() int { return 1<<(32-n.subnet.Bits())/4 - 1 }

// addrs are jail i's host-side address and its own: the second and third
// of its /30.
func (n *Network) addrs(i int) (host, jail netip.Addr) {
	base := n.subnet.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(4 * i)
	h := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return h.Next(), h.Next().Next()
}
