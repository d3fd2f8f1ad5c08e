package resolver_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"warren/network/policy"
	"warren/network/resolver"
)

// Every test ends with no goroutine left: Close waits for them all.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait of these tests; nothing waits this long when
// the resolver works.
const waitFor = 20 * time.Second

var (
	jailAddr  = netip.MustParseAddr("127.0.0.1")
	otherJail = netip.MustParseAddr("127.0.0.3")
	stranger  = netip.MustParseAddr("127.0.0.2")
)

// jail is a Client whose policy a test may change.
type jail struct {
	id    string
	rules atomic.Pointer[policy.Rules]
}

func (j *jail) ID() string           { return j.id }
func (j *jail) Rules() *policy.Rules { return j.rules.Load() }
func (j *jail) set(t *testing.T, e policy.Egress) {
	t.Helper()
	r, err := policy.Parse(e)
	if err != nil {
		t.Fatal(err)
	}
	j.rules.Store(r)
}

type clients map[netip.Addr]*jail

func (c clients) Lookup(src netip.Addr) (resolver.Client, bool) {
	j, ok := c[src]
	return j, ok
}

// answer is one OnAnswer report.
type answer struct {
	client, name string
	addrs        []netip.Addr
	ttl          time.Duration
}

// refusal is one OnRefused report.
type refusal struct{ client, name, rule string }

// reports gathers what the resolver reported.
type reports struct {
	mu       sync.Mutex
	answers  []answer
	refusals []refusal
}

func (r *reports) lastAnswer(t *testing.T) answer {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.answers) == 0 {
		t.Fatalf("no answer reported")
	}
	return r.answers[len(r.answers)-1]
}

func (r *reports) countAnswers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.answers)
}

func (r *reports) lastRefusal(t *testing.T) refusal {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refusals) == 0 {
		t.Fatalf("no refusal reported")
	}
	return r.refusals[len(r.refusals)-1]
}

func (r *reports) countRefusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.refusals)
}

// fixture is an upstream, a resolver in front of it on 127.0.0.1 (UDP
// and TCP) and the reports.
type fixture struct {
	up      *upstream
	res     *resolver.Resolver
	addr    netip.AddrPort
	jail    *jail
	other   *jail
	reports *reports
}

var jailPolicy = policy.Egress{
	Default: "deny",
	Allow:   []string{"*.allowed.test"},
	Deny:    []string{"*.denied.test", "blocked.allowed.test"},
}

func start(t *testing.T, tweak func(*resolver.Config)) *fixture {
	t.Helper()
	f := &fixture{up: startUpstream(t), reports: &reports{}, jail: &jail{id: "jail-1"}, other: &jail{id: "jail-2"}}
	f.jail.set(t, jailPolicy)
	f.other.set(t, jailPolicy)
	cfg := resolver.Config{
		Clients:   clients{jailAddr: f.jail, otherJail: f.other},
		Upstreams: []netip.AddrPort{f.up.addr},
		OnAnswer: func(c resolver.Client, name string, addrs []netip.Addr, ttl time.Duration) {
			// Late on purpose: an answer sent before its report has
			// returned would be seen by the test before the report.
			time.Sleep(20 * time.Millisecond)
			f.reports.mu.Lock()
			defer f.reports.mu.Unlock()
			f.reports.answers = append(f.reports.answers, answer{c.ID(), name, addrs, ttl})
		},
		OnRefused: func(c resolver.Client, name, rule string) {
			f.reports.mu.Lock()
			defer f.reports.mu.Unlock()
			f.reports.refusals = append(f.reports.refusals, refusal{c.ID(), name, rule})
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	res, err := resolver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	pc, ln := listenPair(t)
	if err := res.Serve(pc, ln); err != nil {
		t.Fatal(err)
	}
	f.res = res
	f.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	return f
}

func (f *fixture) ask(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	return query(t, network, jailAddr, f.addr, name, qtype, true)
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func answerAddrs(m *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(rr.A.To4())
			out = append(out, a)
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(rr.AAAA)
			out = append(out, a)
		}
	}
	return out
}

func wantRcode(t *testing.T, m *dns.Msg, want int) {
	t.Helper()
	if m.Rcode != want {
		t.Fatalf("rcode %s, want %s (answer %v)", dns.RcodeToString[m.Rcode], dns.RcodeToString[want], m)
	}
}

// An allowed name is forwarded; its addresses are reported, before the
// answer, with the name asked and the answer's TTL.
func TestAllowedName(t *testing.T) {
	f := start(t, nil)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			m := f.ask(t, network, "A.Allowed.Test.", dns.TypeA)
			wantRcode(t, m, dns.RcodeSuccess)
			if got, want := answerAddrs(m), addrs("198.51.100.1"); !reflect.DeepEqual(got, want) {
				t.Fatalf("answer %v, want %v", got, want)
			}
			if !m.RecursionAvailable {
				t.Errorf("RA not set: glibc warns of a server that does not recurse")
			}
			got := f.reports.lastAnswer(t)
			want := answer{"jail-1", "a.allowed.test", addrs("198.51.100.1"), 300 * time.Second}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("reported %+v, want %+v", got, want)
			}
		})
	}
}

