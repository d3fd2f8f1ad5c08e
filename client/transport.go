package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The client speaks HTTP/1.1 to the daemon's Unix socket with a transport
// of its own rather than net/http's. net/http links crypto/tls, x509 and
// HTTP/2 whatever the program does with it, about 90 packages whose init
// runs at every start: measured on a 2-core VM, 2 to 3 ms of each CLI
// call (a Go program that only imports net/http starts 1.7 ms later than
// one that imports net), for a socket that needs none of it. What the daemon's answers need is small and fixed: a status
// line, headers, and a body framed by Content-Length, chunked, or the end
// of the connection; requests carry a JSON body of known length, or a raw
// file's content, chunked when its length is unknown.

const (
	methodGet    = "GET"
	methodPost   = "POST"
	methodPut    = "PUT"
	methodDelete = "DELETE"

	statusOK                 = 200
	statusServiceUnavailable = 503

	// maxIdleConns and idleTimeout bound the connections kept for reuse.
	// The daemon drops an idle connection after two minutes; the client
	// lets go of one well before, so a reused connection is not one the
	// daemon is closing.
	maxIdleConns = 4
	idleTimeout  = 30 * time.Second

	// maxHeaderBytes bounds an answer's status line and headers.
	maxHeaderBytes = 1 << 20
	// maxChunkLine bounds one chunk-size line of a chunked answer.
	maxChunkLine = 4 << 10
)

// transport dials the socket and keeps a few idle connections. It is safe
// for concurrent use; each request has a connection to itself until its
// answer's body is read to its end or closed.
type transport struct {
	socket string

	mu   sync.Mutex
	idle []*conn // newest last; guarded by mu
}

// conn is one connection to the daemon.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	sent      int64 // bytes of the current request written
}

// response is one answer: its status, headers and body. The body must be
// closed (reading it to its end gives its connection back for reuse).
type response struct {
	StatusCode int
	Status     string // "404 Not Found"
	Header     textproto.MIMEHeader
	// ContentLength is the body's length, -1 if the answer did not say.
	ContentLength int64
	Body          io.ReadCloser
}

// closeIdle closes every idle connection.
func (t *transport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// get returns an idle connection that is still open (reused), or dials
// one.
func (t *transport) get(ctx context.Context) (c *conn, reused bool, err error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if time.Since(c.idleSince) < idleTimeout && c.alive() {
			return c, true, nil
		}
		c.nc.Close()
	}
	c, err = t.dial(ctx)
	return c, false, err
}

// dial opens a new connection.
func (t *transport) dial(ctx context.Context) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", t.socket)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 32<<10)}
	c.bw = bufio.NewWriterSize(sentCounter{c}, 4<<10)
	return c, nil
}

// sentCounter writes to a connection and counts what it took.
type sentCounter struct{ c *conn }

func (w sentCounter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	w.c.sent += int64(n)
	return n, err
}

// put keeps c for reuse, or closes it if enough are kept.
func (t *transport) put(c *conn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle) < maxIdleConns {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// alive tells whether an idle connection is still open: the daemon has
// sent nothing on it (an end of file, or bytes no request asked for, mean
// it is done with it). A peek without waiting, at the socket itself: a
// read with a deadline already past would not even be tried.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN
		return true // never wait
	})
	return err == nil && open
}

// roundTrip sends one request (target is the escaped path and query) and
// returns its answer, whatever its status. body, if not nil, is sent with
// the content type ctype.
func (t *transport) roundTrip(ctx context.Context, method, target, ctype string, body io.Reader) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, reused, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := t.send(ctx, c, method, target, ctype, body)
	if err != nil && reused && ctx.Err() == nil && replayable(method, body, err) {
		// A kept connection the daemon closed just before this request
		// (it restarted, or dropped it as idle): once more, on a new one.
		if c, err = t.dial(ctx); err != nil {
			return nil, err
		}
		return t.send(ctx, c, method, target, ctype, body)
	}
	return resp, err
}

// replayable tells whether a request that failed on a kept connection
// may be sent again on a new one: the daemon cannot have acted on it
// (the connection was closed before the request went out), or acting
// twice does no harm (GET), and its body can be read again.
func replayable(method string, body io.Reader, err error) bool {
	var notSent *notSentError
	if !errors.As(err, &notSent) && method != methodGet {
		return false
	}
	switch b := body.(type) {
	case nil:
		return true
	case *bytes.Reader:
		_, serr := b.Seek(0, io.SeekStart)
		return serr == nil
	case *strings.Reader:
		_, serr := b.Seek(0, io.SeekStart)
		return serr == nil
	}
	return false
}

