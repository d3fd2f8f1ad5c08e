package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
	"warren/network/egress"
	"warren/network/policy"
	"warren/network/resolver"
)

// Modes are the jail networks, in the order the docs give them.
var Modes = []string{"none", "egress", "host"}

// Events takes the refusals (package events).
type Events interface{ Emit(api.Event) }

// Metrics counts them (package metrics).
type Metrics interface{ Refused(kind string) }

// RefusedNetwork is the kind of a refusal of the network, in the metrics.
const RefusedNetwork = "network"

// Config is the network room's.
type Config struct {
	// Allow are the modes a thread may ask for; nil means all of Modes.
	Allow []string
	// DataDir names this daemon's table and links (a hash of it), so a
	// restart finds and removes what a kill -9 left.
	DataDir string
	// Subnet, AllowPrivate: egress.Config's. Upstreams are the name
	// servers the resolver asks; nil means the host's resolv.conf's.
	Subnet       netip.Prefix
	AllowPrivate []netip.Prefix
	Upstreams    []netip.AddrPort
	Events       Events
	Metrics      Metrics
	Logger       hclog.Logger
}

// Network is the room of the jails' networks: the daemon's egress network
// (package egress) and resolver (package resolver) when egress is
// allowed, each running jail's link or name sink, and the network calls.
type Network struct {
	cfg      Config
	log      hclog.Logger
	egress   *egress.Network    // nil when egress is not allowed
	resolver *resolver.Resolver // nil with it

	// mu guards the jails' networks and closed. A leaf: nothing is
	// called under it but map work.
	mu sync.Mutex
	// byJail holds every jail's network until its end; byKey the newest
	// of each thread's (a thread's next jail may start before the end of
	// its last is told), byAddr the egress ones by address.
	byJail map[*jail.Jail]*jailNet
	byKey  map[meta.ThreadKey]*jailNet
	byAddr map[netip.Addr]*jailNet
	closed bool
	// sinks counts the name sinks' goroutines; Close waits for them.
	sinks sync.WaitGroup
	// reader is the goroutine that reads the kernel's refusals of the
	// jails' connections; closing the egress network ends it, and Close
	// waits for it.
	reader sync.WaitGroup
}

// Start opens the egress network and its resolver when egress is allowed.
func Start(ctx context.Context, cfg Config) (*Network, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Allow == nil {
		cfg.Allow = Modes
	}
	for _, m := range cfg.Allow {
		if !slices.Contains(Modes, m) {
			return nil, fmt.Errorf("network: mode %s is not none, egress or host", call.Quote(m))
		}
	}
	n := &Network{cfg: cfg, log: cfg.Logger.Named("network"), byJail: make(map[*jail.Jail]*jailNet),
		byKey: make(map[meta.ThreadKey]*jailNet), byAddr: make(map[netip.Addr]*jailNet)}
	if !slices.Contains(cfg.Allow, "egress") {
		return n, nil
	}
	ups := cfg.Upstreams
	if ups == nil {
		var err error
		if ups, err = resolver.UpstreamsFromResolvConf("/etc/resolv.conf"); err != nil {
			return nil, fmt.Errorf("network: the resolver's upstream servers: %w (name them with --egress-dns)", err)
		}
	}
	// The range holds none of the host's own name servers either: its
	// route would take them from every program of the host.
	var avoid []netip.Addr
	hostUps, _ := resolver.UpstreamsFromResolvConf("/etc/resolv.conf")
	for _, u := range append(hostUps, ups...) {
		avoid = append(avoid, u.Addr())
	}
	eg, err := egress.Open(ctx, egress.Config{
		ID: egress.IDOf(cfg.DataDir), Subnet: cfg.Subnet, AllowPrivate: cfg.AllowPrivate,
		Avoid: avoid, Log: n.log,
	})
	if err != nil {
		return nil, err
	}
	n.egress = eg
	n.resolver, err = resolver.New(resolver.Config{
		Clients: clients{n}, Upstreams: ups, Logger: n.log,
		OnAnswer: n.answered, OnRefused: n.nameRefused,
	})
	if err == nil {
		err = n.serveResolver()
	}
	if err != nil {
		if n.resolver != nil {
			n.resolver.Close()
		}
		eg.Close()
		return nil, fmt.Errorf("network: the jails' resolver: %w", err)
	}
	n.reader.Add(1)
	go func() {
		defer n.reader.Done()
		if err := eg.ReadRefusals(n.connRefused); err != nil {
			n.log.Error("the refusals of the jails' connections are no longer told", "error", err)
		}
	}()
	return n, nil
}