// A CNAME chain is followed by name, in any order; a target under no
// rule is kept under default deny (a CDN's name); the TTL is the
// chain's least.
func TestCNAMEChain(t *testing.T) {
	f := start(t, nil)
	m := f.ask(t, "udp", "www.allowed.test.", dns.TypeA)
	wantRcode(t, m, dns.RcodeSuccess)
	if got, want := answerAddrs(m), addrs("198.51.100.10", "198.51.100.11"); !reflect.DeepEqual(got, want) {
		t.Fatalf("answer %v, want %v", got, want)
	}
	if len(m.Answer) != 4 {
		t.Fatalf("answer of %d records, want the 2 CNAMEs and 2 A: %v", len(m.Answer), m.Answer)
	}
	got := f.reports.lastAnswer(t)
	want := answer{"jail-1", "www.allowed.test", addrs("198.51.100.10", "198.51.100.11"), 30 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reported %+v, want %+v", got, want)
	}

	// A CNAME loop answers what the upstream said (no address), and ends.
	m = f.ask(t, "udp", "loop.allowed.test.", dns.TypeA)
	wantRcode(t, m, dns.RcodeSuccess)
	if len(answerAddrs(m)) != 0 {
		t.Fatalf("loop answered %v", m.Answer)
	}
}

// A name the policy refuses is NXDOMAIN at once, reported, and never
// forwarded; so is a CNAME to a denied name, and so is any name asked
// from an address no jail has.
func TestRefused(t *testing.T) {
	f := start(t, nil)
	tests := []struct {
		name     string
		refusal  refusal
		upstream bool // whether the upstream is asked
	}{
		{"blocked.allowed.test.", refusal{"jail-1", "blocked.allowed.test", "blocked.allowed.test"}, false},
		{"x.denied.test.", refusal{"jail-1", "x.denied.test", "*.denied.test"}, false},
		{"elsewhere.test.", refusal{"jail-1", "elsewhere.test", ""}, false},
		{"allowed.test.", refusal{"jail-1", "allowed.test", ""}, false}, // the wildcard is for names under it
		{"bad.allowed.test.", refusal{"jail-1", "x.denied.test", "*.denied.test"}, true},
		// The labels are "a.allowed" and "test": a name under "test", whose
		// text ends with ".allowed.test".
		{`a\.allowed.test.`, refusal{"jail-1", `a\.allowed.test`, ""}, false},
	}
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(tt.name+network, func(t *testing.T) {
				before := len(f.up.asked())
				answers := f.reports.countAnswers()
				for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX} {
					m := f.ask(t, network, tt.name, qtype)
					wantRcode(t, m, dns.RcodeNameError)
					if len(m.Answer) != 0 {
						t.Fatalf("NXDOMAIN with records %v", m.Answer)
					}
					if got := f.reports.lastRefusal(t); got != tt.refusal {
						t.Fatalf("reported %+v, want %+v", got, tt.refusal)
					}
				}
				if asked := len(f.up.asked()) > before; asked != tt.upstream {
					t.Fatalf("upstream asked: %v, want %v (%v)", asked, tt.upstream, f.up.asked()[before:])
				}
				if f.reports.countAnswers() != answers {
					t.Fatalf("a refused name's addresses were reported")
				}
			})
		}
	}

	t.Run("unknown source", func(t *testing.T) {
		before, refusals := len(f.up.asked()), f.reports.countRefusals()
		for _, network := range []string{"udp", "tcp"} {
			m := query(t, network, stranger, f.addr, "a.allowed.test.", dns.TypeA, false)
			wantRcode(t, m, dns.RcodeNameError)
		}
		if len(f.up.asked()) != before {
			t.Fatalf("a stranger's query was forwarded: %v", f.up.asked()[before:])
		}
		if f.reports.countRefusals() != refusals {
			t.Fatalf("a stranger's query was reported as a jail's refusal")
		}
	})
}

