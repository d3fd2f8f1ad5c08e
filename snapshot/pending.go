package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Finding an object. An object is in one of three places, looked at in
// this order:
//
//  1. loose: objects/<2 hex>/<62 hex>, written by a spreader;
//  2. a log of this Repo's, durable and not yet spread (r.logs);
//  3. a log of another Repo's (another daemon's) in tmp/.
//
// A spreader places an object loose before it lets go of its log, so a
// lookup that misses all three looks loose once more before it says
// ErrNotFound: the object may have been spread between the first look
// and the last.

// pendingLog is one of this Repo's logs: durable, its objects found
// through recs, not yet spread.
type pendingLog struct {
	name string       // in tmp/
	f    *os.File     // the log, flocked LOCK_EX; closed once refs is 0
	size int64        // of the log; it does not change
	recs map[Hash]loc // never changed once the log is published

	// refs counts the readers of f, plus one held by the Repo until the
	// log is spread and removed. Guarded by Repo.mu.
	refs int
}

// publish makes the committed log w's objects visible to every reader
// and dedup check, and hands it to the spreader.
func (r *Repo) publish(w *logWriter) {
	pl := &pendingLog{name: w.name, f: w.f, size: w.off, recs: w.recs, refs: 1}
	r.mu.Lock()
	r.logs = append(r.logs, pl)
	r.mu.Unlock()
	r.spread.wake()
}

// pendingHas reports whether a log of this Repo's holds h.
func (r *Repo) pendingHas(h Hash) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pl := range r.logs {
		if _, ok := pl.recs[h]; ok {
			return true
		}
	}
	return false
}

// pendingLookup returns the log of this Repo's that holds h, with a
// reference the caller gives back with r.release.
func (r *Repo) pendingLookup(h Hash) (*pendingLog, loc, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pl := range r.logs {
		if l, ok := pl.recs[h]; ok {
			pl.refs++
			return pl, l, true
		}
	}
	return nil, loc{}, false
}

// release gives back a reference to pl; the last one closes its file
// (and so lets go of its lock).
func (r *Repo) release(pl *pendingLog) {
	r.mu.Lock()
	pl.refs--
	last := pl.refs == 0
	r.mu.Unlock()
	if last {
		pl.f.Close()
	}
}

// ownLogs returns the names of this Repo's pending logs.
func (r *Repo) ownLogs() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make(map[string]bool, len(r.logs))
	for _, pl := range r.logs {
		names[pl.name] = true
	}
	return names
}

// otherLogs remembers what was read of other Repos' logs, so that a
// lookup reads only what was added since. Its entries go when their logs
// do.
type otherLogs struct {
	mu     sync.Mutex
	byName map[string]*otherLog
}

type otherLog struct {
	dev, ino uint64       // the file read: a name is never reused, but be sure
	scanned  int64        // where the next record starts
	recs     map[Hash]loc // what was read
}