// notSentError is a request the daemon did not take: the connection was
// closed under its first write.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "send the request: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// send sends one request on c and reads its answer's head.
func (t *transport) send(ctx context.Context, c *conn, method, target, ctype string, body io.Reader) (*response, error) {
	// The context's end closes the connection, which ends whatever read
	// or write is under way; the answer is then an error of ctx.
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	fail := func(err error) (*response, error) {
		stop()
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}

	c.sent = 0
	length := knownLength(body)
	c.bw.WriteString(method + " " + target + " HTTP/1.1\r\nHost: warren\r\nUser-Agent: warren-client\r\n")
	if body != nil {
		c.bw.WriteString("Content-Type: " + ctype + "\r\n")
		if length >= 0 {
			c.bw.WriteString("Content-Length: " + strconv.FormatInt(length, 10) + "\r\n")
		} else {
			c.bw.WriteString("Transfer-Encoding: chunked\r\n")
		}
	}
	c.bw.WriteString("\r\n")
	// The body is written before the answer is read. The daemon reads a
	// body to its end, unless it refuses it early (a quota): then it
	// answers and closes, a write fails, and the answer, which is what
	// the caller needs to hear, is read all the same. The connection is
	// not used again.
	var werr error
	switch {
	case body == nil:
		werr = c.bw.Flush()
	case length >= 0:
		if _, werr = io.Copy(c.bw, body); werr == nil {
			werr = c.bw.Flush()
		}
	default:
		werr = writeChunked(c.bw, body)
	}
	var bodyErr *bodyReadError
	if errors.As(werr, &bodyErr) {
		return fail(werr) // the caller's reader failed: nothing to hear
	}
	resp, err := readHead(c.br)
	if err != nil {
		switch {
		case werr != nil && c.sent == 0:
			err = &notSentError{werr}
		case werr != nil:
			err = fmt.Errorf("send the request: %w", werr)
		}
		return fail(err)
	}
	b := &bodyReader{t: t, c: c, stop: stop, ctx: ctx,
		reuse: werr == nil && !strings.EqualFold(resp.Header.Get("Connection"), "close")}
	switch {
	case method == "HEAD" || resp.StatusCode == 204 || resp.StatusCode == 304 || resp.ContentLength == 0:
		b.r = eofReader{}
	case chunkedCoding(resp.Header):
		b.r = &chunkedReader{br: c.br}
	case resp.ContentLength > 0:
		b.r = &lengthReader{r: c.br, n: resp.ContentLength}
	default:
		// Framed by the end of the connection, which is then spent.
		b.r, b.reuse = c.br, false
	}
	resp.Body = b
	return resp, nil
}

// knownLength is the length of a body whose type tells it, -1 otherwise.
func knownLength(body io.Reader) int64 {
	switch b := body.(type) {
	case nil:
		return 0
	case *bytes.Reader:
		return int64(b.Len())
	case *strings.Reader:
		return int64(b.Len())
	case *bytes.Buffer:
		return int64(b.Len())
	}
	return -1
}

// writeChunked writes body in the chunked coding and flushes.
func writeChunked(bw *bufio.Writer, body io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			bw.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
			bw.Write(buf[:n])
			if _, err := bw.WriteString("\r\n"); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return &bodyReadError{rerr}
		}
	}
	bw.WriteString("0\r\n\r\n")
	return bw.Flush()
}

// bodyReadError is a failed read of the caller's request body.
type bodyReadError struct{ err error }

func (e *bodyReadError) Error() string { return "read the request's body: " + e.err.Error() }
func (e *bodyReadError) Unwrap() error { return e.err }

// readHead reads an answer's status line and headers.
func readHead(br *bufio.Reader) (*response, error) {
	var line string
	for {
		var err error
		if line, err = readLine(br, maxHeaderBytes); err != nil {
			return nil, fmt.Errorf("read the answer: %w", err)
		}
		// 1xx answers (the daemon sends none unless asked) precede the
		// real one: skip them with their headers.
		if !strings.HasPrefix(line, "HTTP/1.1 1") {
			break
		}
		if _, err := readHeader(br); err != nil {
			return nil, fmt.Errorf("read the answer's headers: %w", err)
		}
	}
	proto, status, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 {
		return nil, fmt.Errorf("read the answer: not an HTTP/1.1 status line: %q", line)
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 {
		return nil, fmt.Errorf("read the answer: bad status %q", status)
	}
	h, err := readHeader(br)
	if err != nil {
		return nil, fmt.Errorf("read the answer's headers: %w", err)
	}
	resp := &response{StatusCode: code, Status: status, Header: h, ContentLength: -1}
	if cl := h.Get("Content-Length"); cl != "" && !chunkedCoding(h) {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("read the answer: bad Content-Length %q", cl)
		}
		resp.ContentLength = n
	}
	return resp, nil
}