// A policy change applies to the next query.
func TestPolicyChange(t *testing.T) {
	f := start(t, nil)
	wantRcode(t, f.ask(t, "udp", "a.allowed.test.", dns.TypeA), dns.RcodeSuccess)
	f.jail.set(t, policy.Egress{Deny: []string{"a.allowed.test"}})
	wantRcode(t, f.ask(t, "udp", "a.allowed.test.", dns.TypeA), dns.RcodeNameError)
	wantRcode(t, f.ask(t, "udp", "elsewhere-but-allowed.allowed.test.", dns.TypeA), dns.RcodeNameError) // upstream's own NXDOMAIN
	if !f.up.askedFor("elsewhere-but-allowed.allowed.test.") {
		t.Fatalf("under default allow, the name was not forwarded")
	}
	// The other jail kept its policy.
	m := query(t, "udp", otherJail, f.addr, "a.allowed.test.", dns.TypeA, true)
	wantRcode(t, m, dns.RcodeSuccess)
}

// AAAA queries are answered with no address, keeping the upstream's
// rcode and chain; the A answer of the same name has its address.
func TestAAAA(t *testing.T) {
	f := start(t, nil)
	answers := f.reports.countAnswers()
	m := f.ask(t, "udp", "v6.allowed.test.", dns.TypeAAAA)
	wantRcode(t, m, dns.RcodeSuccess)
	if len(m.Answer) != 0 {
		t.Fatalf("AAAA answered %v, want no record", m.Answer)
	}
	m = f.ask(t, "udp", "cv6.allowed.test.", dns.TypeAAAA)
	wantRcode(t, m, dns.RcodeSuccess)
	if len(m.Answer) != 1 || m.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Fatalf("AAAA of a CNAME answered %v, want the CNAME alone", m.Answer)
	}
	if f.reports.countAnswers() != answers {
		t.Fatalf("an AAAA query reported addresses")
	}
	wantRcode(t, f.ask(t, "udp", "nx.allowed.test.", dns.TypeAAAA), dns.RcodeNameError)
	m = f.ask(t, "udp", "v6.allowed.test.", dns.TypeA)
	if got, want := answerAddrs(m), addrs("198.51.100.30"); !reflect.DeepEqual(got, want) {
		t.Fatalf("A answered %v, want %v", got, want)
	}
}

// What the upstream adds for other names is dropped; a negative answer
// keeps its SOA; HTTPS records lose their address hints; other types
// are forwarded.
func TestAnswerFiltered(t *testing.T) {
	f := start(t, nil)
	m := f.ask(t, "udp", "extra.allowed.test.", dns.TypeA)
	if got, want := answerAddrs(m), addrs("198.51.100.20"); !reflect.DeepEqual(got, want) {
		t.Fatalf("answer %v, want %v", got, want)
	}
	if got := f.reports.lastAnswer(t).addrs; !reflect.DeepEqual(got, addrs("198.51.100.20")) {
		t.Fatalf("reported %v, want only the name's own address", got)
	}

	m = f.ask(t, "udp", "nx.allowed.test.", dns.TypeA)
	wantRcode(t, m, dns.RcodeNameError)
	if len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("NXDOMAIN authority %v, want the SOA", m.Ns)
	}

	m = f.ask(t, "udp", "https.allowed.test.", dns.TypeHTTPS)
	wantRcode(t, m, dns.RcodeSuccess)
	if len(m.Answer) != 1 {
		t.Fatalf("HTTPS answered %v", m.Answer)
	}
	h := m.Answer[0].(*dns.HTTPS)
	if len(h.Value) != 1 || h.Value[0].Key() != dns.SVCB_ALPN {
		t.Fatalf("HTTPS values %v, want alpn alone (no address hint)", h.Value)
	}

	m = f.ask(t, "tcp", "mx.allowed.test.", dns.TypeMX)
	wantRcode(t, m, dns.RcodeSuccess)
	if len(m.Answer) != 1 || m.Answer[0].(*dns.MX).Mx != "mail.allowed.test." {
		t.Fatalf("MX answered %v", m.Answer)
	}
	m = f.ask(t, "udp", "mx.allowed.test.", dns.TypeTXT)
	if len(m.Answer) != 1 || m.Answer[0].Header().Rrtype != dns.TypeTXT {
		t.Fatalf("TXT answered %v", m.Answer)
	}
}

