package egress

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The expressions the rules are made of, named as nft(8) writes them, so a
// rule reads as its nft line does. Each returns the expressions of one
// match; a rule is the matches, then its verdict.

// reg1 is the register every match loads into: no rule needs two values
// at once.
const reg1 = 1

// ifname is an interface name as the kernel compares it: 16 bytes, zero
// padded.
func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// nfproto matches the packet's family (unix.NFPROTO_IPV4 or _IPV6).
func nfproto(family byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{family}},
	}
}

// l4proto matches the transport protocol (unix.IPPROTO_TCP, _UDP).
func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}},
	}
}

// ifPrefix matches an input (or output) interface whose name starts with
// prefix, as nft's "iifname prefix*" does: the comparison covers only the
// prefix's bytes.
func ifPrefix(key expr.MetaKey, prefix string, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: reg1},
		&expr.Cmp{Op: op, Register: reg1, Data: []byte(prefix)},
	}
}

// Offsets in the IPv4 header.
const (
	ip4Saddr = 12
	ip4Daddr = 16
)

// ip4 matches an IPv4 address field (ip4Saddr, ip4Daddr) against one
// address, equal or not.
func ip4(offset uint32, a netip.Addr, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: op, Register: reg1, Data: b[:]},
	}
}

// ip4In matches an IPv4 address field that is in a prefix.
func ip4In(offset uint32, p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	if p.Bits() == 0 {
		mask = []byte{0, 0, 0, 0}
	}
	b := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: b[:]},
	}
}

// ip4Set matches an IPv4 address field that is (or, inverted, is not) in a
// named set.
func ip4Set(offset uint32, set *nftables.Set, in bool) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID, Invert: !in},
	}
}

// port matches the destination port of a TCP or UDP packet (the l4proto
// must be matched first).
func dport(p uint16) []expr.Any {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, p)
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: b},
	}
}

// ctMark matches the connection's mark, equal or not.
func ctMark(mark uint32, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, mark)
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyMARK, Register: reg1},
		&expr.Cmp{Op: op, Register: reg1, Data: b},
	}
}

// setCtMark sets the connection's mark.
func setCtMark(mark uint32) []expr.Any {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, mark)
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: b},
		&expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true},
	}
}

// ctReply matches a packet of a connection's reply direction.
func ctReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{1}},
	}
}

// ctNew matches the first packet of a connection.
func ctNew() []expr.Any {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, expr.CtStateBitNEW)
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: b, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{0, 0, 0, 0}},
	}
}

// ctCountOver matches a new connection of a chain's jail once it has more
// than n open: the connlimit expression keeps its own list of the
// connections that passed it, so in a jail's own chain it counts that
// jail's.
func ctCountOver(n uint32) []expr.Any {
	return []expr.Any{&expr.Connlimit{Count: n, Flags: 1}} // 1: NFT_CONNLIMIT_F_INV, "over"
}

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func accept() expr.Any { return verdict(expr.VerdictAccept) }
func drop() expr.Any   { return verdict(expr.VerdictDrop) }

func goTo(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }

// rejectTCP answers a TCP packet with a reset: a connect fails at once
// with "connection refused", an established connection is cut.
func rejectTCP() expr.Any { return &expr.Reject{Type: unix.NFT_REJECT_TCP_RST} }

// rejectOther answers with an ICMP "administratively prohibited", in the
// packet's own family: a UDP send or a ping fails at once.
func rejectOther() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

// concat joins matches into one rule's expressions.
func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
