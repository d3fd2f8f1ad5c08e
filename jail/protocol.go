package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The gateway and a jail's init talk over a SOCK_SEQPACKET socket pair:
// each message is one JSON object in one packet, so no framing is needed,
// and a request passes the command's stdin, stdout and stderr as
// descriptors (SCM_RIGHTS) with it.

// InitArg is the first argument with which the binary is run as a jail's
// init (see IsInit).
const InitArg = "warren-jail-init"

// maxPacket bounds one message.
const maxPacket = 1 << 20

// setup is the first message to an init: how to build the jail.
type setup struct {
	Workspace string   `json:"workspace"` // host folder bound at /workspace
	ReadOnly  []string `json:"readOnly"`  // host folders bound read-only at the same paths
	UID       uint32   `json:"uid"`
	GID       uint32   `json:"gid"`
	Hostname  string   `json:"hostname"`
	TmpBytes  int64    `json:"tmpBytes"`
	OwnNet    bool     `json:"ownNet"` // a network namespace of its own: bring its loopback up
	// Nameserver, if set, replaces the jail's /etc/resolv.conf.
	Nameserver string `json:"nameserver,omitempty"`
	// Trees says the jail has a cgroup, and the setup message carries the
	// descriptor that moves the init's forking thread back into it
	// (tree_linux.go).
	Trees bool `json:"trees,omitempty"`
	// WorkspaceTree says the setup message carries the workspace as a
	// detached mount (open_tree), after the cgroup's descriptor if any:
	// the init attaches it instead of binding Workspace by its path (a
	// jail forked from a Base, base_linux.go).
	WorkspaceTree bool `json:"workspaceTree,omitempty"`
	// ImageTree says the setup message carries an image's root as a
	// detached mount, read-only, after the workspace's if any: the jail's
	// root is it, in place of ReadOnly's binds (image_linux.go).
	ImageTree bool `json:"imageTree,omitempty"`
	// ImageUser is the image's User, which names the jail's passwd entry.
	ImageUser string `json:"imageUser,omitempty"`
	// ResolvConf is, on an image's root without Nameserver, the host's
	// /etc/resolv.conf as the gateway read it.
	ResolvConf string `json:"resolvConf,omitempty"`
	// HomeTree says the setup message carries the folder to bind at
	// /home/agent as a detached mount, last; without it /home/agent is a
	// tmpfs of the jail's own.
	HomeTree bool `json:"homeTree,omitempty"`
	// Rlimits, when set, bounds each command with rlimits (no cgroup).
	Rlimits *rlimits `json:"rlimits,omitempty"`
}

// rlimits are the limits a command starts with when the jail has no
// cgroup: its address space, and the processes of the jail's user.
type rlimits struct {
	AddressSpace int64 `json:"as"`
	Procs        int   `json:"nproc"`
}

// request asks the init to start (or, with Kill, to stop) a command.
type request struct {
	ID   uint64   `json:"id"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Kill signals a command's process group with Signal (0: SIGKILL).
	// Commands with a tree are signalled from the host instead.
	Kill   bool `json:"kill,omitempty"`
	Signal int  `json:"signal,omitempty"`
	// Tree says the last descriptor moves the forking thread into the
	// command's own cgroup.
	Tree bool `json:"tree,omitempty"`
	// Script is the command line Argv are the plain words of: Argv runs
	// as bash would run it, and bash -c Script runs if Argv cannot start
	// (the jail's shell is bash, or it has none: script.go).
	Script string `json:"script,omitempty"`
	// Tty runs the command on a new terminal of the jail's devpts, of
	// Rows × Cols; its master comes back with the started reply, and the
	// request carries no descriptors.
	Tty  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// reply is the init's answer: ready after setup (ID 0), a command's pid
// once it started, its exit once it ended, or an error.
type reply struct {
	ID      uint64 `json:"id"`
	Ready   bool   `json:"ready,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	Started bool   `json:"started,omitempty"`
	Done    bool   `json:"done,omitempty"`
	Exit    int    `json:"exit"`
	// Signal is the signal that ended the command's process, 0 when it
	// exited (Exit then is its own code, 128 plus a signal or not).
	Signal int    `json:"signal,omitempty"`
	Err    string `json:"err,omitempty"`
	// Shell, in the ready reply, is the shell the jail's root has for
	// command lines ("/bin/bash", "/bin/sh"), "" if none.
	Shell string `json:"shell,omitempty"`
}

// send writes v as one packet on fd, with fds attached.
func send(fd int, v any, fds ...int) error {
	b, oob, err := packet(v, fds)
	if err != nil {
		return err
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, 0)
		if err != unix.EINTR {
			return err
		}
	}
}