// serveResolver opens the resolver's sockets on its address.
func (n *Network) serveResolver() error {
	at := n.egress.ResolverAddr().String()
	udp, err := net.ListenPacket("udp4", at)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", at, err)
	}
	tcp, err := net.Listen("tcp4", at)
	if err != nil {
		udp.Close()
		return fmt.Errorf("listen on %s: %w", at, err)
	}
	return n.resolver.Serve(udp, tcp)
}

// Modes are the networks a thread may ask for.
func (n *Network) Modes() []string { return slices.Clone(n.cfg.Allow) }

// Nameserver is the name server of a jail of mode: the daemon's resolver
// for egress, the jail's own sink for none (lookups fail at once rather
// than time out), the host's own for host.
func (n *Network) Nameserver(mode string) string {
	switch mode {
	case "egress":
		if n.egress != nil {
			return n.egress.ResolverAddr().Addr().String()
		}
	case "none", "":
		return "127.0.0.1"
	}
	return ""
}

// jailNet is one running jail's network.
type jailNet struct {
	key   meta.ThreadKey
	jail  *jail.Jail // the jail it is of: a thread's next jail gets its own
	id    string
	rules atomic.Pointer[policy.Rules]
	link  *egress.Link   // egress
	sink  net.PacketConn // none
	// tried is the last name a jail without network tried to resolve,
	// and when (unix nanoseconds).
	tried   atomic.Pointer[string]
	triedAt atomic.Int64
	// reported is when a refusal was last told as an event: at most one a
	// second per jail.
	reported atomic.Int64
}

func (j *jailNet) ID() string           { return j.id }
func (j *jailNet) Rules() *policy.Rules { return j.rules.Load() }

// clients finds a jail by its address, for the resolver.
type clients struct{ n *Network }

func (c clients) Lookup(src netip.Addr) (resolver.Client, bool) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	j, ok := c.n.byAddr[src]
	return j, ok
}

// Attach gives jail j of thread k the network its settings ask for, once
// it started and before it runs anything: a link for egress, a name sink
// for none. JailEnded takes it away.
func (n *Network) Attach(ctx context.Context, k meta.ThreadKey, j *jail.Jail, s meta.Settings, mode string) error {
	jn := &jailNet{key: k, id: call.KeyName(k), jail: j}
	switch mode {
	case "egress":
		if n.egress == nil {
			return fmt.Errorf("%w: network egress is not allowed on this server", api.ErrInvalid)
		}
		rules, p, err := compile(s)
		if err != nil {
			return err
		}
		jn.rules.Store(rules)
		ns, err := j.NetNS()
		if err != nil {
			return err
		}
		defer ns.Close()
		if jn.link, err = n.egress.Attach(ctx, int(ns.Fd()), p); err != nil {
			return err
		}
		if !n.add(jn, jn.link.Addr(), nil) {
			jn.link.Close()
			return fmt.Errorf("%w: the gateway is stopping", api.ErrClosed)
		}
		return nil
	case "none", "":
		err := j.InNetNS(func() (err error) {
			jn.sink, err = net.ListenPacket("udp4", "127.0.0.1:53")
			return err
		})
		if err != nil {
			// Lookups then fail as they did: after the resolver's
			// timeout. The jail serves anyway.
			n.log.Warn("no name sink in a jail without network", "thread", jn.id, "error", err)
			return nil
		}
		// Registered with its goroutine under mu: Close, which waits for
		// the sinks, never waits while one is being added.
		if !n.add(jn, netip.Addr{}, &n.sinks) {
			jn.sink.Close()
			return fmt.Errorf("%w: the gateway is stopping", api.ErrClosed)
		}
		go func() {
			defer n.sinks.Done()
			resolver.ServeSink(jn.sink, func(name string) {
				jn.tried.Store(&name)
				jn.triedAt.Store(time.Now().UnixNano())
			})
		}()
		return nil
	}
	return nil
}