// readHeader reads header lines up to the empty line, at most
// maxHeaderBytes of them.
func readHeader(br *bufio.Reader) (textproto.MIMEHeader, error) {
	h := make(textproto.MIMEHeader)
	total := 0
	for {
		line, err := readLine(br, maxHeaderBytes)
		if err != nil {
			return nil, err
		}
		if line == "" {
			return h, nil
		}
		if total += len(line); total > maxHeaderBytes {
			return nil, errors.New("headers too large")
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("malformed header line %q", line)
		}
		key := textproto.CanonicalMIMEHeaderKey(k)
		h[key] = append(h[key], strings.TrimSpace(v))
	}
}

// readLine reads one CRLF- (or LF-) ended line of at most limit bytes,
// without its end. An end of file before the line's end is an
// io.ErrUnexpectedEOF.
func readLine(br *bufio.Reader, limit int) (string, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > limit {
			return "", errors.New("line too long")
		}
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return "", unexpected(err)
		}
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
	return string(line), nil
}

// chunkedCoding tells whether an answer's body is chunked.
func chunkedCoding(h textproto.MIMEHeader) bool {
	te := h.Values("Transfer-Encoding")
	return len(te) > 0 && strings.EqualFold(strings.TrimSpace(te[len(te)-1]), "chunked")
}

// bodyReader is an answer's body. At its end the connection goes back to
// the transport; closed before, or broken, the connection is closed.
type bodyReader struct {
	t     *transport
	c     *conn
	r     io.Reader
	stop  func() bool // ends the context's hold on the connection
	ctx   context.Context
	reuse bool

	mu   sync.Mutex
	done bool // the connection was given back or closed; guarded by mu
}

func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errors.New("read of a closed answer")
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.reuse)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.finish(false)
	}
	return n, err
}

// Close ends the answer; a body not read to its end closes its
// connection (reading the rest could take as long as the daemon likes).
// A Read under way is ended by closing the connection under it.
func (b *bodyReader) Close() error {
	if !b.mu.TryLock() {
		b.c.nc.Close()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	b.finish(false)
	return nil
}

// finish gives the connection back (reuse) or closes it, once.
func (b *bodyReader) finish(reuse bool) {
	if b.done {
		return
	}
	b.done = true
	if !b.stop() {
		reuse = false // the context ended: the connection is closed
	}
	if reuse {
		b.t.put(b.c)
		return
	}
	b.c.nc.Close()
}

// eofReader is an empty body.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// lengthReader reads a body of n bytes; one cut short is an
// io.ErrUnexpectedEOF.
type lengthReader struct {
	r io.Reader
	n int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if err == io.EOF && l.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkedReader decodes a chunked body and its trailer.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // of the current chunk
	eof  bool
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.eof {
		return 0, io.EOF
	}
	for c.left == 0 {
		line, err := c.line()
		if err != nil {
			return 0, err
		}
		if i := strings.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // a chunk extension, which nothing here uses
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			// The trailer, up to its empty line.
			for {
				t, err := c.line()
				if err != nil {
					return 0, err
				}
				if t == "" {
					c.eof = true
					return 0, io.EOF
				}
			}
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, err
	}
	if c.left == 0 {
		// The chunk's data ends with CRLF.
		var end [2]byte
		if _, err := io.ReadFull(c.br, end[:]); err != nil {
			return n, unexpected(err)
		}
		if end != [2]byte{'\r', '\n'} {
			return n, errors.New("malformed chunked body: no CRLF after a chunk")
		}
	}
	return n, nil
}

// line reads one line of chunk framing.
func (c *chunkedReader) line() (string, error) {
	l, err := readLine(c.br, maxChunkLine)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		// A body cut short is told as such; anything else is framing.
		return "", fmt.Errorf("malformed chunked body: %w", err)
	}
	return l, err
}

// unexpected makes an end of file in the middle of a body an
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