// PTR is NXDOMAIN, ANY and other classes NOTIMP, none forwarded.
func TestTypesNotServed(t *testing.T) {
	f := start(t, nil)
	wantRcode(t, f.ask(t, "udp", "1.100.51.198.in-addr.arpa.", dns.TypePTR), dns.RcodeNameError)
	wantRcode(t, f.ask(t, "udp", "a.allowed.test.", dns.TypeANY), dns.RcodeNotImplemented)
	wantRcode(t, f.ask(t, "tcp", "allowed.test.", dns.TypeAXFR), dns.RcodeNotImplemented)
	m := new(dns.Msg)
	m.SetQuestion("version.bind.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	resp, err := dns.Exchange(m, f.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	wantRcode(t, resp, dns.RcodeNotImplemented)
	if got := f.up.asked(); len(got) != 0 {
		t.Fatalf("forwarded %v", got)
	}
	if n := f.reports.countRefusals(); n != 0 {
		t.Fatalf("%d refusals reported for queries that name no destination", n)
	}
}

// TTLs: the report is at least MinTTL and at most MaxTTL, and the
// answer's own TTLs are cut to MaxTTL.
func TestTTL(t *testing.T) {
	f := start(t, nil)
	f.ask(t, "udp", "ttl0.allowed.test.", dns.TypeA)
	if got := f.reports.lastAnswer(t).ttl; got != resolver.MinTTL {
		t.Fatalf("TTL 0 reported as %v, want %v", got, resolver.MinTTL)
	}
	m := f.ask(t, "udp", "long.allowed.test.", dns.TypeA)
	if got := f.reports.lastAnswer(t).ttl; got != resolver.MaxTTL {
		t.Fatalf("TTL of a day reported as %v, want %v", got, resolver.MaxTTL)
	}
	if got := m.Answer[0].Header().Ttl; got != uint32(resolver.MaxTTL/time.Second) {
		t.Fatalf("answer TTL %d, want %d", got, uint32(resolver.MaxTTL/time.Second))
	}
}

// An answer too large for UDP: the resolver asks the upstream again over
// TCP; a jail asking over UDP without EDNS gets TC and asks over TCP.
func TestTruncated(t *testing.T) {
	f := start(t, nil)
	m := query(t, "udp", jailAddr, f.addr, "big.allowed.test.", dns.TypeA, false)
	if !m.Truncated {
		t.Fatalf("a 512-byte answer of 100 records not truncated")
	}
	if !slices.Contains(f.up.asked(), "big.allowed.test. A tcp") {
		t.Fatalf("the upstream was not asked over TCP: %v", f.up.asked())
	}
	if got := len(f.reports.lastAnswer(t).addrs); got != 100 {
		t.Fatalf("reported %d addresses, want 100", got)
	}
	m = query(t, "tcp", jailAddr, f.addr, "big.allowed.test.", dns.TypeA, false)
	if m.Truncated || len(m.Answer) != 100 {
		t.Fatalf("over TCP: truncated %v, %d records; want all 100", m.Truncated, len(m.Answer))
	}
}

// When the upstream fails (an error rcode, another question, or no
// answer in time), the jail gets SERVFAIL; a second upstream is tried.
func TestUpstreamFails(t *testing.T) {
	f := start(t, func(c *resolver.Config) { c.Timeout = 300 * time.Millisecond })
	for _, name := range []string{"fail.allowed.test.", "refuse.allowed.test.", "wrong.allowed.test.", "slow.allowed.test."} {
		wantRcode(t, f.ask(t, "udp", name, dns.TypeA), dns.RcodeServerFailure)
	}

	// A dead first server: the second answers.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close() // bound and never read: queries to it time out
	up := startUpstream(t)
	res, err := resolver.New(resolver.Config{
		Clients:   clients{jailAddr: f.jail},
		Upstreams: []netip.AddrPort{dead.LocalAddr().(*net.UDPAddr).AddrPort(), up.addr},
		Timeout:   2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Serve(pc, nil); err != nil {
		t.Fatal(err)
	}
	m := query(t, "udp", jailAddr, pc.LocalAddr().(*net.UDPAddr).AddrPort(), "a.allowed.test.", dns.TypeA, true)
	wantRcode(t, m, dns.RcodeSuccess)
}

// One client has at most MaxInflight queries at the upstream; past
// 4×MaxInflight waiting it is answered SERVFAIL at once; another client
// is served meanwhile.
func TestInflightBound(t *testing.T) {
	const most = 2
	f := start(t, func(c *resolver.Config) { c.MaxInflight = most; c.Timeout = waitFor })
	const n = 4*most + 3
	rcodes := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := tryQuery(t.Context(), "udp", jailAddr, f.addr, "hold"+string(rune('a'+i))+".allowed.test.", dns.TypeA, true)
			if err != nil {
				t.Errorf("query: %v", err)
				rcodes <- -1
				return
			}
			rcodes <- m.Rcode
		})
	}
	// The ones past the bound are answered while the others wait.
	for range n - 4*most {
		select {
		case rc := <-rcodes:
			if rc != dns.RcodeServerFailure {
				t.Fatalf("rcode %s before the upstream answered, want SERVFAIL", dns.RcodeToString[rc])
			}
		case <-time.After(waitFor):
			t.Fatalf("no SERVFAIL past the bound")
		}
	}
	for range most {
		<-f.up.held
	}
	// The other jail is not held up by the first one's flood.
	m := query(t, "udp", otherJail, f.addr, "a.allowed.test.", dns.TypeA, true)
	wantRcode(t, m, dns.RcodeSuccess)

	close(f.up.hold)
	wg.Wait()
	close(rcodes)
	for rc := range rcodes {
		if rc != dns.RcodeSuccess {
			t.Fatalf("rcode %s after the upstream answered, want NOERROR", dns.RcodeToString[rc])
		}
	}
	f.up.mu.Lock()
	defer f.up.mu.Unlock()
	if f.up.most != most {
		t.Fatalf("the upstream had %d queries of one client at once, want %d", f.up.most, most)
	}
}

