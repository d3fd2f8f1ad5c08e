// Package resolver is the DNS server the daemon runs for its jails. It
// answers on sockets it is given (it picks no address itself), finds the
// asking jail by the query's source address, answers from the jail's
// egress policy (package policy) and forwards the names the policy
// allows to the host's upstream servers. It reports every address it
// answered, so that the kernel can allow a jail exactly what it
// resolved, and every name it refused, so that the refusal can be told.
//
// # Answers
//
// What a jail gets, by case. The rule behind most of them: a jail must
// never wait. glibc turns REFUSED and SERVFAIL into EAI_AGAIN, a
// temporary failure that npm retries for 71 s, so a name that will not
// resolve answers NXDOMAIN, at once, never REFUSED or SERVFAIL.
//
//   - A source address that Clients does not know: NXDOMAIN, and nothing
//     is forwarded.
//   - A name the jail's policy refuses: NXDOMAIN at once, and OnRefused.
//   - An allowed name: forwarded (below); the upstream's answer is passed
//     on, rcode and all (NXDOMAIN stays NXDOMAIN), with these changes:
//     only the records of the name's own CNAME chain are kept in the
//     answer section (another name's records, which an upstream may add,
//     neither reach the jail nor open the kernel's sets), only SOA
//     records in the authority section (for negative caching), nothing
//     in the additional section, and address hints are taken out of
//     HTTPS and SVCB records (so a client looks the addresses up, and
//     they are reported).
//   - A CNAME in the chain to a name that a deny rule of the policy
//     matches: NXDOMAIN, and OnRefused with that name and rule, as if the
//     jail had asked for it (deny wins, through a CNAME too). A CNAME to
//     a name that no rule matches is kept, also under the default "deny":
//     the chain is the allowed name's own answer (a CDN's name, typically),
//     and its owner could as well have answered the addresses directly.
//   - AAAA: the jails have IPv6 off, so an IPv6 address is one they
//     cannot use, and a client that got one tries it first and waits for
//     it to fail. An AAAA query of an allowed name is forwarded and
//     answered without its AAAA records: NOERROR with no address (or
//     the upstream's NXDOMAIN, and its CNAME chain, so that A and AAAA
//     answers agree on whether the name exists).
//   - Other types of an allowed name (MX, TXT, SRV, CAA, HTTPS, ...):
//     forwarded, as above.
//   - PTR: NXDOMAIN at once, not forwarded and not reported: a reverse
//     lookup names no destination, and forwarding it would ask the
//     host's servers about the host's own networks.
//   - ANY (RFC 8482), zone transfers, a class other than IN, an opcode
//     other than QUERY: NOTIMP.
//   - The upstream servers all fail (time out, cannot be reached, answer
//     SERVFAIL, REFUSED, NOTIMP or FORMERR, or answer another question):
//     SERVFAIL. That is
//     the one case of a temporary failure, and a client retrying is
//     right. Also when a jail has more queries waiting than its bound
//     (below): it is flooding, and waiting is what it should do.
//
// # Reports
//
// OnAnswer gets every A (and AAAA, for a type whose answer carries one)
// address of an answer's chain, with the name asked for and a lifetime,
// and returns before the answer is sent: once the jail has its answer,
// the kernel's allow set has its addresses, and a connection made at
// once is not refused. The lifetime is the least TTL of the chain's
// records, at least MinTTL (so that an entry outlives the connect that
// follows a TTL-0 answer) and at most MaxTTL; the answer's own TTLs are
// cut to MaxTTL too, so the jail never keeps an address longer than the
// set does. OnRefused gets every name refused by a rule or the default,
// with the rule ("" for the default). Both are called from many
// goroutines at once and must be quick and safe for that.
//
// # Upstreams
//
// Queries go to the upstream servers in their order (each gets a share
// of Timeout, what is left divided by the servers left), over UDP, and
// again over TCP to the same server when the UDP answer is truncated.
// The resolver runs in the host's network namespace, so a loopback
// stub (systemd-resolved's 127.0.0.53) is a fine upstream.
// UpstreamsFromResolvConf reads the host's list. The query sent is a
// new one (a random id, recursion desired, EDNS with a 1232-byte
// buffer), not the jail's own message, so no option a jail sets (client
// subnet, cookies) goes upstream; DNSSEC records are not asked for.
//
// # Bounds
//
// Each client has at most MaxInflight queries at the upstream servers at
// once, and at most 4×MaxInflight waiting or running; more are answered
// SERVFAIL at once, so one jail cannot flood the upstream servers or
// pile up goroutines here. A client waits for a slot at most Timeout.
//
// # Goroutines
//
// The miekg/dns servers (one per socket given to Serve) own a goroutine
// per UDP query and per TCP connection. Close cancels the upstream
// queries in flight, stops the servers, closes the sockets and waits for
// every goroutine. ServeSink runs on its caller's goroutine until its
// socket is closed.
package resolver
