package policy

import (
	"cmp"
	"net/netip"
	"slices"
)

// Rules is a checked, compiled policy (Parse makes it). It does not
// change once made, so goroutines share it freely; a policy change is a
// new Rules. A nil *Rules is the zero policy: everything allowed.
type Rules struct {
	defaultDeny bool
	allow, deny list
}

// list is one side of a policy, allow or deny. Each entry keeps the rule
// as it was written, for the reports that quote it.
type list struct {
	names     map[string]string // normalised name → rule
	wildcards map[string]string // the domain under "*." → rule
	cidrs     []cidrRule        // longest prefix first, no two the same
}

type cidrRule struct {
	prefix netip.Prefix
	rule   string
}

// finish orders the CIDRs so that the first one that covers an address
// is the most specific, and drops repeats.
func (l *list) finish() {
	slices.SortStableFunc(l.cidrs, func(a, b cidrRule) int {
		if c := cmp.Compare(b.prefix.Bits(), a.prefix.Bits()); c != 0 {
			return c
		}
		return a.prefix.Addr().Compare(b.prefix.Addr())
	})
	l.cidrs = slices.CompactFunc(l.cidrs, func(a, b cidrRule) bool { return a.prefix == b.prefix })
}

// DefaultDeny tells whether the policy's default is "deny".
func (r *Rules) DefaultDeny() bool {
	return r != nil && r.defaultDeny
}

// NameAllowed decides for a host name, as a DNS query asks it (any case,
// a trailing dot or not). It returns whether the name is allowed and the
// rule that decided, as it was written; rule is "" when the default
// decided.
func (r *Rules) NameAllowed(name string) (allowed bool, rule string) {
	if r == nil {
		return true, ""
	}
	n := NormalizeName(name)
	if !plainName(n) {
		return !r.defaultDeny, ""
	}
	if rule, ok := r.deny.matchName(n); ok {
		return false, rule
	}
	if rule, ok := r.allow.matchName(n); ok {
		return true, rule
	}
	return !r.defaultDeny, ""
}

// matchName finds the rule of l that covers the normalised name n: the
// name itself, else the longest wildcard domain above it.
func (l *list) matchName(n string) (string, bool) {
	if rule, ok := l.names[n]; ok {
		return rule, true
	}
	if len(l.wildcards) == 0 {
		return "", false
	}
	for i := 0; i < len(n); i++ {
		if n[i] == '.' {
			if rule, ok := l.wildcards[n[i+1:]]; ok {
				return rule, true
			}
		}
	}
	return "", false
}

// plainName tells whether a normalised name is made of labels of
// letters, digits, hyphens and underscores (underscores for names such
// as _sip._tcp.example.com), so that its text splits into its labels at
// its dots. Any other name matches no rule (see the package doc).
func plainName(n string) bool {
	if n == "" || len(n) > MaxNameLen {
		return false
	}
	start := 0
	for i := 0; i <= len(n); i++ {
		if i == len(n) || n[i] == '.' {
			if i == start || i-start > 63 {
				return false
			}
			start = i + 1
			continue
		}
		if c := n[i]; !isLetterDigit(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// AddrAllowed decides for an address by the policy's CIDRs, an
// IPv4-mapped IPv6 address as its IPv4 address (a zone does not count).
// It returns whether the address is allowed and the rule that decided,
// as it was written; rule is "" when the default decided. An invalid
// (zero) address is refused.
func (r *Rules) AddrAllowed(a netip.Addr) (allowed bool, rule string) {
	if !a.IsValid() {
		return false, ""
	}
	if r == nil {
		return true, ""
	}
	a = a.Unmap().WithZone("")
	if rule, ok := r.deny.matchAddr(a); ok {
		return false, rule
	}
	if rule, ok := r.allow.matchAddr(a); ok {
		return true, rule
	}
	return !r.defaultDeny, ""
}

// matchAddr finds the most specific CIDR of l that covers a.
func (l *list) matchAddr(a netip.Addr) (string, bool) {
	for _, c := range l.cidrs {
		if c.prefix.Contains(a) {
			return c.rule, true
		}
	}
	return "", false
}

// CIDRs are a policy's CIDR rules by side and family, as the kernel's
// sets take them: masked, IPv4 ones (mapped ones included) as IPv4, in
// address order, and within one list no prefix overlaps another (one
// that a broader prefix of the list covers is left out), since an
// nftables interval set refuses overlapping elements.
type CIDRs struct {
	Allow4, Allow6 []netip.Prefix
	Deny4, Deny6   []netip.Prefix
}

// CIDRs returns the policy's CIDR rules for the kernel's sets. A deny
// CIDR wins over an allow CIDR there too: the caller checks the deny
// sets first.
func (r *Rules) CIDRs() CIDRs {
	if r == nil {
		return CIDRs{}
	}
	var c CIDRs
	c.Allow4, c.Allow6 = r.allow.prefixes()
	c.Deny4, c.Deny6 = r.deny.prefixes()
	return c
}

// prefixes splits l's CIDRs by family, without covered ones.
func (l *list) prefixes() (v4, v6 []netip.Prefix) {
	// Broadest first, so a prefix is kept only if no kept one covers it.
	// Two prefixes are either disjoint or one holds the other, so one
	// that overlaps a kept prefix lies inside it.
	byBits := slices.Clone(l.cidrs)
	slices.Reverse(byBits)
	var kept []netip.Prefix
	for _, c := range byBits {
		if !slices.ContainsFunc(kept, c.prefix.Overlaps) {
			kept = append(kept, c.prefix)
		}
	}
	slices.SortFunc(kept, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	for _, p := range kept {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}
