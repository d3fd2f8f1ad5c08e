package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Refusals: every rule that refuses a jail's packet first logs it to the
// daemon's NFLOG group (nfnetlink_log), which ReadRefusals reads. The
// log's prefix names the jail's chain and the rule ("j12 private"): the
// chain gives the jail (its number) and the direction, so that a
// refusal needs no lookup of an interface that may be gone by the time
// it is read. A limit before the log bounds the kernel's work (and the
// daemon's) per rule and jail: past it a packet is refused unlogged.

// Rule is what refused a jail's packet.
type Rule string

const (
	// RuleNever: loopback, link-local and the metadata address, multicast,
	// or another jail: never reachable.
	RuleNever Rule = "never"
	// RulePrivate: a private range the operator did not list.
	RulePrivate Rule = "private"
	// RuleDeny: a deny CIDR of the jail's policy.
	RuleDeny Rule = "deny"
	// RuleDefault: the policy's default deny, no allow rule or answer.
	RuleDefault Rule = "default"
	// RuleConnections: the jail's bound of open connections.
	RuleConnections Rule = "connections"
	// RuleHost: the host itself (but the resolver's port).
	RuleHost Rule = "host"
)

// Refusal is one packet of a jail that the rules refused, as the kernel
// logged it.
type Refusal struct {
	// Jail is the jail's address (Link.Addr).
	Jail netip.Addr
	// Remote is the far end: the destination of what the jail sent, or
	// the source of a reply the jail's policy no longer admits (port 0
	// for a protocol without ports).
	Remote netip.AddrPort
	// Proto is "tcp", "udp", "icmp", or the protocol's number.
	Proto string
	Rule  Rule
}

// logRate and logBurst bound the refusals logged per second, per rule of
// each jail: enough to tell every refusal an agent makes, not a flood's.
const (
	logRate  = 10
	logBurst = 20
)

// logSnap is how much of a packet the kernel copies: an IPv4 header with
// options (60 bytes) and the ports.
const logSnap = 64

// refuseRules adds to the batch, in chain ch (a jail's), the rules that
// refuse what matches, logging it as rule r: past the rate the first
// refuses without a log; under it the second logs and refuses. The
// matches are looked at twice, on refused packets only (a passing one
// fails the first match of both). n.mu is held.
func (n *Network) refuseRules(ch *nftables.Chain, r Rule, matches ...[]expr.Any) {
	c, t := n.nft, n.table
	over := &expr.Limit{Type: expr.LimitTypePkts, Rate: logRate, Unit: expr.LimitTimeSecond, Burst: logBurst, Over: true}
	refuse := goTo(n.sets.refuse.Name)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(concat(matches...), []expr.Any{over, refuse})})
	log := &expr.Log{
		Key:   1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
		Group: n.group, Snaplen: logSnap, Data: []byte(ch.Name + " " + string(r)),
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(concat(matches...), []expr.Any{log, refuse})})
}

// nfnetlink_log's messages and attributes (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulaCfgQthresh  = 5
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
	nfulaPayload     = 9
	nfulaPrefix      = 10
)

// openLog binds a netlink socket to a free NFLOG group, trying from one
// the id names: a group has one reader on a host, and another daemon
// (or ulogd) may hold the first one tried.
func openLog(id string) (*netlink.Conn, uint16, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("egress: netlink to nfnetlink_log: %w", err)
	}
	// Room for bursts of refusals: past it the kernel drops messages and
	// the reader sees ENOBUFS, not a blocked rule.
	conn.SetReadBuffer(1 << 20)
	start, _ := strconv.ParseUint(id[:4], 16, 16)
	for i := range uint64(256) {
		g := uint16(start + i)
		if g == 0 { // the group of tools that name none
			continue
		}
		err = bindLog(conn, g)
		if err == nil {
			return conn, g, nil
		}
		// Another socket's group is EPERM (EBUSY on older kernels); so is
		// a missing CAP_NET_ADMIN, which every group answers alike.
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	conn.Close()
	return nil, 0, fmt.Errorf("egress: bind an NFLOG group for the refusals: %w", err)
}