// Close ends a query that waits on the upstream at once, and leaves no
// goroutine (TestMain checks); the sockets are closed; Serve then fails.
func TestClose(t *testing.T) {
	f := start(t, func(c *resolver.Config) { c.Timeout = waitFor })
	done := make(chan struct{})
	go func() {
		defer close(done)
		tryQuery(t.Context(), "udp", jailAddr, f.addr, "slow.allowed.test.", dns.TypeA, true)
	}()
	deadline := time.Now().Add(waitFor)
	for !f.up.askedFor("slow.allowed.test.") {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream never got the query")
		}
		time.Sleep(5 * time.Millisecond)
	}
	began := time.Now()
	if err := f.res.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("Close took %v with a query at a hung upstream", took)
	}
	<-done
	if _, err := net.Dial("tcp", f.addr.String()); err == nil {
		t.Fatalf("the TCP socket still accepts after Close")
	}
	pc, err := net.ListenPacket("udp", f.addr.String())
	if err != nil {
		t.Fatalf("the UDP port is still held after Close: %v", err)
	}
	pc.Close()
	if err := f.res.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	pc, err = net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.res.Serve(pc, nil); err != resolver.ErrClosed {
		t.Fatalf("Serve after Close: %v, want ErrClosed", err)
	}
}

func TestNewRefuses(t *testing.T) {
	up := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}
	for _, cfg := range []resolver.Config{
		{Upstreams: up},
		{Clients: clients{}},
		{Clients: clients{}, Upstreams: []netip.AddrPort{{}}},
	} {
		if _, err := resolver.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

func TestUpstreamsFromResolvConf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	conf := `# generated
search example.com
nameserver 127.0.0.53
; a comment
nameserver   2001:db8::53
nameserver fe80::1%eth0
nameserver not-an-address
options edns0 trust-ad
#nameserver 10.0.0.1
nameserver ::ffff:192.0.2.53
`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := resolver.UpstreamsFromResolvConf(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{
		netip.MustParseAddrPort("127.0.0.53:53"),
		netip.MustParseAddrPort("[2001:db8::53]:53"),
		netip.MustParseAddrPort("[fe80::1%eth0]:53"),
		netip.MustParseAddrPort("192.0.2.53:53"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("search example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolver.UpstreamsFromResolvConf(empty); err == nil {
		t.Fatalf("no error for a file without nameserver")
	}
	if _, err := resolver.UpstreamsFromResolvConf(filepath.Join(dir, "missing")); err == nil {
		t.Fatalf("no error for a missing file")
	}
}