// scanOthers calls fn with each log in tmp/ that is not this Repo's,
// open, and its records read up to its current end; fn returns whether
// to go on. The file is closed after fn unless fn returns keep.
func (r *Repo) scanOthers(fn func(f *os.File, recs map[Hash]loc) (more, keep bool)) error {
	names, err := listTmp(r.tmp)
	if err != nil {
		return err
	}
	own := r.ownLogs()
	o := &r.others
	o.mu.Lock()
	defer o.mu.Unlock()
	listed := make(map[string]bool)
	for _, name := range names {
		if !isLogName(name) || own[name] {
			continue
		}
		listed[name] = true
		f, err := os.Open(filepath.Join(r.tmp, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // spread and removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("open log %s: %w", name, err)
		}
		var st unix.Stat_t
		if err := fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return fmt.Errorf("stat log %s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			f.Close()
			continue // not one of ours
		}
		ol := o.byName[name]
		if ol == nil || ol.dev != st.Dev || ol.ino != st.Ino {
			ol = &otherLog{dev: st.Dev, ino: st.Ino, recs: make(map[Hash]loc)}
			if o.byName == nil {
				o.byName = make(map[string]*otherLog)
			}
			o.byName[name] = ol
		}
		if st.Size > ol.scanned {
			var s *logScanner
			if ol.scanned == 0 {
				var ok bool
				if s, ok, err = newLogScanner(f, st.Size); err != nil {
					f.Close()
					return fmt.Errorf("read log %s: %w", name, err)
				}
				if !ok {
					f.Close()
					continue // not a whole header yet
				}
			} else {
				s = resumeLogScanner(f, ol.scanned, st.Size)
			}
			for {
				h, l, ok := s.next()
				if !ok {
					break
				}
				ol.recs[h] = l
			}
			if s.err != nil {
				f.Close()
				return fmt.Errorf("read log %s: %w", name, s.err)
			}
			ol.scanned = s.off
		}
		more, keep := fn(f, ol.recs)
		if !keep {
			f.Close()
		}
		if !more {
			break
		}
	}
	for name := range o.byName {
		if !listed[name] {
			delete(o.byName, name)
		}
	}
	return nil
}

// otherLookup finds h in another Repo's log and returns that log, open
// (the caller closes it), and where h lies in it.
func (r *Repo) otherLookup(h Hash) (*os.File, loc, bool, error) {
	var found *os.File
	var where loc
	err := r.scanOthers(func(f *os.File, recs map[Hash]loc) (bool, bool) {
		l, ok := recs[h]
		if ok {
			found, where = f, l
		}
		return !ok, ok
	})
	if err != nil {
		if found != nil {
			found.Close()
		}
		return nil, loc{}, false, err
	}
	return found, where, found != nil, nil
}

// otherHashes returns every object that another Repo's log holds.
func (r *Repo) otherHashes() (map[Hash]struct{}, error) {
	all := make(map[Hash]struct{})
	err := r.scanOthers(func(_ *os.File, recs map[Hash]loc) (bool, bool) {
		for h := range recs {
			all[h] = struct{}{}
		}
		return true, false
	})
	return all, err
}

// listTmp returns the names in tmp/.
func listTmp(tmp string) ([]string, error) {
	d, err := os.Open(tmp)
	if err != nil {
		return nil, fmt.Errorf("list tmp: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list tmp: %w", err)
	}
	return names, nil
}

// source is an object's payload, open for reading.
type source struct {
	format byte
	size   int64 // of the payload
	rd     io.Reader
	close  func() error
}

// openObject opens the object h wherever it is (see the top of this
// file) and reads its format byte.
func (r *Repo) openObject(h Hash) (*source, error) {
	src, err := r.openLoose(h)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return src, err
	}
	if pl, l, ok := r.pendingLookup(h); ok {
		return &source{format: l.format, size: l.size, rd: io.NewSectionReader(pl.f, l.off, l.size),
			close: func() error { r.release(pl); return nil }}, nil
	}
	f, l, ok, err := r.otherLookup(h)
	if err != nil {
		return nil, fmt.Errorf("snapshot: object %s: %w", h, err)
	}
	if ok {
		return &source{format: l.format, size: l.size, rd: io.NewSectionReader(f, l.off, l.size), close: f.Close}, nil
	}
	return r.openLoose(h)
}

// openLoose opens the loose object h and reads its format byte.
func (r *Repo) openLoose(h Hash) (*source, error) {
	f, err := os.Open(r.objectPath(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot: object %s: %w", h, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: open object %s: %w", h, err)
	}
	var st unix.Stat_t
	if err := fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: stat object %s: %w", h, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w %s: no format byte: %v", ErrCorrupt, h, err)
	}
	if b[0] != formatRaw && b[0] != formatZstd {
		f.Close()
		return nil, fmt.Errorf("%w %s: unknown format %d", ErrCorrupt, h, b[0])
	}
	return &source{format: b[0], size: st.Size - 1, rd: f, close: f.Close}, nil
}