// bindLog binds conn to group g, copying the start of each packet, and
// sending each at once (the kernel's default batches a hundred, or a
// second's).
func bindLog(conn *netlink.Conn, g uint16) error {
	mode := make([]byte, 6) // struct nfulnl_msg_config_mode
	binary.BigEndian.PutUint32(mode, logSnap)
	mode[4] = nfulnlCopyPacket
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: nfulaCfgCmd, Data: []byte{nfulnlCfgCmdBind}},
		{Type: nfulaCfgMode, Data: mode},
		{Type: nfulaCfgQthresh, Data: binary.BigEndian.AppendUint32(nil, 1)},
	})
	if err != nil {
		return err
	}
	_, err = conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgConfig),
			Flags: netlink.Request | netlink.Acknowledge,
		},
		Data: append(nfgenmsg(g), attrs...),
	})
	return err
}

// nfgenmsg is nfnetlink's header: any family, version 0, the group.
func nfgenmsg(g uint16) []byte {
	b := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], g)
	return b
}

// ReadRefusals reads the kernel's refusals of the jails' packets and
// gives each to fn, on the caller's goroutine, until Close; it returns
// nil then. Call it once. fn must be quick: the kernel drops what does
// not fit the socket's buffer meanwhile (those refusals are not told).
func (n *Network) ReadRefusals(fn func(Refusal)) error {
	for {
		msgs, err := n.nflog.Receive()
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return fmt.Errorf("egress: read the refusals: %w", err)
		}
		for _, m := range msgs {
			if r, ok := n.parseRefusal(m); ok {
				fn(r)
			}
		}
	}
}

// parseRefusal reads one NFLOG packet message.
func (n *Network) parseRefusal(m netlink.Message) (Refusal, bool) {
	if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket) || len(m.Data) < 4 {
		return Refusal{}, false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return Refusal{}, false
	}
	var prefix string
	var payload []byte
	for ad.Next() {
		switch ad.Type() {
		case nfulaPrefix:
			prefix = ad.String()
		case nfulaPayload:
			payload = ad.Bytes()
		}
	}
	chain, rule, ok := strings.Cut(prefix, " ")
	if !ok || len(chain) < 2 {
		return Refusal{}, false
	}
	i, err := strconv.Atoi(chain[1:])
	if err != nil || i < 1 || i > n.slots() {
		return Refusal{}, false
	}
	src, dst, proto, sport, dport, ok := parseIPv4(payload)
	if !ok {
		return Refusal{}, false
	}
	r := Refusal{Rule: Rule(rule), Proto: proto, Remote: netip.AddrPortFrom(dst, dport)}
	_, r.Jail = n.addrs(i)
	if chain[0] == 'b' { // a packet to the jail: the far end is its source
		r.Remote = netip.AddrPortFrom(src, sport)
	}
	return r, true
}

// parseIPv4 reads the addresses, the protocol and the ports of the start
// of an IPv4 packet.
func parseIPv4(b []byte) (src, dst netip.Addr, proto string, sport, dport uint16, ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return
	}
	ihl := int(b[0]&0x0f) * 4
	src = netip.AddrFrom4([4]byte(b[12:16]))
	dst = netip.AddrFrom4([4]byte(b[16:20]))
	switch b[9] {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	case unix.IPPROTO_ICMP:
		proto = "icmp"
	default:
		proto = strconv.Itoa(int(b[9]))
	}
	if (b[9] == unix.IPPROTO_TCP || b[9] == unix.IPPROTO_UDP) && len(b) >= ihl+4 {
		sport = binary.BigEndian.Uint16(b[ihl:])
		dport = binary.BigEndian.Uint16(b[ihl+2:])
	}
	return src, dst, proto, sport, dport, true
}
