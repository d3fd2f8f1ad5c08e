package call

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is who is on the other end of an API connection, as the kernel
// says (SO_PEERCRED: the credentials at connect time).
type Peer struct {
	UID, GID uint32
	PID      int32
	Err      error // reading the credentials failed: the peer is refused
}

type peerKey struct{}

// ConnContext reads the peer credentials of each new connection once and
// keeps them in the connection's context (http.Server.ConnContext), for
// PeerFrom.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, ReadPeer(c))
}

// PeerUID reads the uid of c's peer, for the listener's per-uid bound
// (admit.Listener).
func PeerUID(c net.Conn) (uint32, bool) {
	p := ReadPeer(c)
	return p.UID, p.Err == nil
}

// ReadPeer reads the credentials of c's peer.
func ReadPeer(c net.Conn) Peer {
	// The listener wraps each connection it counts (admit.Listener).
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{Err: fmt.Errorf("not a unix connection: %T", c)}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{Err: fmt.Errorf("raw connection: %w", err)}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{Err: fmt.Errorf("raw connection: %w", err)}
	}
	if credErr != nil {
		return Peer{Err: fmt.Errorf("read SO_PEERCRED: %w", credErr)}
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
}

// PeerFrom returns the peer of the request's connection.
func PeerFrom(ctx context.Context) Peer {
	p, ok := ctx.Value(peerKey{}).(Peer)
	if !ok {
		return Peer{Err: errors.New("no peer credentials on the connection")}
	}
	return p
}

// Actor names the caller of an API request for Event.Actor, or "" when
// ctx does not come from one (a mount restored at start).
func Actor(ctx context.Context) string {
	p := PeerFrom(ctx)
	if p.Err != nil {
		return ""
	}
	return "uid:" + strconv.FormatUint(uint64(p.UID), 10)
}