// add registers jn (by its address too, if valid) and, if wg is not nil,
// one goroutine of it in wg; false once the room is closed.
func (n *Network) add(jn *jailNet, addr netip.Addr, wg *sync.WaitGroup) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	if wg != nil {
		wg.Add(1)
	}
	n.byJail[jn.jail] = jn
	n.byKey[jn.key] = jn
	if addr.IsValid() {
		n.byAddr[addr] = jn
	}
	return true
}

// JailEnded takes away the network of k's jail j, which ended (package
// jails tells it).
func (n *Network) JailEnded(k meta.ThreadKey, j *jail.Jail) {
	n.mu.Lock()
	jn := n.byJail[j]
	n.mu.Unlock()
	if jn != nil {
		n.remove(jn)
	}
}

// remove takes jn's network away.
func (n *Network) remove(jn *jailNet) {
	n.mu.Lock()
	delete(n.byJail, jn.jail)
	if n.byKey[jn.key] == jn {
		delete(n.byKey, jn.key)
	}
	if jn.link != nil && n.byAddr[jn.link.Addr()] == jn {
		delete(n.byAddr, jn.link.Addr())
	}
	n.mu.Unlock()
	if jn.link != nil {
		if err := jn.link.Close(); err != nil {
			n.log.Warn("take a jail's link away", "thread", jn.id, "error", err)
		}
	}
	if jn.sink != nil {
		jn.sink.Close()
	}
}

// compile makes a jail's rules and its link's policy of its settings.
func compile(s meta.Settings) (*policy.Rules, egress.Policy, error) {
	var e policy.Egress
	if s.Egress != nil {
		e = policy.Egress(*s.Egress)
	}
	rules, err := policy.Parse(e)
	if err != nil {
		return nil, egress.Policy{}, fmt.Errorf("%w: settings: %v", api.ErrInvalid, err)
	}
	c := rules.CIDRs()
	return rules, egress.Policy{
		DefaultDeny: rules.DefaultDeny(), Allow: c.Allow4, Deny: c.Deny4,
		MaxConnections: s.MaxConnections, BytesPerSecond: s.EgressBytesPerSecond,
	}, nil
}

// Apply gives thread k's running jail j, in network egress, the rules of
// settings s, at once: the next connection and the next lookup follow
// them, an open connection they refuse is cut (at once, when the kernel
// destroys sockets). A jail of another mode, or
// none, has nothing to change.
func (n *Network) Apply(k meta.ThreadKey, j *jail.Jail, old, s meta.Settings) error {
	n.mu.Lock()
	jn := n.byKey[k]
	n.mu.Unlock()
	if jn == nil || jn.link == nil {
		return nil
	}
	if reflect.DeepEqual(old.Egress, s.Egress) && old.MaxConnections == s.MaxConnections && old.EgressBytesPerSecond == s.EgressBytesPerSecond {
		return nil
	}
	rules, p, err := compile(s)
	if err != nil {
		return err
	}
	jn.rules.Store(rules)
	if err := jn.link.SetPolicy(p, func(name string) bool { ok, _ := rules.NameAllowed(name); return ok }); err != nil {
		return err
	}
	ns, err := j.NetNS()
	if err != nil {
		return err
	}
	defer ns.Close()
	// The open connections the rules now refuse end at once, not at their
	// next packet: a process blocked in a read learns it. The rules cut
	// them anyway, so a failure here is only logged.
	if cut, err := jn.link.Cut(int(ns.Fd())); err != nil {
		n.log.Warn("cut a jail's refused connections", "thread", jn.id, "error", err)
	} else if cut > 0 {
		n.log.Info("refused connections cut", "tenant", k.Tenant, "thread", k.Thread, "connections", cut)
	}
	if old.EgressBytesPerSecond != s.EgressBytesPerSecond {
		return jn.link.SetRate(int(ns.Fd()), s.EgressBytesPerSecond)
	}
	return nil
}

