package fs

import (
	"cmp"
	"container/list"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// No lost edits. Several agents may work in one folder, through one mount,
// through several mounts of it, or through the file API. An agent that
// read a file and then writes it back must not overwrite what another
// agent wrote in between. The ledger enforces that for every program, not
// only well-behaved ones:
//
//   - every path has a version, which moves on every modification through
//     any mount or the file API; a change made behind the filesystem's back
//     is seen as a change of the path's fingerprint (inode, size, ctime in
//     ns);
//   - every actor (an agent run, or a process of its own; actors.go) has a
//     read record per path: the version it last saw;
//   - a modification of a path (open for writing, truncate, rename over,
//     unlink, create) by an actor whose record is older than the path's
//     version is refused with ESTALE; its own modifications move its
//     record along;
//   - a modification holds the path's lock from its check to its record,
//     so two actors cannot both pass the check on one version.
//
// With FUSE passthrough the daemon never sees a write, only the open and
// the release of the handle that makes it. So an open for writing counts
// as a modification (the version moves at the open and again at the
// release), and a read made while another actor holds the file open for
// writing is recorded as torn: it can see half a write, so it is older
// than any version.
//
// Paths are keyed by the backing directory's device and inode and the
// entry name: that is the real path, whatever root or mount it was reached
// through, and it stays the same when a directory above is renamed. The
// directory's generation (its birth time, statGen) is part of the key: a
// filesystem gives the inode number of a removed directory to the next
// one it makes, at once on ext4, and the new directory's files are not the
// old one's.

// pathKey is one backing path: the entry name in a directory.
type pathKey struct {
	dev, dir uint64 // the directory's device and inode
	gen      uint64 // the directory's generation (statGen)
	name     string
}

func comparePathKeys(a, b pathKey) int {
	if c := cmp.Compare(a.dev, b.dev); c != 0 {
		return c
	}
	if c := cmp.Compare(a.dir, b.dir); c != 0 {
		return c
	}
	if c := cmp.Compare(a.gen, b.gen); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// fingerprint is what a path holds, as far as versions are concerned. Any
// write moves ctime; a file swapped in by rename moves the inode. The zero
// fingerprint means the path holds nothing.
//
// A directory has a fingerprint but no records: its content is its
// entries, each guarded on its own.
type fingerprint struct {
	ino, size uint64
	ctimeSec  int64
	ctimeNsec int64
	dir       bool
}

func fingerprintOf(st *syscall.Stat_t) fingerprint {
	return fingerprint{
		ino: st.Ino, size: uint64(st.Size),
		ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec,
		dir: st.Mode&syscall.S_IFMT == syscall.S_IFDIR,
	}
}

// tornRead is the version recorded for a read that may have seen half a
// write: older than every real version.
const tornRead = 0

// pathState is the ledger's state of one path. mu is the path's lock; the
// other fields are guarded by it, except refs and reads, which belong to
// the ledger's mutex.
type pathState struct {
	mu      sync.Mutex
	known   bool          // fp and version are set
	fp      fingerprint   // what the path held when version was set
	version uint64        // moves on every modification
	writers map[Actor]int // open handles that may write, by actor
	refs    int           // lock holders and waiters, open writers; ledger.mu
	reads   int           // read records of this path; ledger.mu
	idle    *list.Element // in ledger.idleList while nobody holds or read it; ledger.mu
}

// soleWriter is the one actor that holds the path open for writing, if
// exactly one does, else no actor. A change the daemon did not see (the
// writes of a handle pass through) is most likely that actor's: its
// handle's release, which tells the change with its actor, can come after
// the next request about the path has seen the change already. st.mu is
// held.
func (st *pathState) soleWriter() Actor {
	var only Actor
	for a, n := range st.writers {
		if n <= 0 {
			continue
		}
		if only != (Actor{}) {
			return Actor{}
		}
		only = a
	}
	return only
}

// readKey names one read record.
type readKey struct {
	actor Actor
	path  pathKey
}

// readRecord is the version of a path an actor last saw.
type readRecord struct {
	key     readKey
	version uint64
	// refused is the version at which a modification by this actor was
	// last refused, so that one stale attempt (which the kernel may retry
	// once) gives one report.
	refused uint64
	elem    *list.Element // in ledger.lru
}

// DefaultMaxReads bounds the read records a hub keeps. A record costs a
// couple of hundred bytes; when the bound is reached the oldest record
// goes, and its actor is treated as never having read that path.
const DefaultMaxReads = 1 << 16

// ledger holds the versions, locks and read records of every path that
// the mounts and file API of one hub touch.
type ledger struct {
	off      bool // checks switched off: versions move, nothing is refused
	maxReads int
	maxIdle  int // idle path states kept (forgetIfIdle)
	// forgotten is the greatest version of a path state forgotten; the
	// version of a path the ledger knows nothing of.
	forgotten atomic.Uint64

	mu    sync.Mutex
	seq   atomic.Uint64           // the last version given
	paths map[pathKey]*pathState  // guarded by mu
	reads map[readKey]*readRecord // guarded by mu
	lru   list.List               // of *readRecord, newest first; guarded by mu
	// idleList holds the states nobody holds or read, most recently
	// used first; guarded by mu.
	idleList list.List
}

func newLedger(maxReads int, off bool) *ledger {
	if maxReads <= 0 {
		maxReads = DefaultMaxReads
	}
	l := &ledger{
		off:      off,
		maxReads: maxReads,
		maxIdle:  maxReads,
		paths:    make(map[pathKey]*pathState),
		reads:    make(map[readKey]*readRecord),
	}
	// Versions start above tornRead and above the baseline of a path the
	// ledger knows nothing of.
	l.seq.Store(1)
	l.forgotten.Store(1)
	return l
}

// lock takes the locks of one or two paths, in one global order so that
// two renames between the same paths never deadlock, and returns their
// states in the order given. Call unlock when the operation is done.
func (l *ledger) lock(a pathKey, b ...pathKey) (sa, sb *pathState, unlock func()) {
	l.mu.Lock()
	sa = l.hold(a)
	if len(b) > 0 && b[0] != a {
		sb = l.hold(b[0])
	}
	l.mu.Unlock()
	if sb == nil {
		sa.mu.Lock()
		return sa, sa, func() { sa.mu.Unlock(); l.release(a) }
	}
	first, second := sa, sb
	if comparePathKeys(a, b[0]) > 0 {
		first, second = sb, sa
	}
	first.mu.Lock()
	second.mu.Lock()
	return sa, sb, func() {
		second.mu.Unlock()
		first.mu.Unlock()
		l.release(a, b[0])
	}
}

// hold returns the state of k, made if need be, with one more reference.
// l.mu is held.
func (l *ledger) hold(k pathKey) *pathState {
	st := l.paths[k]
	if st == nil {
		st = &pathState{}
		l.paths[k] = st
	}
	if st.idle != nil {
		l.idleList.Remove(st.idle)
		st.idle = nil
	}
	st.refs++
	return st
}

// release drops one reference to each path; a state nobody holds, reads
// or writes becomes idle (forgetIfIdle).
func (l *ledger) release(keys ...pathKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		st := l.paths[k]
		if st == nil {
			continue
		}
		st.refs--
		l.forgetIfIdle(k, st)
	}
}

// forgetIfIdle keeps a state that nobody holds or read among the idle
// ones, the least recently used of which are forgotten past maxIdle. A
// state is kept a while after its last use because its version tells the
// kernels of the mounts whether what they cache of the path is current
// (node.syncKernel); a path the ledger forgot gets the greatest version
// it forgot (forgotten) when it is next needed, which errs on the side of
// telling a kernel once too often. l.mu is held.
func (l *ledger) forgetIfIdle(k pathKey, st *pathState) {
	if st.refs > 0 || st.reads > 0 || st.idle != nil {
		return
	}
	st.idle = l.idleList.PushFront(idleState{k, st})
	for l.idleList.Len() > l.maxIdle {
		old := l.idleList.Remove(l.idleList.Back()).(idleState)
		old.st.idle = nil
		delete(l.paths, old.key)
		// Nobody holds or waits for old.st (refs is 0 under l.mu), and
		// its last holder's unlock happened before: its version is
		// safe to read.
		if v := old.st.version; v > l.forgotten.Load() {
			l.forgotten.Store(v)
		}
	}
}

// idleState is an entry of ledger.idleList.
type idleState struct {
	key pathKey
	st  *pathState
}

// next returns a new version. st.mu is held.
func (l *ledger) next() uint64 {
	return l.seq.Add(1)
}

// now returns the last version given to any path: a change made later
// has a greater version.
func (l *ledger) now() uint64 {
	return l.seq.Load()
}

// current brings the version of the path up to date with what it holds
// now (fp) and returns it. A different fingerprint is a modification the
// ledger did not see: made behind the filesystem's back, or written
// through an open handle. In the latter case the actors holding handles
// open for writing made it, so their records move along. st.mu is held.
func (l *ledger) current(k pathKey, st *pathState, fp fingerprint) uint64 {
	if st.known && st.fp == fp {
		return st.version
	}
	if !st.known {
		// Nothing is known of the path: it did not change through the
		// ledger since the last version it forgot.
		st.known, st.fp, st.version = true, fp, l.forgotten.Load()
		return st.version
	}
	st.known, st.fp, st.version = true, fp, l.next()
	if len(st.writers) > 0 {
		l.mu.Lock()
		for a := range st.writers {
			if r := l.reads[readKey{a, k}]; r != nil {
				r.version = st.version
			}
		}
		l.mu.Unlock()
	}
	return st.version
}

// stale reports whether actor's read of the path is older than its
// current version, and whether this is the first refusal at that version
// (the one to report). An actor that never read the path is not stale.
// st.mu is held, and current was called.
func (l *ledger) stale(a Actor, k pathKey, st *pathState) (stale, first bool) {
	if l.off || a.none() || st.fp.dir {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reads[readKey{a, k}]
	if r == nil || r.version >= st.version {
		return false, false
	}
	first = r.refused != st.version
	r.refused = st.version
	return true, first
}

// read records that actor read the path at its current version: a torn
// read if another actor holds it open for writing. st.mu is held, and
// current was called.
func (l *ledger) read(a Actor, k pathKey, st *pathState) {
	v := st.version
	for w, n := range st.writers {
		if n > 0 && w != a {
			v = tornRead
			break
		}
	}
	l.record(a, k, st, v)
}

// readOld records that actor read the path at version v, older than its
// current one (a read that streamed while the path changed), unless the
// actor's record is newer already (its own change meanwhile). st.mu is
// held.
func (l *ledger) readOld(a Actor, k pathKey, st *pathState, v uint64) {
	if a.none() || st.fp.dir {
		return
	}
	l.mu.Lock()
	r := l.reads[readKey{a, k}]
	newer := r != nil && r.version > v
	l.mu.Unlock()
	if !newer {
		l.record(a, k, st, v)
	}
}

// modified records a modification of the path by actor, after which it
// holds fp: a new version. If the actor read the path, its record moves
// to the new version (its own change does not make its read stale); an
// actor that never read the path gets no record from changing it (it
// may not know the content it changed: an append, a truncate, a tar).
// st.mu is held.
func (l *ledger) modified(a Actor, k pathKey, st *pathState, fp fingerprint) uint64 {
	st.known, st.fp, st.version = true, fp, l.next()
	l.keep(a, k, st.version)
	return st.version
}

// wrote records a modification by an actor that knows the whole content
// it left (the file API's write and edit): it is as good as a read.
// st.mu is held.
func (l *ledger) wrote(a Actor, k pathKey, st *pathState, fp fingerprint) uint64 {
	st.known, st.fp, st.version = true, fp, l.next()
	l.record(a, k, st, st.version)
	return st.version
}

// removed records that actor removed the path (unlinked it, or renamed
// it away): a new version, and the actor's own record goes, since there
// is nothing left that it read. st.mu is held.
func (l *ledger) removed(a Actor, k pathKey, st *pathState) {
	st.known, st.fp, st.version = true, fingerprint{}, l.next()
	if a.none() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reads[readKey{a, k}]; r != nil {
		l.dropRecord(r)
	}
}

// keep moves actor's record of the path, if it has one, to version v.
func (l *ledger) keep(a Actor, k pathKey, v uint64) {
	if a.none() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reads[readKey{a, k}]; r != nil {
		r.version = v
		l.lru.MoveToFront(r.elem)
	}
}

// touched records a change of the path's attributes only (mode, owner,
// times): the content every reader saw is still there, so the version
// stays; only the fingerprint follows. st.mu is held.
func (l *ledger) touched(st *pathState, fp fingerprint) {
	if st.known {
		st.fp = fp
	}
}

// openWriter notes an open handle of actor that may write the path; the
// handle keeps the state alive until closeWriter. st.mu is held.
func (l *ledger) openWriter(a Actor, st *pathState) {
	if st.writers == nil {
		st.writers = make(map[Actor]int, 1)
	}
	st.writers[a]++
	l.mu.Lock()
	st.refs++
	l.mu.Unlock()
}

// dropWriter undoes openWriter for a handle that failed to open. st.mu is
// held.
func (l *ledger) dropWriter(a Actor, st *pathState) {
	if st.writers[a] <= 1 {
		delete(st.writers, a)
	} else {
		st.writers[a]--
	}
	l.mu.Lock()
	st.refs--
	l.mu.Unlock()
}

// closeWriter ends a handle of openWriter: the path, holding fp now, has
// a new version, which the actor has seen (its own writes). The caller
// holds the path's lock, taken by lock.
func (l *ledger) closeWriter(a Actor, k pathKey, st *pathState, fp fingerprint) {
	l.modified(a, k, st, fp)
	l.dropWriter(a, st)
}

// record sets actor's record of the path to version v, making it the
// newest record. st.mu is held.
func (l *ledger) record(a Actor, k pathKey, st *pathState, v uint64) {
	if a.none() || st.fp.dir {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rk := readKey{a, k}
	if r := l.reads[rk]; r != nil {
		r.version = v
		l.lru.MoveToFront(r.elem)
		return
	}
	r := &readRecord{key: rk, version: v}
	r.elem = l.lru.PushFront(r)
	l.reads[rk] = r
	st.reads++
	for len(l.reads) > l.maxReads {
		l.dropRecord(l.lru.Back().Value.(*readRecord))
	}
}

// dropRecord forgets one record. l.mu is held.
func (l *ledger) dropRecord(r *readRecord) {
	l.lru.Remove(r.elem)
	delete(l.reads, r.key)
	if st := l.paths[r.key.path]; st != nil {
		st.reads--
		l.forgetIfIdle(r.key.path, st)
	}
}

// forgetActors drops every record of the actors for which gone is true.
func (l *ledger) forgetActors(gone func(Actor) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	dropped := 0
	verdict := make(map[Actor]bool)
	for e := l.lru.Front(); e != nil; {
		r := e.Value.(*readRecord)
		e = e.Next()
		g, ok := verdict[r.key.actor]
		if !ok {
			g = gone(r.key.actor)
			verdict[r.key.actor] = g
		}
		if g {
			l.dropRecord(r)
			dropped++
		}
	}
	return dropped
}

// ReadStats counts what the ledger holds, for tests and metrics.
type ReadStats struct {
	Records int // read records
	Paths   int // paths with a state: held, read, or idle (at most as many as records)
}

func (l *ledger) stats() ReadStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ReadStats{Records: len(l.reads), Paths: len(l.paths)}
}

// StaleError is the refusal of a modification based on a stale read.
type StaleError struct {
	Path  string // inside the workspace, without a leading "/"
	Actor Actor
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s changed since it was read. Read it again before you edit it.", e.Path)
}

// Unwrap makes errors.Is(err, syscall.ESTALE) true.
func (e *StaleError) Unwrap() error { return syscall.ESTALE }
