package resolver

import (
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"warren/network/policy"
)

// filtered is an upstream answer as the jail gets it (see the package
// doc): the records of the name's chain, what to report of them, or the
// denied name of the chain that refuses the whole answer.
type filtered struct {
	answer []dns.RR
	ns     []dns.RR
	addrs  []netip.Addr
	ttl    time.Duration
	// refused is the CNAME target a deny rule matched (rule), if any.
	refused, rule string
}

// filter makes the jail's answer to a query of name (normalised) and
// qtype out of the upstream's resp.
func filter(name string, qtype uint16, resp *dns.Msg, rules *policy.Rules) filtered {
	var f filtered
	chain := map[string]bool{name: true}
	// Follow the CNAMEs from name, in whatever order they come; each
	// step adds a name, so there are at most len(resp.Answer) steps.
	for cur := name; ; {
		next := ""
		for _, rr := range resp.Answer {
			if cn, ok := rr.(*dns.CNAME); ok && policy.NormalizeName(cn.Hdr.Name) == cur {
				next = policy.NormalizeName(cn.Target)
				break
			}
		}
		if next == "" || chain[next] {
			break
		}
		if allowed, rule := rules.NameAllowed(next); !allowed && rule != "" {
			return filtered{refused: next, rule: rule}
		}
		chain[next] = true
		cur = next
	}

	least := MaxTTL
	for _, rr := range resp.Answer {
		h := rr.Header()
		if !chain[policy.NormalizeName(h.Name)] {
			continue // not this name's: an upstream's extra
		}
		switch rr := rr.(type) {
		case *dns.AAAA:
			if qtype == dns.TypeAAAA {
				continue // the jails have no IPv6 (see the package doc)
			}
			if a, ok := netip.AddrFromSlice(rr.AAAA); ok {
				f.addrs = append(f.addrs, a)
			}
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A.To4()); ok {
				f.addrs = append(f.addrs, a)
			}
		case *dns.HTTPS:
			rr.Value = withoutHints(rr.Value)
		case *dns.SVCB:
			rr.Value = withoutHints(rr.Value)
		}
		ttl := time.Duration(h.Ttl) * time.Second
		least = min(least, ttl)
		h.Ttl = min(h.Ttl, uint32(MaxTTL/time.Second))
		f.answer = append(f.answer, rr)
	}
	f.ttl = max(least, MinTTL)

	for _, rr := range resp.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			soa.Hdr.Ttl = min(soa.Hdr.Ttl, uint32(MaxTTL/time.Second))
			f.ns = append(f.ns, soa)
		}
	}
	return f
}

// withoutHints drops the address hints of an HTTPS or SVCB record's
// values: an address a client may use must come from an A query, which
// the resolver reports.
func withoutHints(kv []dns.SVCBKeyValue) []dns.SVCBKeyValue {
	out := kv[:0]
	for _, v := range kv {
		switch v.(type) {
		case *dns.SVCBIPv4Hint, *dns.SVCBIPv6Hint:
			continue
		}
		out = append(out, v)
	}
	return out
}
