package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/miekg/dns"

	"warren/network/policy"
)

// Client is a jail as the resolver sees it.
type Client interface {
	// ID names the jail in reports and keys its bound of queries.
	ID() string
	// Rules is the jail's policy now; it is asked at every query, so a
	// change applies to the next one.
	Rules() *policy.Rules
}

// Clients finds the jail that sent a query by its source address (an
// IPv4-mapped address is given as IPv4). The egress room implements it.
type Clients interface {
	Lookup(src netip.Addr) (Client, bool)
}

// Defaults and bounds of a Config.
const (
	DefaultTimeout     = 4 * time.Second
	DefaultMaxInflight = 64
	// MinTTL and MaxTTL bound the lifetime OnAnswer reports (see the
	// package doc).
	MinTTL = 5 * time.Second
	MaxTTL = time.Hour
)

// Config is what a Resolver needs. Clients and Upstreams are required.
type Config struct {
	Clients   Clients
	Upstreams []netip.AddrPort
	// Timeout bounds one query's time at the upstream servers, all of
	// them together, and its wait for a slot; DefaultTimeout when 0. It
	// is below glibc's 5 s, so a jail hears SERVFAIL before it gives up.
	Timeout time.Duration
	// MaxInflight bounds a client's queries at the upstream servers at
	// once; DefaultMaxInflight when 0.
	MaxInflight int
	// OnAnswer gets the addresses answered to c for name, before the
	// answer is sent; nil for none.
	OnAnswer func(c Client, name string, addrs []netip.Addr, ttl time.Duration)
	// OnRefused gets each name refused to c and the rule that refused it
	// ("" for the default); nil for none.
	OnRefused func(c Client, name, rule string)
	// Logger; none when nil.
	Logger hclog.Logger
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("resolver: closed")

// Resolver serves the jails' queries on the sockets given to Serve. New
// makes one; call Close when finished.
type Resolver struct {
	cfg    Config
	log    hclog.Logger
	limits limiter
	// ctx is cancelled by Close: it ends the upstream queries in flight.
	ctx    context.Context
	cancel context.CancelFunc
	// warned rate-limits the warning about failing upstream servers.
	warned rateLimit

	mu sync.Mutex
	// closed and servers are guarded by mu.
	closed  bool
	servers []*server
}

// server is one miekg/dns server and the goroutine that runs it.
type server struct {
	srv  *dns.Server
	done chan struct{} // closed when ActivateAndServe has returned
}

// New checks cfg and makes a Resolver that serves nothing yet.
func New(cfg Config) (*Resolver, error) {
	if cfg.Clients == nil {
		return nil, errors.New("resolver: no Clients")
	}
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("resolver: no upstream server")
	}
	for _, u := range cfg.Upstreams {
		if !u.IsValid() || u.Port() == 0 {
			return nil, fmt.Errorf("resolver: upstream %s is not an address and port", u)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Resolver{
		cfg:    cfg,
		log:    log,
		limits: limiter{max: cfg.MaxInflight},
		ctx:    ctx,
		cancel: cancel,
		warned: rateLimit{every: 10 * time.Second},
	}, nil
}

// Serve answers the queries that come to udp and to tcp (either may be
// nil), in the background, and returns once both are served. The
// resolver owns them from then on: Close closes them (and so does a
// Serve that fails). Serve may be called again for more sockets.
func (r *Resolver) Serve(udp net.PacketConn, tcp net.Listener) error {
	if udp == nil && tcp == nil {
		return errors.New("resolver: serve: no socket")
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		closeSockets(udp, tcp)
		return ErrClosed
	}
	var servers []*dns.Server
	if udp != nil {
		servers = append(servers, &dns.Server{PacketConn: udp, UDPSize: dns.DefaultMsgSize})
	}
	if tcp != nil {
		servers = append(servers, &dns.Server{Listener: tcp})
	}
	var started []*server
	stopAll := func() {
		for _, srv := range started {
			r.stop(srv)
		}
	}
	for _, s := range servers {
		s.Handler = dns.HandlerFunc(r.serveDNS)
		srv, err := start(s)
		if err != nil {
			stopAll()
			closeSockets(udp, tcp)
			return err
		}
		started = append(started, srv)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		stopAll()
		return ErrClosed
	}
	r.servers = append(r.servers, started...)
	return nil
}

// start runs s and waits until it serves.
func start(s *dns.Server) (*server, error) {
	srv := &server{srv: s, done: make(chan struct{})}
	serving := make(chan struct{})
	s.NotifyStartedFunc = func() { close(serving) }
	errc := make(chan error, 1)
	go func() {
		defer close(srv.done)
		errc <- s.ActivateAndServe()
	}()
	select {
	case <-serving:
		return srv, nil
	case err := <-errc:
		return nil, fmt.Errorf("resolver: serve: %w", err)
	}
}

func closeSockets(udp net.PacketConn, tcp net.Listener) {
	if udp != nil {
		udp.Close()
	}
	if tcp != nil {
		tcp.Close()
	}
}

// stop shuts srv down and waits for its goroutines.
func (r *Resolver) stop(srv *server) {
	// ShutdownContext waits for the queries in flight, which Close has
	// cancelled; it fails only for a server that no longer serves.
	_ = srv.srv.ShutdownContext(context.Background())
	<-srv.done
}

// Close stops serving: it cancels the upstream queries in flight, closes
// the sockets and waits for every goroutine of the resolver.
func (r *Resolver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	servers := r.servers
	r.servers = nil
	r.mu.Unlock()
	r.cancel()
	for _, srv := range servers {
		r.stop(srv)
	}
	return nil
}

// serveDNS answers one query (see the package doc for what, by case).
func (r *Resolver) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	reply := r.answer(w, req)
	if reply == nil {
		return
	}
	if req.IsEdns0() != nil {
		reply.SetEdns0(ednsSize, false)
	}
	if _, tcp := w.LocalAddr().(*net.TCPAddr); !tcp {
		reply.Truncate(udpSize(req))
	}
	if err := w.WriteMsg(reply); err != nil {
		r.log.Debug("resolver: answer", "to", w.RemoteAddr(), "error", err)
	}
}

// answer makes the reply to req; nil for none.
func (r *Resolver) answer(w dns.ResponseWriter, req *dns.Msg) *dns.Msg {
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return rcode(req, dns.RcodeNotImplemented)
	}
	q := req.Question[0]
	name := policy.NormalizeName(q.Name)
	src := addrOf(w.RemoteAddr())
	c, ok := r.cfg.Clients.Lookup(src)
	if !ok {
		r.log.Debug("resolver: query from an unknown address", "from", src, "name", name)
		return rcode(req, dns.RcodeNameError)
	}
	switch {
	case q.Qclass != dns.ClassINET:
		return rcode(req, dns.RcodeNotImplemented)
	case q.Qtype == dns.TypeANY, q.Qtype == dns.TypeAXFR, q.Qtype == dns.TypeIXFR:
		return rcode(req, dns.RcodeNotImplemented)
	case q.Qtype == dns.TypePTR:
		return rcode(req, dns.RcodeNameError)
	}
	rules := c.Rules()
	if allowed, rule := rules.NameAllowed(name); !allowed {
		r.refused(c, name, rule)
		return rcode(req, dns.RcodeNameError)
	}

	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	release, ok := r.limits.acquire(ctx, c.ID())
	if !ok {
		r.log.Debug("resolver: too many queries of a client", "client", c.ID(), "name", name)
		return rcode(req, dns.RcodeServerFailure)
	}
	resp, err := r.forward(ctx, q)
	release()
	if err != nil {
		if r.ctx.Err() == nil && r.warned.allow() {
			r.log.Warn("resolver: the upstream servers failed (more failures in the next seconds are not logged)", "name", name, "type", dns.TypeToString[q.Qtype], "error", err)
		}
		return rcode(req, dns.RcodeServerFailure)
	}

	a := filter(name, q.Qtype, resp, rules)
	if a.refused != "" {
		r.refused(c, a.refused, a.rule)
		return rcode(req, dns.RcodeNameError)
	}
	if len(a.addrs) > 0 && r.cfg.OnAnswer != nil {
		r.cfg.OnAnswer(c, name, a.addrs, a.ttl)
	}
	reply := new(dns.Msg)
	reply.SetReply(req)
	reply.RecursionAvailable = true
	reply.Rcode = resp.Rcode
	reply.Answer = a.answer
	reply.Ns = a.ns
	return reply
}

func (r *Resolver) refused(c Client, name, rule string) {
	if r.cfg.OnRefused != nil {
		r.cfg.OnRefused(c, name, rule)
	}
}

// rcode is an empty reply to req with the given rcode.
func rcode(req *dns.Msg, code int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, code)
	m.RecursionAvailable = true
	return m
}

// ednsSize is the UDP payload this resolver advertises and asks for: the
// size that DNS flag day 2020 settled on, below a usual path's MTU.
const ednsSize = 1232

// udpSize is the largest UDP reply a client takes: its EDNS buffer, or
// DNS's own 512 bytes without EDNS.
func udpSize(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return min(max(int(opt.UDPSize()), dns.MinMsgSize), dns.DefaultMsgSize)
	}
	return dns.MinMsgSize
}

// addrOf is the address of a UDP or TCP peer, IPv4-mapped as IPv4; zero
// for another kind.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// rateLimit lets something happen at most once per every.
type rateLimit struct {
	every time.Duration

	mu   sync.Mutex
	last time.Time // guarded by mu
}

func (l *rateLimit) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		return false
	}
	l.last = now
	return true
}
