package admit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"warren/api"
	"warren/meta"
)

// UnknownUID counts the connections whose peer could not be read: they
// share one bucket (and the router refuses them anyway).
const UnknownUID = math.MaxUint32

// maxRefusing bounds the connections being refused at once; past it a
// connection is closed without an answer, so that a flood of them costs
// no more than that many goroutines.
const maxRefusing = 64

// refuseWait bounds how long a refused connection is read for its
// request before the answer, so that the client reads the 503 rather
// than a reset.
const refuseWait = 200 * time.Millisecond

// Listener counts every connection that ln accepts under Conns, by the uid
// that uidOf reads from it (false: UnknownUID), until it is closed. A
// connection past a bound is answered 503 with Retry-After and closed,
// never handed on; onRefuse, if set, is told of each. The connections it
// hands on have a NetConn method that returns the accepted one.
func (a *Admitter) Listener(ln net.Listener, uidOf func(net.Conn) (uint32, bool), onRefuse func(uid uint32, err error)) net.Listener {
	return &listener{Listener: ln, a: a, uidOf: uidOf, onRefuse: onRefuse, refusing: make(chan struct{}, maxRefusing)}
}

type listener struct {
	net.Listener
	a        *Admitter
	uidOf    func(net.Conn) (uint32, bool)
	onRefuse func(uid uint32, err error)
	// refusing holds a place per connection being answered 503.
	refusing chan struct{}
	wg       sync.WaitGroup
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, ok := l.uidOf(c)
		if !ok {
			uid = UnknownUID
		}
		t, err := l.a.Enter(Conns, uid, meta.ThreadKey{})
		if err == nil {
			return &conn{Conn: c, t: t}, nil
		}
		if l.onRefuse != nil {
			l.onRefuse(uid, err)
		}
		select {
		case l.refusing <- struct{}{}:
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				defer func() { <-l.refusing }()
				refuse(c, err)
			}()
		default:
			c.Close()
		}
	}
}

// Close closes the listener and waits for the refusals under way.
func (l *listener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// refuse answers c's first request 503 and closes c. It reads what the
// client sent first (up to the end of its headers, for refuseWait at
// most): closing a Unix socket with unread data would reset the client's
// connection before it read the answer.
func refuse(c net.Conn, why error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseWait))
	buf := make([]byte, 0, 4<<10)
	for len(buf) < cap(buf) && !bytes.Contains(buf, []byte("\r\n\r\n")) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	_, _ = c.Write(Refusal(why))
}

// Refusal is the whole HTTP answer to a connection refused for why: 503,
// the API's error body with the code "unavailable", Retry-After, and
// Connection: close.
func Refusal(why error) []byte {
	body, _ := json.Marshal(api.ErrorBody{Error: &api.APIError{Code: api.CodeUnavailable, Message: why.Error()}})
	body = append(body, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		RetryAfterSeconds(), len(body))
	b.Write(body)
	return b.Bytes()
}

// RetryAfterSeconds is RetryAfter as a Retry-After header's value.
func RetryAfterSeconds() int { return int(RetryAfter / time.Second) }

// RetryAfterHeader is RetryAfterSeconds as text.
func RetryAfterHeader() string { return strconv.Itoa(RetryAfterSeconds()) }

// conn is an accepted connection holding its place until Close.
type conn struct {
	net.Conn
	t *Ticket
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.t.Release()
	return err
}

// NetConn returns the accepted connection (for its peer credentials).
func (c *conn) NetConn() net.Conn { return c.Conn }
