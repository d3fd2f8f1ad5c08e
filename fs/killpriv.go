package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Set-id bits on writes. The mount negotiates HANDLE_KILLPRIV_V2, so the
// kernel leaves clearing a file's set-uid and set-gid bits, after a write
// or truncation by a caller without CAP_FSETID, to the server; the daemon
// writes as root, with CAP_FSETID, so the backing filesystem keeps them,
// and the daemon must clear them itself wherever the kernel asks:
//
//   - a SETATTR with FATTR_KILL_SUIDGID (a truncate, a chown), or one
//     that changes nothing (the kernel's remove-privileges step before a
//     write, passed through or not): node.Setattr (killsSetID);
//   - an OPEN or CREATE with O_TRUNC and FUSE_OPEN_KILL_SUIDGID, and a
//     WRITE the daemon serves with FUSE_WRITE_KILL_SUIDGID: these flags
//     never reach go-fuse's node API, so killPriv reads them here and asks
//     the node for the same SETATTR.
//
// A write to a set-id file by another user then succeeds and leaves a
// plain file, as on a local filesystem: nobody can plant content in a
// set-id program.

// killPriv wraps go-fuse's raw filesystem to honour the kill flags of
// OPEN, CREATE and WRITE.
type killPriv struct {
	fuse.RawFileSystem
}

func (k *killPriv) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := k.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK && in.Mode&fuse.OPEN_KILL_SUIDGID != 0 {
		k.kill(cancel, &in.InHeader)
	}
	return st
}

func (k *killPriv) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := k.RawFileSystem.Create(cancel, in, name, out)
	if st == fuse.OK && in.OpenFlags&fuse.OPEN_KILL_SUIDGID != 0 {
		h := in.InHeader
		h.NodeId = out.NodeId
		k.kill(cancel, &h)
	}
	return st
}

// Writev and Write clear the bits before the data lands, as a local
// filesystem does. (go-fuse serves WRITE with Writev where it can.)
func (k *killPriv) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		if st := k.kill(cancel, &in.InHeader); st != fuse.OK {
			return 0, st
		}
	}
	return k.RawFileSystem.Writev(cancel, in, data)
}

func (k *killPriv) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		if st := k.kill(cancel, &in.InHeader); st != fuse.OK {
			return 0, st
		}
	}
	return k.RawFileSystem.Write(cancel, in, data)
}

// kill clears the set-id bits of the inode h names, through the same
// SETATTR the kernel sends for a truncate (node.Setattr: the path's lock,
// the other mounts told).
func (k *killPriv) kill(cancel <-chan struct{}, h *fuse.InHeader) fuse.Status {
	in := fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: *h, Valid: fuse.FATTR_KILL_SUIDGID}}
	var out fuse.AttrOut
	return k.RawFileSystem.SetAttr(cancel, &in, &out)
}
