package resolver

import (
	"errors"
	"fmt"
	"net"

	"github.com/miekg/dns"

	"warren/network/policy"
)

// ServeSink answers every query that comes to conn with NXDOMAIN, at
// once, for a jail without network (`network: none`): its lookups fail
// fast instead of timing out, and onQuery (nil for none) gets each name
// asked, normalised (policy.NormalizeName), before the answer is sent,
// so that the daemon knows why a command failed by the time it
// does. Every name and type is reported, reverse lookups too: the
// caller decides what is worth a note.
//
// The caller opens conn (inside the jail's network namespace, at
// 127.0.0.1:53) and owns it: ServeSink runs on the caller's goroutine
// until conn is closed, and then returns nil; it returns another error
// of conn's. A datagram that is not a DNS query is dropped unanswered
// (answering junk could only amplify it).
func ServeSink(conn net.PacketConn, onQuery func(name string)) error {
	buf := make([]byte, dns.DefaultMsgSize)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("resolver: sink: read: %w", err)
		}
		var req dns.Msg
		if err := req.Unpack(buf[:n]); err != nil || req.Response {
			continue
		}
		code := dns.RcodeNameError
		if req.Opcode != dns.OpcodeQuery {
			code = dns.RcodeNotImplemented
		} else if onQuery != nil && len(req.Question) > 0 {
			// The first question only: a stub asks one, and a query
			// cannot make many reports.
			onQuery(policy.NormalizeName(req.Question[0].Name))
		}
		reply := rcode(&req, code)
		if req.IsEdns0() != nil {
			reply.SetEdns0(ednsSize, false)
		}
		b, err := reply.Pack()
		if err != nil {
			continue
		}
		// A failed send is the asker's loss (it went away); the sink
		// serves on.
		_, _ = conn.WriteTo(b, from)
	}
}
