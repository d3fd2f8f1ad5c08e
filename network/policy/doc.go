// Package policy is a thread's egress policy: the rules, as a thread's
// settings carry them (Egress), checked and compiled (Rules) into the
// decisions the resolver and the kernel's sets need. It is pure Go; it
// touches no kernel state.
//
// # Rules
//
// A rule is one of:
//
//   - a CIDR, IPv4 or IPv6 ("10.1.0.0/16", "2001:db8::/32"); a bare
//     address is a /32 or a /128; host bits are cleared ("10.1.2.3/16" is
//     10.1.0.0/16).
//   - a host name ("registry.npmjs.org"): letters, digits and hyphens
//     (LDH), labels of 1 to 63 bytes, at most MaxNameLen bytes in all, a
//     last label that is not all digits. Case and one trailing dot do not
//     count. IDNA is not done: give an internationalised name in its
//     ASCII (xn--) form.
//   - a wildcard "*.example.com": every name under example.com, at any
//     depth, and not example.com itself (list both for both).
//
// A policy holds at most MaxRules rules, allow and deny together.
//
// # Decisions
//
// A deny rule wins over an allow rule. With the default "allow" (also
// when the default is not given), a name or address is allowed unless a
// deny rule matches it. With the default "deny", a name is allowed only if
// an allow name or wildcard matches it, an address only if an allow CIDR
// covers it, and in both cases no deny rule matches. A name rule never
// decides for an address, nor a CIDR for a name: the resolver allows the
// addresses it answered for an allowed name (that is the egress room's
// part, not this package's).
//
// A query name that is not a plain host name (a label with a byte other
// than a letter, digit, hyphen or underscore, as a DNS name may have)
// matches no rule: the default decides for it. Matching such a name
// against a rule by its text could be fooled: "a\.example.com" ends with
// ".example.com" but is a name under "com".
//
// # IPv4-mapped IPv6 addresses
//
// An IPv4-mapped IPv6 address (::ffff:1.2.3.4) is the IPv4 address it
// maps, in rules and in decisions: the rule "::ffff:10.0.0.0/104" is
// 10.0.0.0/8, and AddrAllowed(::ffff:10.1.2.3) decides as for 10.1.2.3.
// Otherwise an address could be written in a form that dodges a rule of
// the other family. An IPv6 rule shorter than /96 (::/0, ::/64) covers
// IPv6 addresses only, not the mapped IPv4 space under it.
package policy
