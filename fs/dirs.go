package fs

import (
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Directories are served without OPENDIR. Listing a directory normally
// costs three round trips (OPENDIR, READDIRPLUS, RELEASEDIR) even when its
// entries are cached; git status, find and a build's globbing list every
// directory of a tree each time. When the kernel offers
// FUSE_NO_OPENDIR_SUPPORT, the first OPENDIR is answered ENOSYS: the kernel
// then opens directories on its own and keeps their listings in its cache
// (as FOPEN_CACHE_DIR would), until the directory changes. A READDIR that
// does reach us, then without a handle, is served through a handle made
// for that one request: go-fuse's directory code is used unchanged, and
// the stream seeks to the kernel's offset.

// dirsWithoutOpen wraps go-fuse's raw filesystem to serve directories
// without OPENDIR.
type dirsWithoutOpen struct {
	fuse.RawFileSystem
	// handleless is set once the kernel is known to offer
	// NO_OPENDIR_SUPPORT (after INIT); until then OPENDIR is served.
	handleless atomic.Bool
}

func (d *dirsWithoutOpen) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if d.handleless.Load() {
		return fuse.ENOSYS
	}
	return d.RawFileSystem.OpenDir(cancel, in, out)
}

func (d *dirsWithoutOpen) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh != 0 {
		return d.RawFileSystem.ReadDir(cancel, in, out)
	}
	return d.withHandle(cancel, in, func(in *fuse.ReadIn) fuse.Status {
		return d.RawFileSystem.ReadDir(cancel, in, out)
	})
}

func (d *dirsWithoutOpen) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh != 0 {
		return d.RawFileSystem.ReadDirPlus(cancel, in, out)
	}
	return d.withHandle(cancel, in, func(in *fuse.ReadIn) fuse.Status {
		return d.RawFileSystem.ReadDirPlus(cancel, in, out)
	})
}

func (d *dirsWithoutOpen) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if in.Fh != 0 {
		return d.RawFileSystem.FsyncDir(cancel, in)
	}
	var oo fuse.OpenOut
	if st := d.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: in.InHeader}, &oo); !st.Ok() {
		return st
	}
	defer d.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: oo.Fh})
	fin := *in
	fin.Fh = oo.Fh
	return d.RawFileSystem.FsyncDir(cancel, &fin)
}

// withHandle runs read with a directory handle made for this one request.
func (d *dirsWithoutOpen) withHandle(cancel <-chan struct{}, in *fuse.ReadIn, read func(*fuse.ReadIn) fuse.Status) fuse.Status {
	var oo fuse.OpenOut
	if st := d.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: in.InHeader}, &oo); !st.Ok() {
		return st
	}
	defer d.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: oo.Fh})
	rin := *in
	rin.Fh = oo.Fh
	return read(&rin)
}
