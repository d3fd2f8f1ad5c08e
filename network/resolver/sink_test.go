package resolver_test

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"warren/network/resolver"
)

// The sink answers every query NXDOMAIN at once, reports the name
// before it answers, drops what is not a query, and returns once its
// socket is closed.
func TestSink(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		names []string
	)
	served := make(chan error, 1)
	go func() {
		served <- resolver.ServeSink(pc, func(name string) {
			mu.Lock()
			defer mu.Unlock()
			names = append(names, name)
		})
	}()
	addr := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	asked := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(names)
	}

	// Junk first: the sink drops it and serves on.
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("not a DNS message"))
	c.Close()

	for i, q := range []struct {
		name  string
		qtype uint16
		edns  bool
	}{
		{"Registry.NPMjs.org.", dns.TypeA, false},
		{"registry.npmjs.org.", dns.TypeAAAA, true},
		{"1.0.0.127.in-addr.arpa.", dns.TypePTR, false},
	} {
		m := query(t, "udp", jailAddr, addr, q.name, q.qtype, q.edns)
		wantRcode(t, m, dns.RcodeNameError)
		if n := len(asked()); n != i+1 {
			t.Fatalf("%d names reported once the answer came, want %d", n, i+1)
		}
		if (m.IsEdns0() != nil) != q.edns {
			t.Errorf("EDNS in the answer: %v, want %v", m.IsEdns0() != nil, q.edns)
		}
		if len(m.Question) != 1 || m.Question[0].Name != q.name {
			t.Errorf("answer's question %v, want %s", m.Question, q.name)
		}
	}
	want := []string{"registry.npmjs.org", "registry.npmjs.org", "1.0.0.127.in-addr.arpa"}
	if got := asked(); !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}

	pc.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeSink: %v, want nil after its socket closed", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("ServeSink did not return after its socket closed")
	}
}

// A nil onQuery is allowed.
func TestSinkNilReport(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- resolver.ServeSink(pc, nil) }()
	m := query(t, "udp", jailAddr, pc.LocalAddr().(*net.UDPAddr).AddrPort(), "example.com.", dns.TypeA, false)
	wantRcode(t, m, dns.RcodeNameError)
	pc.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
