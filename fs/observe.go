package fs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// OpObserver is told of each FUSE request a mount answers: the
// operation's name (lookup, getattr, open, read, write...) and how long
// the daemon took to answer it. It is called on the request's goroutine
// and must be quick (a histogram's Observe).
type OpObserver func(op string, took time.Duration)

// ObservedOps names the operations an OpObserver is told of, so that an
// observer can make its series (or whatever it keeps per operation) once,
// before the first request. TestObservedOpsNamed holds it to the methods
// below.
func ObservedOps() []string {
	return []string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link", "symlink", "readlink",
		"create", "open", "read", "write", "release", "fsync", "opendir", "readdir", "readdirplus", "statfs"}
}

// observedOps counts every request a mount answers (Mount.Requests), and
// tells an OpObserver, if any, of the requests the kernel sends most:
// names, attributes, opens and closes, reads and writes the daemon
// serves, listings and changes of entries. Reads and writes passed
// through never reach the daemon, so they are not counted. The other
// requests (locks, xattrs, ioctl...) pass through untold.
type observedOps struct {
	fuse.RawFileSystem
	requests *atomic.Uint64 // the mount's count (root.requests)
	observe  OpObserver     // nil: count only
}

// now is when a request began, read only for an observer: without one a
// request costs an atomic add.
func (o *observedOps) now() time.Time {
	if o.observe == nil {
		return time.Time{}
	}
	return time.Now()
}

func (o *observedOps) done(op string, start time.Time) {
	o.requests.Add(1)
	if o.observe != nil {
		o.observe(op, time.Since(start))
	}
}

func (o *observedOps) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("lookup", o.now())
	return o.RawFileSystem.Lookup(cancel, h, name, out)
}

func (o *observedOps) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer o.done("getattr", o.now())
	return o.RawFileSystem.GetAttr(cancel, in, out)
}

func (o *observedOps) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer o.done("setattr", o.now())
	return o.RawFileSystem.SetAttr(cancel, in, out)
}

func (o *observedOps) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("mknod", o.now())
	return o.RawFileSystem.Mknod(cancel, in, name, out)
}

func (o *observedOps) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("mkdir", o.now())
	return o.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (o *observedOps) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer o.done("unlink", o.now())
	return o.RawFileSystem.Unlink(cancel, h, name)
}

func (o *observedOps) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer o.done("rmdir", o.now())
	return o.RawFileSystem.Rmdir(cancel, h, name)
}

func (o *observedOps) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer o.done("rename", o.now())
	return o.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (o *observedOps) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("link", o.now())
	return o.RawFileSystem.Link(cancel, in, name, out)
}

func (o *observedOps) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer o.done("symlink", o.now())
	return o.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (o *observedOps) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer o.done("readlink", o.now())
	return o.RawFileSystem.Readlink(cancel, h)
}

func (o *observedOps) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer o.done("create", o.now())
	return o.RawFileSystem.Create(cancel, in, name, out)
}

func (o *observedOps) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer o.done("open", o.now())
	return o.RawFileSystem.Open(cancel, in, out)
}

func (o *observedOps) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer o.done("read", o.now())
	return o.RawFileSystem.Read(cancel, in, buf)
}

func (o *observedOps) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer o.done("write", o.now())
	return o.RawFileSystem.Write(cancel, in, data)
}

func (o *observedOps) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer o.done("release", o.now())
	o.RawFileSystem.Release(cancel, in)
}

func (o *observedOps) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer o.done("fsync", o.now())
	return o.RawFileSystem.Fsync(cancel, in)
}

func (o *observedOps) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer o.done("opendir", o.now())
	return o.RawFileSystem.OpenDir(cancel, in, out)
}

func (o *observedOps) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer o.done("readdir", o.now())
	return o.RawFileSystem.ReadDir(cancel, in, out)
}

func (o *observedOps) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer o.done("readdirplus", o.now())
	return o.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (o *observedOps) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer o.done("statfs", o.now())
	return o.RawFileSystem.StatFs(cancel, h, out)
}
