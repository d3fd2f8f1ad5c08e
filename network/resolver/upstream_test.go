package resolver_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// upstream is a real DNS server on loopback (UDP and TCP on one port)
// that answers from fixed records and logs every query it gets.
type upstream struct {
	addr netip.AddrPort

	// hold is closed to let the queries of "hold." names go on.
	hold chan struct{}
	// stop is closed when the test ends: hung queries end.
	stop chan struct{}

	mu       sync.Mutex
	queries  []string // "name type net", guarded by mu
	inflight int      // hold queries now, guarded by mu
	most     int      // the most hold queries at once, guarded by mu
	held     chan struct{}
}

// Records of the upstream, in zone-file form, by name. A name not here
// is NXDOMAIN, with an SOA.
var zone = map[string][]string{
	"a.allowed.test.": {"a.allowed.test. 300 IN A 198.51.100.1"},
	"www.allowed.test.": {
		// Out of order, on purpose: the chain is followed by name.
		"edge.cdn.test. 30 IN A 198.51.100.10",
		"cdn.other.test. 60 IN CNAME edge.cdn.test.",
		"www.allowed.test. 300 IN CNAME cdn.other.test.",
		"edge.cdn.test. 30 IN A 198.51.100.11",
	},
	"bad.allowed.test.": {
		"bad.allowed.test. 300 IN CNAME mid.allowed.test.",
		"mid.allowed.test. 300 IN CNAME x.denied.test.",
		"x.denied.test. 300 IN A 203.0.113.66",
	},
	"extra.allowed.test.": {
		"extra.allowed.test. 300 IN A 198.51.100.20",
		"other.test. 300 IN A 203.0.113.99", // not the name's: dropped
	},
	"v6.allowed.test.": {
		"v6.allowed.test. 300 IN A 198.51.100.30",
		"v6.allowed.test. 300 IN AAAA 2001:db8::30",
	},
	"cv6.allowed.test.": {
		"cv6.allowed.test. 300 IN CNAME v6.allowed.test.",
		"v6.allowed.test. 300 IN A 198.51.100.30",
		"v6.allowed.test. 300 IN AAAA 2001:db8::30",
	},
	"ttl0.allowed.test.": {"ttl0.allowed.test. 0 IN A 198.51.100.40"},
	"long.allowed.test.": {"long.allowed.test. 86400 IN A 198.51.100.41"},
	"mx.allowed.test.": {
		"mx.allowed.test. 300 IN MX 10 mail.allowed.test.",
		"mx.allowed.test. 300 IN TXT \"v=spf1 -all\"",
	},
	"https.allowed.test.": {`https.allowed.test. 300 IN HTTPS 1 . alpn="h2" ipv4hint="198.51.100.50" ipv6hint="2001:db8::50"`},
	"loop.allowed.test.": {
		"loop.allowed.test. 300 IN CNAME loop2.allowed.test.",
		"loop2.allowed.test. 300 IN CNAME loop.allowed.test.",
	},
	"big.allowed.test.": bigRecords(),
}

// bigRecords are more A records than a 1232-byte UDP answer holds, so
// the resolver must ask again over TCP.
func bigRecords() []string {
	var rr []string
	for i := range 100 {
		rr = append(rr, fmt.Sprintf("big.allowed.test. 300 IN A 198.51.%d.%d", 100+i/250, 1+i%250))
	}
	return rr
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{hold: make(chan struct{}), stop: make(chan struct{}), held: make(chan struct{}, 100)}
	pc, ln := listenPair(t)
	u.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	for _, s := range []*dns.Server{{PacketConn: pc}, {Listener: ln}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		s.Handler = dns.HandlerFunc(u.serve)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			s.Shutdown()
			<-done
		})
	}
	t.Cleanup(func() { close(u.stop) }) // runs first: hung handlers end
	return u
}

// listenPair listens on loopback for UDP and TCP on one port (the port
// a resolver asks again over TCP). Another socket may hold the UDP
// socket's port for TCP, so it tries a few.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatalf("no port free for both UDP and TCP on 127.0.0.1")
	return nil, nil
}

func (u *upstream) serve(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	_, tcp := w.LocalAddr().(*net.TCPAddr)
	network := map[bool]string{false: "udp", true: "tcp"}[tcp]
	u.mu.Lock()
	u.queries = append(u.queries, fmt.Sprintf("%s %s %s", q.Name, dns.TypeToString[q.Qtype], network))
	u.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(req)
	name := strings.ToLower(q.Name)
	switch {
	case name == "fail.allowed.test.":
		m.Rcode = dns.RcodeServerFailure
	case name == "refuse.allowed.test.":
		m.Rcode = dns.RcodeRefused
	case name == "slow.allowed.test.":
		<-u.stop // never answered while the test runs
		return
	case name == "wrong.allowed.test.":
		m.Question[0].Name = "other.allowed.test."
	case strings.HasPrefix(name, "hold"):
		u.mu.Lock()
		u.inflight++
		u.most = max(u.most, u.inflight)
		u.mu.Unlock()
		u.held <- struct{}{}
		select {
		case <-u.hold:
		case <-u.stop:
		}
		u.mu.Lock()
		u.inflight--
		u.mu.Unlock()
		m.Answer = append(m.Answer, mustRR(name+" 60 IN A 198.51.100.99"))
	default:
		recs, ok := zone[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, mustRR("allowed.test. 600 IN SOA ns.allowed.test. admin.allowed.test. 1 7200 3600 1209600 300"))
			break
		}
		for _, s := range recs {
			rr := mustRR(s)
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	if !tcp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

func mustRR(s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", s, err))
	}
	return rr
}

// asked is the log of queries so far.
func (u *upstream) asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.queries...)
}

// askedFor tells whether the upstream got a query of name.
func (u *upstream) askedFor(name string) bool {
	for _, q := range u.asked() {
		if strings.HasPrefix(q, name+" ") {
			return true
		}
	}
	return false
}

// query asks the DNS server at server a question from the address src,
// over network ("udp" or "tcp"), with EDNS or not.
func query(t *testing.T, network string, src netip.Addr, server netip.AddrPort, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m, err := tryQuery(t.Context(), network, src, server, name, qtype, edns)
	if err != nil {
		t.Fatalf("query %s %s over %s from %s: %v", name, dns.TypeToString[qtype], network, src, err)
	}
	return m
}

func tryQuery(ctx context.Context, network string, src netip.Addr, server netip.AddrPort, name string, qtype uint16, edns bool) (*dns.Msg, error) {
	d := &net.Dialer{}
	if network == "tcp" {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	} else {
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	c := &dns.Client{Net: network, Dialer: d, Timeout: waitFor}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	resp, _, err := c.ExchangeContext(ctx, m, server.String())
	return resp, err
}
