package ports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
)

// DefaultMaxPerThread bounds the channels open at once into one thread's
// jail, unless Config.MaxPerThread says otherwise.
const DefaultMaxPerThread = 64

// Ports is the room of the channels into the jails' ports. New makes it;
// Close closes every channel and waits for their goroutines.
type Ports struct {
	// Set by New, never changed.
	jails Jails
	log   hclog.Logger
	max   int

	mu sync.Mutex
	// closed is set by Close: no channel or connection is added after
	// it.
	closed bool
	// channels are the open channels, by thread and port.
	channels map[chanKey]*channel
	// perThread counts each thread's channels, for the bound.
	perThread map[meta.ThreadKey]int
	// splices are the plain TCP connections through the API socket
	// (tcp.go), for JailEnded, Remove and Close to cut.
	splices map[*splice]struct{}

	// buffers are the channels' proxies' copy buffers (safe for
	// concurrent use on its own).
	buffers bufferPool

	// wg counts the channels' serving goroutines and the channels being
	// closed (closeChannel), for Close.
	wg sync.WaitGroup
}

// chanKey names a channel: one per thread and port.
type chanKey struct {
	k    meta.ThreadKey
	port int
}

// Jails is what the room calls of the jails (package jails): a thread's
// jail, bound and started as for a command, and a use of it.
type Jails interface {
	// Acquire returns the jail of a thread, binding the thread and
	// starting its jail if need be, held until release.
	Acquire(ctx context.Context, tenant, thread string) (j *jail.Jail, k meta.ThreadKey, release func(), err error)
	// Touch counts a use of k's jail (its idle time starts again).
	Touch(k meta.ThreadKey)
}

// Config is what the room needs.
type Config struct {
	Jails  Jails
	Logger hclog.Logger
	// MaxPerThread bounds each thread's channels; 0 means
	// DefaultMaxPerThread.
	MaxPerThread int
}

// New returns the room, with no channel.
func New(cfg Config) *Ports {
	max := cfg.MaxPerThread
	if max == 0 {
		max = DefaultMaxPerThread
	}
	return &Ports{
		jails: cfg.Jails, log: cfg.Logger, max: max,
		channels: make(map[chanKey]*channel), perThread: make(map[meta.ThreadKey]int), splices: make(map[*splice]struct{}),
	}
}

// CheckPort refuses a port outside 1..65535.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: port %d is not from 1 to 65535", api.ErrInvalid, port)
	}
	return nil
}

// Open returns the channel to port in the jail of (tenant, thread),
// binding the thread and starting its jail if need be: the same channel
// for the same port while the jail lives. It refuses one past the bound
// of channels per thread.
func (p *Ports) Open(ctx context.Context, tenant, thread string, port int) (api.PortChannel, error) {
	if err := CheckPort(port); err != nil {
		return api.PortChannel{}, err
	}
	j, k, release, err := p.jails.Acquire(ctx, tenant, thread)
	if err != nil {
		return api.PortChannel{}, err
	}
	defer release()
	ck := chanKey{k, port}

	p.mu.Lock()
	ch, err := p.findLocked(ck, j)
	p.mu.Unlock()
	if ch != nil || err != nil {
		return ch.info(), err
	}
	// Made with no lock held; another Open of the same port may have
	// made one meanwhile, which wins.
	ch, err = newChannel(p, ck, j)
	if err != nil {
		return api.PortChannel{}, fmt.Errorf("open a channel to port %d of %s: %w", port, call.KeyName(k), err)
	}
	p.mu.Lock()
	found, err := p.findLocked(ck, j)
	if found == nil && err == nil && j.Err() != nil {
		// The jail ended since Acquire: its JailEnded may have come
		// before this channel was there to close.
		err = fmt.Errorf("%w: the jail of %s ended; open the channel again", api.ErrConflict, call.KeyName(k))
	}
	if found != nil || err != nil {
		p.mu.Unlock()
		ch.discard()
		return found.info(), err
	}
	p.channels[ck] = ch
	p.perThread[k]++
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		ch.serve()
	}()
	p.log.Info("port channel opened", "tenant", k.Tenant, "thread", k.Thread, "port", port, "url", ch.url)
	return ch.info(), nil
}

// findLocked returns the open channel ck into jail j, or nil and whether
// a new one may be added. A channel into another jail of the thread (one
// that ended, whose JailEnded has not come yet) is closed. p.mu is held.
func (p *Ports) findLocked(ck chanKey, j *jail.Jail) (*channel, error) {
	if p.closed {
		return nil, fmt.Errorf("open a channel to port %d of %s: %w", ck.port, call.KeyName(ck.k), api.ErrClosed)
	}
	if ch := p.channels[ck]; ch != nil {
		if ch.jail == j {
			return ch, nil
		}
		p.removeLocked(ch)
	}
	if p.perThread[ck.k] >= p.max {
		return nil, call.Refuse(api.ErrConflict, fmt.Sprintf(
			"Thread %s has %d port channels open, the most it may; close one (DELETE .../ports/{port}) before opening another.",
			call.KeyName(ck.k), p.max))
	}
	return nil, nil
}

