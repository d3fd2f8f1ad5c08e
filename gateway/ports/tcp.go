package ports

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
)

// Plain TCP to a jail's port goes through the API socket itself: a POST
// to the port's route with "Connection: Upgrade" and "Upgrade: tcp" is
// answered 101, and the socket connection then carries the bytes both
// ways (a splice). It is peer-checked as every call, and needs no token:
// the socket's mode and the peer check are its gate.

// IsUpgrade says whether r asks for a plain TCP connection
// (api.PortUpgrade) rather than a channel.
func IsUpgrade(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), api.PortUpgrade)
}

// headerHas says whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// splice is one plain TCP connection through the API socket.
type splice struct {
	key  chanKey
	jail *jail.Jail
	back net.Conn // to the jail's port

	mu     sync.Mutex
	front  net.Conn // the API connection, once hijacked; guarded by mu
	isCut  bool     // guarded by mu
	cutErr error
}

// cut closes both ends, now or as soon as the front is hijacked.
func (s *splice) cut() {
	s.mu.Lock()
	s.isCut = true
	front := s.front
	s.mu.Unlock()
	s.back.Close()
	if front != nil {
		front.Close()
	}
}

// Upgrade connects to port in the jail of (tenant, thread), binding the
// thread and starting its jail if need be, and returns the stream that
// answers 101 and splices the API connection with it. Nothing listening
// there is a conflict (409), answered before the upgrade.
func (p *Ports) Upgrade(ctx context.Context, tenant, thread string, port int) (call.Streamer, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	j, k, release, err := p.jails.Acquire(ctx, tenant, thread)
	if err != nil {
		return nil, err
	}
	defer release()
	back, err := p.dialer(k, j, port)(ctx)
	if err != nil {
		if errors.Is(err, refused) {
			return nil, call.Refuse(api.ErrConflict, fmt.Sprintf("Nothing listens on port %d in the jail of thread %s; start the server, then connect again.", port, call.KeyName(k)))
		}
		return nil, fmt.Errorf("connect to port %d of %s: %w", port, call.KeyName(k), err)
	}
	s := &splice{key: chanKey{k, port}, jail: j, back: back}
	p.mu.Lock()
	switch {
	case p.closed:
		err = fmt.Errorf("connect to port %d of %s: %w", port, call.KeyName(k), api.ErrClosed)
	case j.Err() != nil:
		err = fmt.Errorf("%w: the jail of %s ended", api.ErrConflict, call.KeyName(k))
	default:
		p.splices[s] = struct{}{}
	}
	p.mu.Unlock()
	if err != nil {
		back.Close()
		return nil, err
	}
	return &tcpStream{p: p, s: s}, nil
}

// splicesLocked takes the splices that match out of the set, for the
// caller to cut. p.mu is held.
func (p *Ports) splicesLocked(match func(*splice) bool) []*splice {
	var out []*splice
	for s := range p.splices {
		if match(s) {
			delete(p.splices, s)
			out = append(out, s)
		}
	}
	return out
}

// tcpStream answers an upgrade: 101, then the splice, until both
// directions ended or the splice is cut.
type tcpStream struct {
	p *Ports
	s *splice
}

func (t *tcpStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	s := t.s
	defer func() {
		t.p.mu.Lock()
		delete(t.p.splices, s)
		t.p.mu.Unlock()
		s.cut()
	}()
	rc := http.NewResponseController(w)
	front, brw, err := rc.Hijack()
	if err != nil {
		http.Error(w, "the connection cannot be upgraded", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.front = front
	isCut := s.isCut
	s.mu.Unlock()
	if isCut {
		front.Close()
		return
	}
	// The server's deadlines were for the request; the bytes now flow
	// as long as both ends like.
	front.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.PortUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	copyBoth(front, brw.Reader, s.back)
}

// copyBoth copies front (whose first bytes may be buffered in fr) to back
// and back to front, passing each direction's end on as a half close,
// until both directions ended.
func copyBoth(front net.Conn, fr *bufio.Reader, back net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(back, fr)
		closeWrite(back)
	})
	io.Copy(front, back)
	closeWrite(front)
	wg.Wait()
}

// closeWrite half-closes c if it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	c.Close()
}
