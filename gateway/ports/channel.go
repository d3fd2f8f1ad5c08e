package ports

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/jail"
)

// refused is a connection refused in the jail: nothing listens there.
const refused = syscall.ECONNREFUSED

// A channel is a loopback listener of the daemon's, for one port of one
// jail: an HTTP server that checks each request's token and forwards it,
// WebSocket upgrades included, to the port inside the jail (dialed in the
// jail's network namespace, jail.Dial), through a reverse proxy.
type channel struct {
	// Set by newChannel, never changed.
	key   chanKey
	jail  *jail.Jail
	url   string
	token string
	ln    net.Listener
	srv   *http.Server
	tr    *http.Transport
	log   hclog.Logger

	// reqs counts the requests being answered, for close to wait for
	// them; Add runs only under mu while closed is not set.
	reqs sync.WaitGroup

	mu sync.Mutex
	// closed is set by close: requests and connections to the jail are
	// refused from then on.
	closed bool
	// conns are the connections to the jail's port: those of the
	// proxy's transport, idle or in use, and those an upgraded request
	// (a WebSocket) hijacked; closing them ends the requests that use
	// them.
	conns map[net.Conn]struct{}
	// refused counts the requests refused for their token since
	// refusalLogged, when the last was logged (noteRefusal).
	refused       int
	refusalLogged time.Time
}

// tokenBytes is the length of a channel's token, before encoding.
const tokenBytes = 32

// maxConnsPerChannel bounds the connections a channel's listener holds
// at once (with a token or not); past it, new ones wait in the listen
// backlog for one to end.
const maxConnsPerChannel = 256

// newChannel makes a channel to ck's port in j, listening but not yet
// serving (serve), or undone.
func newChannel(p *Ports, ck chanKey, j *jail.Jail) (*channel, error) {
	var raw [tokenBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("make a token: %w", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ch := &channel{
		key: ck, jail: j, token: base64.RawURLEncoding.EncodeToString(raw[:]),
		url: "http://" + ln.Addr().String(), ln: newLimitListener(ln, maxConnsPerChannel),
		log: p.log, conns: make(map[net.Conn]struct{}),
	}
	dial := p.dialer(ck.k, j, ck.port)
	ch.tr = &http.Transport{
		// The jail's port, whatever the request's URL says; never a
		// proxy of the environment's.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			return ch.track(c)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	target := "127.0.0.1:" + strconv.Itoa(ck.port)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = target
			// The Host the client asked for, as a server behind a
			// proxy expects (its own links and redirects).
			r.Out.Host = r.In.Host
		},
		Transport:  ch.tr,
		BufferPool: &p.buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			msg := fmt.Sprintf("port %d of the jail: %v", ck.port, err)
			if errors.Is(err, refused) {
				msg = fmt.Sprintf("nothing listens on port %d in the jail", ck.port)
			}
			http.Error(w, msg, http.StatusBadGateway)
		},
		ErrorLog: p.log.Named("ports").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	ch.srv = &http.Server{
		Handler:           ch.authorized(proxy),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          p.log.Named("ports").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return ch, nil
}

// info is the channel as the API gives it.
func (ch *channel) info() api.PortChannel {
	if ch == nil {
		return api.PortChannel{}
	}
	return api.PortChannel{
		URL: ch.url, Token: ch.token, Port: ch.key.port,
		Headers: map[string]string{"Authorization": "Bearer " + ch.token},
	}
}

// serve serves the channel until close.
func (ch *channel) serve() {
	if err := ch.srv.Serve(ch.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		ch.log.Error("port channel stopped serving", "port", ch.key.port, "error", err)
	}
}

// authorized answers 401 to a request without the channel's token, which
// then never reaches the jail, and forwards the others without it.
func (ch *channel) authorized(next http.Handler) http.Handler {
	want := []byte("Bearer " + ch.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Values("Authorization")
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			ch.noteRefusal(r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="warren"`)
			http.Error(w, "this channel needs its token: Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		// The token is the daemon's, not the jail's server's.
		r.Header.Del("Authorization")
		if !ch.enter() {
			http.Error(w, "this channel is closed", http.StatusServiceUnavailable)
			return
		}
		defer ch.reqs.Done()
		next.ServeHTTP(w, r)
	})
}

// refusalLogEvery bounds how often a channel logs the requests it
// refused: anyone on the host can send them.
const refusalLogEvery = 10 * time.Second

// noteRefusal logs a request refused for its token: the first, then at
// most one line per refusalLogEvery with the count since.
func (ch *channel) noteRefusal(r *http.Request) {
	ch.mu.Lock()
	ch.refused++
	n := ch.refused
	if time.Since(ch.refusalLogged) < refusalLogEvery {
		ch.mu.Unlock()
		return
	}
	ch.refusalLogged, ch.refused = time.Now(), 0
	ch.mu.Unlock()
	ch.log.Warn("refused: a port channel's request without its token", "tenant", ch.key.k.Tenant, "thread", ch.key.k.Thread,
		"port", ch.key.port, "from", r.RemoteAddr, "refused", n)
}

// enter counts a request, unless the channel is closed.
func (ch *channel) enter() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return false
	}
	ch.reqs.Add(1)
	return true
}

// track keeps c, a connection to the jail, until it is closed, or closes
// it and refuses it once the channel is closed.
func (ch *channel) track(c net.Conn) (net.Conn, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		c.Close()
		return nil, errors.New("the channel is closed")
	}
	ch.conns[c] = struct{}{}
	return &trackedConn{Conn: c, ch: ch}, nil
}

// trackedConn forgets itself in its channel when closed.
type trackedConn struct {
	net.Conn
	ch   *channel
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.ch.mu.Lock()
		delete(c.ch.conns, c.Conn)
		c.ch.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite lets an upgraded connection's end reach the jail's server.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// close stops the channel: its listener closes (its URL is refused from
// then on), every connection of it to the jail is closed, which ends the
// requests and WebSockets using them, and it waits for them to end.
func (ch *channel) close() {
	ch.mu.Lock()
	ch.closed = true
	conns := ch.conns
	ch.conns = nil
	ch.mu.Unlock()
	// Close, not Shutdown: a request to a closed channel is not
	// finished. The listener too, in case Serve has not taken it yet.
	ch.srv.Close()
	ch.ln.Close()
	for c := range conns {
		c.Close()
	}
	ch.tr.CloseIdleConnections()
	ch.reqs.Wait()
}

// discard lets go of a channel that never served.
func (ch *channel) discard() {
	ch.ln.Close()
}

// limitListener holds at most max accepted connections open at once:
// Accept waits for one to close first, leaving the next in the listen
// backlog, where it costs the daemon no descriptor.
type limitListener struct {
	net.Listener
	sem chan struct{}
	// done is closed by Close, to end an Accept waiting for room.
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// limitConn gives its place back once closed.
type limitConn struct {
	net.Conn
	release   func()
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}

// bufferPool lends the reverse proxies their copy buffers: without one,
// each answer's copy allocates 32 KiB.
type bufferPool struct{ pool sync.Pool }

// copyBufferBytes is the size of a proxy's copy buffer.
const copyBufferBytes = 32 << 10

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, copyBufferBytes)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferBytes {
		buf = buf[:copyBufferBytes]
		b.pool.Put(&buf)
	}
}