// removeLocked forgets ch and closes it on a goroutine of the room's
// (Close waits for it): closing waits for its requests, which must not
// hold p.mu. p.mu is held.
func (p *Ports) removeLocked(ch *channel) {
	if p.channels[ch.key] != ch {
		return
	}
	delete(p.channels, ch.key)
	if p.perThread[ch.key.k]--; p.perThread[ch.key.k] == 0 {
		delete(p.perThread, ch.key.k)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ch.close()
	}()
}

// Remove closes the channel to port of k, if one is open, and cuts the
// plain TCP connections to that port. It starts no jail and binds
// nothing. It returns once the channel's listener is closed (its URL is
// refused from then on).
func (p *Ports) Remove(k meta.ThreadKey, port int) (api.PortClosed, error) {
	if err := CheckPort(port); err != nil {
		return api.PortClosed{}, err
	}
	p.mu.Lock()
	ch := p.channels[chanKey{k, port}]
	var closing *channel
	if ch != nil {
		delete(p.channels, ch.key)
		if p.perThread[k]--; p.perThread[k] == 0 {
			delete(p.perThread, k)
		}
		closing = ch
	}
	cut := p.splicesLocked(func(s *splice) bool { return s.key == chanKey{k, port} })
	p.mu.Unlock()
	for _, s := range cut {
		s.cut()
	}
	if closing != nil {
		closing.close()
		p.log.Info("port channel closed", "tenant", k.Tenant, "thread", k.Thread, "port", port)
	}
	return api.PortClosed{Port: port, Closed: closing != nil}, nil
}

// JailEnded closes the channels into j and cuts the plain TCP
// connections to it: k's jail ended (package jails, Ended). It returns
// once their listeners are closed.
func (p *Ports) JailEnded(k meta.ThreadKey, j *jail.Jail) {
	if n := p.closeWhere(k, j); n > 0 {
		p.log.Info("port channels closed: the jail ended", "tenant", k.Tenant, "thread", k.Thread, "channels", n)
	}
}

// CloseThread closes k's channels and cuts its plain TCP connections: k
// was closed (package threads), even if its jail stays for the jobs that
// run in it. It returns once their listeners are closed.
func (p *Ports) CloseThread(k meta.ThreadKey) {
	if n := p.closeWhere(k, nil); n > 0 {
		p.log.Info("port channels closed: the thread was closed", "tenant", k.Tenant, "thread", k.Thread, "channels", n)
	}
}

// closeWhere closes k's channels and splices (only those into j, unless
// j is nil) and says how many channels it closed.
func (p *Ports) closeWhere(k meta.ThreadKey, j *jail.Jail) int {
	p.mu.Lock()
	var closing []*channel
	for ck, ch := range p.channels {
		if ck.k == k && (j == nil || ch.jail == j) {
			delete(p.channels, ck)
			closing = append(closing, ch)
		}
	}
	if len(closing) > 0 {
		if p.perThread[k] -= len(closing); p.perThread[k] <= 0 {
			delete(p.perThread, k)
		}
	}
	cut := p.splicesLocked(func(s *splice) bool { return s.key.k == k && (j == nil || s.jail == j) })
	p.mu.Unlock()
	for _, s := range cut {
		s.cut()
	}
	for _, ch := range closing {
		ch.close()
	}
	return len(closing)
}

// Count returns how many channels are open.
func (p *Ports) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.channels)
}

// Close closes every channel and cuts every plain TCP connection, refuses
// new ones, and waits for the room's goroutines.
func (p *Ports) Close() {
	p.mu.Lock()
	p.closed = true
	all := p.channels
	p.channels = make(map[chanKey]*channel)
	p.perThread = make(map[meta.ThreadKey]int)
	cut := p.splicesLocked(func(*splice) bool { return true })
	p.mu.Unlock()
	for _, s := range cut {
		s.cut()
	}
	for _, ch := range all {
		ch.close()
	}
	p.wg.Wait()
}

// dialer returns the dial of the room's channels and splices into j's
// port: the jail's loopback, IPv4 first, then IPv6 (a server told to
// listen on "localhost" may have taken either); each connection counts as
// a use of the jail.
func (p *Ports) dialer(k meta.ThreadKey, j *jail.Jail, port int) func(ctx context.Context) (net.Conn, error) {
	v4 := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	v6 := net.JoinHostPort("::1", fmt.Sprint(port))
	return func(ctx context.Context) (net.Conn, error) {
		p.jails.Touch(k)
		c, err := j.Dial(ctx, "tcp4", v4)
		if err == nil || !errors.Is(err, refused) {
			return c, err
		}
		if c6, err6 := j.Dial(ctx, "tcp6", v6); err6 == nil {
			return c6, nil
		}
		return nil, err
	}
}
