package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peer is who is on the other end of an API connection, as the kernel
// says (SO_PEERCRED: the credentials at connect time).
type peer struct {
	uid, gid uint32
	pid      int32
	err      error // reading the credentials failed: the peer is refused
}

type peerKey struct{}

// connContext reads the peer credentials of each new connection once and
// keeps them in the connection's context, for checkPeer.
func (g *Gateway) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, readPeer(c))
}

// peerUID reads the uid of c's peer, for the listener's per-uid bound
// (admit.Listener).
func peerUID(c net.Conn) (uint32, bool) {
	p := readPeer(c)
	return p.uid, p.err == nil
}

func readPeer(c net.Conn) peer {
	// The listener wraps each connection it counts (admit.Listener).
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{err: fmt.Errorf("not a unix connection: %T", c)}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{err: fmt.Errorf("raw connection: %w", err)}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{err: fmt.Errorf("raw connection: %w", err)}
	}
	if credErr != nil {
		return peer{err: fmt.Errorf("read SO_PEERCRED: %w", credErr)}
	}
	return peer{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}
}

// peerFrom returns the peer of the request's connection.
func peerFrom(ctx context.Context) peer {
	p, ok := ctx.Value(peerKey{}).(peer)
	if !ok {
		return peer{err: errors.New("no peer credentials on the connection")}
	}
	return p
}

// allowed reports whether uid may use the API: this process's own uid,
// root, or one of Config.AllowUIDs.
func (g *Gateway) allowed(uid uint32) bool {
	return uid == g.uid || uid == 0 || g.allow[uid]
}
