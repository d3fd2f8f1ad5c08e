package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"warren/api"
)

// OpenPort returns the channel to port in a thread's jail (binding the
// thread and starting its jail if need be): a loopback URL of the
// daemon's that forwards HTTP and WebSocket to the port, and the headers
// every request to it must carry. The same port gives the same channel
// while the jail lives.
func (c *Client) OpenPort(ctx context.Context, tenant, thread string, port int) (api.PortChannel, error) {
	var out api.PortChannel
	err := c.do(ctx, methodPost, portPath(tenant, thread, port), nil, nil, &out)
	return out, err
}

// ClosePort closes the channel to port in a thread's jail, if one is
// open, and the plain TCP connections to it (DialPort).
func (c *Client) ClosePort(ctx context.Context, tenant, thread string, port int) (api.PortClosed, error) {
	var out api.PortClosed
	err := c.do(ctx, methodDelete, portPath(tenant, thread, port), nil, nil, &out)
	return out, err
}

// DialPort opens a plain TCP connection to port in a thread's jail,
// through the daemon's socket (an HTTP upgrade; see api.PortUpgrade),
// binding the thread and starting its jail if need be. Nothing listening
// there is an error matching api.ErrConflict. ctx bounds the set-up only;
// the caller closes the connection.
func (c *Client) DialPort(ctx context.Context, tenant, thread string, port int) (net.Conn, error) {
	path := portPath(tenant, thread, port)
	conn, err := c.tr.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", methodPost, path, c.socket, err)
	}
	nc := conn.nc
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	out, err := upgrade(nc, conn.br, path)
	if !stop() || ctx.Err() != nil {
		nc.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return out, nil
}

// upgrade asks for the upgrade on nc and reads the answer: the connection
// on 101, or the daemon's error.
func upgrade(nc net.Conn, br *bufio.Reader, path string) (net.Conn, error) {
	req := methodPost + " " + path + " HTTP/1.1\r\nHost: warren\r\nConnection: Upgrade\r\nUpgrade: " + api.PortUpgrade + "\r\nContent-Length: 0\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		return nil, fmt.Errorf("%s %s: send the request: %w", methodPost, path, err)
	}
	line, err := readLine(br, maxHeaderBytes)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", methodPost, path, err)
	}
	h, err := readHeader(br)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer's headers: %w", methodPost, path, err)
	}
	proto, status, _ := strings.Cut(line, " ")
	code, _ := strconv.Atoi(status[:min(3, len(status))])
	if !strings.HasPrefix(proto, "HTTP/1.") || code < 100 {
		return nil, fmt.Errorf("%s %s: not an HTTP/1.1 status line: %q", methodPost, path, line)
	}
	if code == 101 {
		return &upgradedConn{Conn: nc, r: br}, nil
	}
	n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	if err != nil || n < 0 {
		n = maxAnswerBytes
	}
	resp := &response{StatusCode: code, Status: status, Header: h, ContentLength: n, Body: io.NopCloser(io.LimitReader(br, n))}
	if code == statusOK {
		return nil, errors.New(methodPost + " " + path + ": the daemon did not upgrade the connection")
	}
	return nil, answerError(methodPost, path, resp)
}

// upgradedConn is the connection after the upgrade: its first bytes may
// be in the reader of the answer.
type upgradedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *upgradedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite ends what the connection sends: the jail's server reads its
// end, and may still answer.
func (c *upgradedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection cannot be half closed")
}

func portPath(tenant, thread string, port int) string {
	return threadPath(tenant, thread) + "/ports/" + strconv.Itoa(port)
}
