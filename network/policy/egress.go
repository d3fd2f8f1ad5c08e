package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of a policy. MaxRules keeps the kernel's sets and a decision's
// walk small whatever a client sends; MaxNameLen is DNS's own bound on a
// name in its text form (RFC 1035: 255 bytes on the wire).
const (
	MaxRules   = 256
	MaxNameLen = 253
)

// The defaults of a policy.
const (
	DefaultAllow = "allow"
	DefaultDeny  = "deny"
)

// Egress is a thread's egress policy as its settings carry it, in JSON
// and in the metadata store. The zero value allows every public address
// and name. Parse checks and compiles it.
type Egress struct {
	// Default is DefaultAllow, DefaultDeny, or "" for DefaultAllow.
	Default string `json:"default,omitempty"`
	// Allow and Deny are rules (see the package doc); a deny rule wins.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Check tells whether e is a policy Parse accepts, and if not, why.
func (e Egress) Check() error {
	_, err := Parse(e)
	return err
}

// Parse checks e and compiles it. Its errors quote the first rule it
// refuses (cut when long) and say what a rule may be.
func Parse(e Egress) (*Rules, error) {
	r := &Rules{}
	switch e.Default {
	case "", DefaultAllow:
	case DefaultDeny:
		r.defaultDeny = true
	default:
		return nil, fmt.Errorf("egress: default %s is neither %q nor %q", quote(e.Default), DefaultAllow, DefaultDeny)
	}
	if n := len(e.Allow) + len(e.Deny); n > MaxRules {
		return nil, fmt.Errorf("egress: %d rules, more than the %d a policy may hold", n, MaxRules)
	}
	for _, s := range e.Allow {
		if err := r.allow.add(s); err != nil {
			return nil, err
		}
	}
	for _, s := range e.Deny {
		if err := r.deny.add(s); err != nil {
			return nil, err
		}
	}
	r.allow.finish()
	r.deny.finish()
	return r, nil
}

// add parses one rule into l.
func (l *list) add(s string) error {
	if s == "" {
		return fmt.Errorf("egress: empty rule (a rule is a CIDR, a host name or *.domain)")
	}
	if len(s) > MaxNameLen+2 { // "*." and a name of the longest
		return fmt.Errorf("egress: rule %s is longer than %d bytes", quote(s), MaxNameLen)
	}
	if strings.ContainsAny(s, "/:") || looksNumeric(s) {
		p, err := parseCIDR(s)
		if err != nil {
			return fmt.Errorf("egress: rule %s is not a valid CIDR (%v)", quote(s), err)
		}
		l.cidrs = append(l.cidrs, cidrRule{p, s})
		return nil
	}
	if suffix, ok := strings.CutPrefix(s, "*."); ok {
		name := NormalizeName(suffix)
		if err := checkHostName(name); err != nil {
			return fmt.Errorf("egress: rule %s is not a valid *.domain: %v", quote(s), err)
		}
		l.wildcards = setRule(l.wildcards, name, s)
		return nil
	}
	if strings.Contains(s, "*") {
		return fmt.Errorf("egress: rule %s is neither a CIDR, a host name nor *.domain (a wildcard is one leading \"*.\", as in *.example.com)", quote(s))
	}
	name := NormalizeName(s)
	if err := checkHostName(name); err != nil {
		return fmt.Errorf("egress: rule %s is neither a CIDR, a host name nor *.domain: %v", quote(s), err)
	}
	l.names = setRule(l.names, name, s)
	return nil
}

// setRule records rule under key, keeping the first rule of a key.
func setRule(m map[string]string, key, rule string) map[string]string {
	if m == nil {
		m = make(map[string]string)
	}
	if _, ok := m[key]; !ok {
		m[key] = rule
	}
	return m
}

// looksNumeric tells whether s is made of digits and dots only: meant as
// an IPv4 address, never as a name (no top-level domain is all digits),
// so that "256.1.1.1" is refused as an address, not taken as a name.
func looksNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// parseCIDR parses a CIDR or a bare address into a masked prefix; an
// IPv4-mapped IPv6 one becomes IPv4 (see the package doc).
func parseCIDR(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("an address with a zone (%%%s) names a link of this host, not a destination", a.Zone())
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// checkHostName refuses a normalised name that is not an LDH host name.
func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("the name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("the name is longer than %d bytes", MaxNameLen)
	}
	labels := strings.Split(name, ".")
	for _, label := range labels {
		if label == "" {
			return fmt.Errorf("a label is empty (two dots in a row, or a leading dot)")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %s is longer than 63 bytes", quote(label))
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %s begins or ends with a hyphen", quote(label))
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isLetterDigit(c) && c != '-' {
				return fmt.Errorf("label %s has %s, not a letter, digit or hyphen", quote(label), quote(string(rune(c))))
			}
		}
	}
	if looksNumeric(labels[len(labels)-1]) {
		return fmt.Errorf("the last label is all digits (an address? give it without a wildcard)")
	}
	return nil
}

func isLetterDigit(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

// NormalizeName is the form in which names are compared: ASCII lower
// case, without one trailing dot ("Example.COM." is "example.com").
func NormalizeName(name string) string {
	name = strings.TrimSuffix(name, ".")
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			// Only ASCII letters: a name is bytes, not UTF-8 text.
			b := []byte(name)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return name
}

// maxQuote bounds what an error quotes of a rule.
const maxQuote = 80

// quote quotes s as a Go string, at most maxQuote bytes of it (cut on a
// rune boundary) and its full length when cut, so that an error about a
// long hostile rule stays short.
func quote(s string) string {
	if len(s) <= maxQuote {
		return strconv.Quote(s)
	}
	cut := maxQuote
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(s[:cut]), len(s))
}
