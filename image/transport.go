package image

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// The guarded transport: what the store dials for a pull.
//
// A registry, or a redirect it answers with, may name any host; the host's
// name may resolve to anything. So the check is on the address really
// dialed, after DNS and on every connection a redirect makes
// (net.Dialer.Control), not on names: loopback, unspecified, link-local
// (with the cloud metadata address), private, shared (100.64/10),
// multicast, reserved and 0/8 addresses are refused, unless that exact
// address and port is what a registry named in Config.Registries resolves
// to (an operator's mirror on the private network; a test's registry on
// loopback). No proxy from the environment is used: a proxy dials for the
// store, past this check.
//
// Plain HTTP is for registries named in Config.Registries that are on
// loopback, and nothing else: RoundTrip refuses any other http:// request,
// a redirect's too.

// refusedPrefixes are the ranges the store never dials unless a named
// registry is there.
var refusedPrefixes = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network (0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (and metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// nat64 holds IPv4 addresses in its last 32 bits: judged by those.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// refusedKind says why the store does not dial a, or "" when it may.
func refusedKind(a netip.Addr) string {
	// A zone would make every prefix miss (netip.Prefix.Contains).
	a = a.Unmap().WithZone("")
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if !a.IsValid() {
		return "invalid"
	}
	for _, p := range refusedPrefixes {
		if p.prefix.Contains(a) {
			return p.kind
		}
	}
	return ""
}

// guard holds what the transport checks against: the registries named in
// Config.Registries. It does not change after Open.
type guard struct {
	// named are the registries as written in the Config (normalised), nil
	// when any registry at a public address may be pulled from.
	named []string
	// resolve looks a host up; net.DefaultResolver's in the daemon.
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

func newGuard(registries []string) *guard {
	g := &guard{resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
	for _, r := range registries {
		g.named = append(g.named, normRegistry(r))
	}
	return g
}

// allowed reports whether a pull from registry (normalised) may start.
func (g *guard) allowed(registry string) bool {
	if g.named == nil {
		return true
	}
	for _, n := range g.named {
		if n == registry {
			return true
		}
	}
	return false
}

// dialHost is the host the store dials for a registry: Docker Hub's API
// is not at docker.io itself.
func dialHost(registry string) string {
	if registry == dockerHub {
		return hubHost
	}
	return registry
}

// isNamed reports whether ap is an address a named registry resolves to,
// on its port (443 or 80 when it names none).
func (g *guard) isNamed(ctx context.Context, ap netip.AddrPort) bool {
	for _, r := range g.named {
		host, port := splitHostPort(dialHost(r))
		ports := []uint16{443, 80}
		if port != 0 {
			ports = []uint16{port}
		}
		portOK := false
		for _, p := range ports {
			portOK = portOK || p == ap.Port()
		}
		if !portOK {
			continue
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else {
			// A lookup only for an address that would be refused
			// otherwise: the common case (a public address) costs none.
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			addrs, _ = g.resolve(lctx, host)
			cancel()
		}
		for _, a := range addrs {
			if a.Unmap().WithZone("") == ap.Addr().Unmap().WithZone("") {
				return true
			}
		}
	}
	return false
}

// splitHostPort splits "host", "host:port", "[v6]:port" or "v6"; port 0
// when none is written.
func splitHostPort(hp string) (string, uint16) {
	if ap, err := netip.ParseAddrPort(hp); err == nil {
		return ap.Addr().String(), ap.Port()
	}
	if a, err := netip.ParseAddr(strings.Trim(hp, "[]")); err == nil {
		return a.String(), 0
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	var p uint16
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil {
		return host, 0
	}
	return host, p
}

// insecureOK reports whether plain HTTP may be spoken to host (a URL's
// host[:port]): a named registry on loopback.
func (g *guard) insecureOK(host string) bool {
	if !g.allowed(normRegistry(host)) || g.named == nil {
		return false
	}
	h, _ := splitHostPort(host)
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// control refuses a connection to an address the store never dials (see
// the top of this file); it runs after DNS, on the address itself.
func (g *guard) control(ctx context.Context) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: dial %s %s: not an address", ErrNotAllowed, network, address)
		}
		kind := refusedKind(ap.Addr())
		if kind == "" || g.isNamed(ctx, ap) {
			return nil
		}
		return fmt.Errorf("%w: dial %s: a %s address, which no registry named in the allowed registries resolves to", ErrNotAllowed, address, kind)
	}
}

// guardedTransport is the store's own transport, with the dialer's
// check and no proxy.
func (g *guard) transport() http.RoundTripper {
	t := &http.Transport{
		Proxy: nil, // a proxy would dial past control
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control(ctx)}
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
	}
	return &schemeGuard{g: g, next: t}
}

// schemeGuard refuses plain HTTP but to named loopback registries.
type schemeGuard struct {
	g    *guard
	next http.RoundTripper
}

var _ http.RoundTripper = (*schemeGuard)(nil)

func (s *schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !(req.URL.Scheme == "http" && s.g.insecureOK(req.URL.Host)) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s %s://%s: plain HTTP is only for registries on loopback named in the allowed registries", ErrNotAllowed, req.Method, req.URL.Scheme, req.URL.Host)
	}
	return s.next.RoundTrip(req)
}

// closeIdle closes the idle connections of the store's own transport.
func closeIdle(rt http.RoundTripper) {
	if s, ok := rt.(*schemeGuard); ok {
		rt = s.next
	}
	if t, ok := rt.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}