// answered lets the jail reach what the resolver answered it.
func (n *Network) answered(c resolver.Client, name string, addrs []netip.Addr, ttl time.Duration) {
	jn := c.(*jailNet)
	if err := jn.link.AllowResolved(name, addrs, ttl); err != nil {
		n.log.Warn("allow a jail the addresses of a name", "thread", jn.id, "name", name, "error", err)
	}
}

// nameRefused tells a name the policy refused.
func (n *Network) nameRefused(c resolver.Client, name, rule string) {
	jn := c.(*jailNet)
	why := "the thread's default is deny"
	if rule != "" {
		why = "rule " + rule
	}
	n.refused(jn, name, why)
}

// connRefused tells a connection the kernel refused.
func (n *Network) connRefused(r egress.Refusal) {
	n.mu.Lock()
	jn := n.byAddr[r.Jail]
	n.mu.Unlock()
	if jn == nil { // the jail ended meanwhile
		return
	}
	dest := r.Proto + " " + r.Remote.String()
	if r.Remote.Port() == 0 {
		dest = r.Proto + " " + r.Remote.Addr().String()
	}
	n.refused(jn, dest, ruleText(r, jn.Rules()))
}

// ruleText says, for a person, which rule refused r.
func ruleText(r egress.Refusal, rules *policy.Rules) string {
	switch r.Rule {
	case egress.RuleNever:
		return "never reachable: loopback, link-local and metadata, multicast or another jail"
	case egress.RulePrivate:
		return "a private range the server does not allow (serve --egress-allow-private)"
	case egress.RuleDeny:
		if _, rule := rules.AddrAllowed(r.Remote.Addr()); rule != "" {
			return "rule " + rule
		}
		return "a deny rule"
	case egress.RuleDefault:
		return "the thread's default is deny"
	case egress.RuleConnections:
		return "the thread's bound of open connections (maxConnections)"
	case egress.RuleHost:
		return "the host itself: only the resolver's port answers there"
	}
	return string(r.Rule)
}

// refused counts a refusal and tells it, at most once a second per jail.
func (n *Network) refused(jn *jailNet, dest, why string) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Refused(RefusedNetwork)
	}
	now := time.Now().UnixNano()
	last := jn.reported.Load()
	if now-last < int64(time.Second) || !jn.reported.CompareAndSwap(last, now) {
		return
	}
	n.log.Info("network refused", "tenant", jn.key.Tenant, "thread", jn.key.Thread, "destination", dest, "rule", why)
	if n.cfg.Events != nil {
		n.cfg.Events.Emit(api.Event{Type: api.EventNetworkRefused, Tenant: jn.key.Tenant, Thread: jn.key.Thread,
			Message: fmt.Sprintf("refused %s (%s)", dest, why)})
	}
}

// TriedToResolve says the name a jail without network asked for last, if
// it did since since.
func (n *Network) TriedToResolve(k meta.ThreadKey, since time.Time) (string, bool) {
	n.mu.Lock()
	jn := n.byKey[k]
	n.mu.Unlock()
	if jn == nil || jn.sink == nil || jn.triedAt.Load() < since.UnixNano() {
		return "", false
	}
	if p := jn.tried.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// Close takes every jail's network away (the jails are closed first), and
// the egress network with them.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	var left []*jailNet
	for _, jn := range n.byJail {
		left = append(left, jn)
	}
	n.mu.Unlock()
	for _, jn := range left {
		n.remove(jn)
	}
	n.sinks.Wait()
	var errs []error
	if n.resolver != nil {
		errs = append(errs, n.resolver.Close())
	}
	if n.egress != nil {
		errs = append(errs, n.egress.Close())
	}
	n.reader.Wait()
	return errors.Join(errs...)
}