// packet encodes v and fds as one packet's data and control message.
func packet(v any, fds []int) (b, oob []byte, err error) {
	if b, err = json.Marshal(v); err != nil {
		return nil, nil, err
	}
	if len(b) > maxPacket {
		// EMSGSIZE, as the kernel says it: the request is too large.
		return nil, nil, fmt.Errorf("message of %d bytes is over %d: %w", len(b), maxPacket, unix.EMSGSIZE)
	}
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return b, oob, nil
}

// maxReply bounds a reply of the init's, and maxReplyErr its error text
// (which JSON may escape to six bytes a byte): the gateway's receiver of
// every live jail keeps a buffer of maxReply, not of maxPacket.
const (
	maxReply    = 64 << 10
	maxReplyErr = 8 << 10
)

// sendReply is the init's send of a reply, its error text cut to
// maxReplyErr so that the reply fits the gateway's buffer.
func sendReply(fd int, r reply, fds ...int) error {
	if len(r.Err) > maxReplyErr {
		r.Err = strings.ToValidUTF8(r.Err[:maxReplyErr], "") + "..."
	}
	return send(fd, r, fds...)
}

// conn is the gateway's end of a jail's socket. It is non-blocking and
// served by the Go runtime's poller: the reader of a live jail, waiting
// for the init's next reply, is a parked goroutine, where a blocking
// recvmsg held one of the daemon's OS threads for as long as the jail
// lived (a thousand live jails, a thousand threads). And a send after
// Close fails, rather than reach whatever file took the descriptor's
// number since.
type conn struct {
	f   *os.File
	raw syscall.RawConn
}

// newConn takes fd over.
func newConn(fd int) (*conn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make the socket non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(fd), "jail-socket")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &conn{f: f, raw: raw}, nil
}

// send writes v as one packet, with fds attached, waiting (parked) while
// the socket's buffer is full.
func (c *conn) send(v any, fds ...int) error {
	b, oob, err := packet(v, fds)
	if err != nil {
		return err
	}
	var serr error
	if err := c.raw.Write(func(fd uintptr) bool {
		for {
			serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// receiver returns the receiver of the init's replies.
func (c *conn) receiver() *receiver {
	return &receiver{raw: c.raw, buf: make([]byte, maxReply), oob: make([]byte, unix.CmsgSpace(3*4))}
}

func (c *conn) Close() error { return c.f.Close() }

// setSendBuffer lets fd send packets of up to n bytes. The kernel takes
// the value as half of the buffer (the rest is its own overhead) and
// keeps a packet under the buffer less a little: n with room to spare.
func setSendBuffer(fd, n int) error {
	size := n + 64<<10
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); err == nil {
		return nil
	}
	// Without CAP_NET_ADMIN: as much as net.core.wmem_max allows.
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
}

// receiver reads packets from one socket; it keeps its buffer, so a
// packet costs no allocation of its size. Not for concurrent use.
type receiver struct {
	fd  int             // a blocking socket, when raw is nil
	raw syscall.RawConn // else the poller's
	buf []byte
	oob []byte
}

// maxInitFds bounds the descriptors of one message to the init: a
// command's three and its tree's, or the setup's cgroup, workspace, image
// and home.
const maxInitFds = 4

func newReceiver(fd int) *receiver {
	return &receiver{fd: fd, buf: make([]byte, maxPacket), oob: make([]byte, unix.CmsgSpace(maxInitFds*4))}
}

// receive reads one packet into v and returns the descriptors that came
// with it (close-on-exec).
func (rc *receiver) receive(v any) ([]int, error) {
	buf, oob := rc.buf, rc.oob
	var n, oobn, flags int
	var err error
	recv := func(fd int) {
		for {
			n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR {
				return
			}
		}
	}
	if rc.raw == nil {
		recv(rc.fd)
	} else if rerr := rc.raw.Read(func(fd uintptr) bool {
		recv(int(fd))
		return err != unix.EAGAIN
	}); rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		// Cut short: what it held cannot be trusted, and descriptors may
		// have been lost with the cut.
		closeAll(parseRights(oob[:oobn]))
		return nil, fmt.Errorf("a message over %d bytes, or with too many descriptors", len(buf))
	}
	if n == 0 {
		return nil, errors.New("connection closed")
	}
	fds := parseRights(oob[:oobn])
	if err := json.Unmarshal(buf[:n], v); err != nil {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, fmt.Errorf("decode message: %w", err)
	}
	return fds, nil
}

// parseRights returns the descriptors a control message carries.
func parseRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
