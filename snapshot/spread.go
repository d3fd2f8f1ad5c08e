package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Spreading: a Repo's goroutine turns each of its durable logs into loose
// objects, written without fsync (the log is the durable copy), makes
// them durable in one go (durable_linux.go), then removes the log and
// forgets its records. It spreads every log published since its last
// pass in one pass, so that a busy repository pays one durability step
// for many builds.

// spreader is the Repo's spreading goroutine: started by Open, stopped
// and waited for by Close.
type spreader struct {
	kick     chan struct{} // 1 slot: a log was published, or a pass is wanted
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed when the goroutine has ended
	stopOnce sync.Once
}

// Retries of a pass that failed (a full disk, say) come after a pause
// that doubles from spreadRetryMin up to spreadRetryMax; a new log kicks
// the spreader at once.
const (
	spreadRetryMin = 100 * time.Millisecond
	spreadRetryMax = 30 * time.Second
)

// wake asks for a pass, unless one is asked for already.
func (s *spreader) wake() {
	if s == nil {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// startSpreader starts the Repo's spreading goroutine.
func (r *Repo) startSpreader() {
	r.spread = &spreader{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.spreadLoop()
}

// stopSpreader stops the spreading goroutine, after a last pass over
// the logs left, and waits for it. It returns that pass's error.
func (r *Repo) stopSpreader() error {
	s := r.spread
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.logs) > 0 {
		return r.passErr
	}
	return nil
}

func (r *Repo) spreadLoop() {
	defer close(r.spread.done)
	var retry <-chan time.Time
	pause := spreadRetryMin
	for {
		select {
		case <-r.spread.kick:
		case <-retry:
		case <-r.spread.stop:
			r.spreadPass()
			return
		}
		if err := r.spreadPass(); err != nil {
			retry = time.After(pause)
			pause = min(2*pause, spreadRetryMax)
		} else {
			retry, pause = nil, spreadRetryMin
		}
	}
}

// spreadPass spreads the logs published so far and removes them.
func (r *Repo) spreadPass() error {
	r.mu.Lock()
	batch := slices.Clone(r.logs)
	r.mu.Unlock()
	var ds durableSet
	var spread []*pendingLog
	var err error
	for _, pl := range batch {
		if r.spreadHook != nil {
			r.spreadHook(pl.name)
		}
		if _, err = r.spreadLog(pl.f, pl.size, false, &ds); err != nil {
			err = fmt.Errorf("snapshot: spread log %s: %w", pl.name, err)
			break
		}
		spread = append(spread, pl)
	}
	if len(spread) > 0 {
		if derr := r.makeDurable(&ds); derr != nil {
			err = fmt.Errorf("snapshot: spread: %w", derr)
			spread = nil
		}
	}
	for _, pl := range spread {
		// Removed before its lock goes (with its last reference): a log
		// nobody holds is one left by a crash.
		if rerr := os.Remove(filepath.Join(r.tmp, pl.name)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			// Left in place, it is spread again by the next Open: harmless.
			err = fmt.Errorf("snapshot: remove spread log %s: %w", pl.name, rerr)
		}
		r.mu.Lock()
		r.logs = slices.DeleteFunc(r.logs, func(x *pendingLog) bool { return x == pl })
		r.mu.Unlock()
		r.release(pl)
	}
	r.mu.Lock()
	r.passErr = err
	r.passes++
	close(r.passDone)
	r.passDone = make(chan struct{})
	r.mu.Unlock()
	return err
}

// waitSpread waits until every log of this Repo's published before the
// call is spread, or until a pass that started after the call failed
// (its error), or ctx ends. Without a spreader it returns at once.
func (r *Repo) waitSpread(ctx context.Context) error {
	if r.spread == nil {
		return nil
	}
	r.mu.Lock()
	wanted := slices.Clone(r.logs)
	start := r.passes
	for {
		left := slices.ContainsFunc(r.logs, func(pl *pendingLog) bool { return slices.Contains(wanted, pl) })
		if !left {
			r.mu.Unlock()
			return nil
		}
		if r.passes > start+1 && r.passErr != nil {
			err := r.passErr
			r.mu.Unlock()
			return err
		}
		ch := r.passDone
		r.mu.Unlock()
		r.spread.wake()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
}

// spreadLog spreads the records of the log f, of size bytes, in order,
// and adds their objects to ds, and returns how many it spread. Every
// record is checked against its hash first.
//
// A log of this Repo's (recovering false) must be whole: a record that
// fails its check, or an end short of size, is an error, and nothing of
// the log is lost (it stays, found through the index). A log left by a
// crash (recovering true) is cut at its last good record: its fsync may
// not have completed, and then no checkpoint names what follows.
// Recovering, a loose object already in place is checked too (a crash
// before it was made durable may have left it empty or torn) and
// replaced by the log's copy where it fails.
func (r *Repo) spreadLog(f *os.File, size int64, recovering bool, ds *durableSet) (int, error) {
	s, ok, err := newLogScanner(f, size)
	if err != nil {
		return 0, err
	}
	if !ok {
		if recovering {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: no log header", ErrCorrupt)
	}
	n := 0
	for {
		h, l, ok := s.next()
		if !ok {
			break
		}
		if err := r.spreadRecord(f, h, l, recovering); err != nil {
			if recovering && errors.Is(err, ErrCorrupt) {
				return n, nil
			}
			return n, err
		}
		ds.add(h)
		n++
	}
	if s.err != nil {
		return n, s.err
	}
	if !recovering && s.off != size {
		return n, fmt.Errorf("%w: the log's records end at byte %d of %d", ErrCorrupt, s.off, size)
	}
	return n, nil
}

// spreadRecord checks the record of h at l in the log f and places it
// loose, unless it is there already (recovering: and sound).
func (r *Repo) spreadRecord(f *os.File, h Hash, l loc, recovering bool) error {
	if l.size < smallMax {
		buf, err := r.buffers.get()
		if err != nil {
			return err
		}
		defer r.buffers.put(buf)
		obj := buf[:1+l.size] // the object file's bytes: format, payload
		obj[0] = l.format
		if _, err := f.ReadAt(obj[1:], l.off); err != nil {
			return fmt.Errorf("read record %s: %w", h, err)
		}
		if err := r.checkPayload(bytes.NewReader(obj[1:]), l.format, h); err != nil {
			return err
		}
		return r.placeLoose(h, recovering, func(w io.Writer) error {
			_, err := w.Write(obj)
			return err
		})
	}
	if err := r.checkPayload(io.NewSectionReader(f, l.off, l.size), l.format, h); err != nil {
		return err
	}
	return r.placeLoose(h, recovering, func(w io.Writer) error {
		if _, err := w.Write([]byte{l.format}); err != nil {
			return err
		}
		_, err := io.Copy(w, io.NewSectionReader(f, l.off, l.size))
		return err
	})
}

// checkPayload reads payload, an object's bytes in format, to its end
// and checks them against h. A mismatch, or bytes that do not
// decompress, is an error matching ErrCorrupt.
func (r *Repo) checkPayload(payload io.Reader, format byte, h Hash) error {
	hasher := sha256.New()
	switch format {
	case formatRaw:
		if _, err := io.Copy(hasher, payload); err != nil {
			return fmt.Errorf("read record %s: %w", h, err)
		}
	case formatZstd:
		dec, err := r.decoders.get()
		if err != nil {
			return fmt.Errorf("make zstd decoder: %w", err)
		}
		err = dec.Reset(payload)
		if err == nil {
			_, err = io.Copy(hasher, dec)
		}
		dec.Reset(nil)
		r.decoders.put(dec)
		if err != nil {
			return fmt.Errorf("%w %s: decompress: %v", ErrCorrupt, h, err)
		}
	default:
		return fmt.Errorf("%w %s: unknown format %d", ErrCorrupt, h, format)
	}
	var got Hash
	hasher.Sum(got[:0])
	if got != h {
		return fmt.Errorf("%w %s: its content hashes to %s", ErrCorrupt, h, got)
	}
	return nil
}

// placeLoose writes the object h loose, its file's bytes written by
// fill, unless it is in place already. Recovering, an object in place is
// checked and replaced where it fails. Nothing is fsync'ed here. (Plain
// system calls: a spread of a first build places 100,000 files, and
// os.File's own costs showed.)
func (r *Repo) placeLoose(h Hash, recovering bool, fill func(io.Writer) error) error {
	dst := r.objectPath(h)
	replace := false
	if !recovering {
		var st unix.Stat_t
		if err := unix.Stat(dst, &st); err == nil {
			return nil
		} else if err != unix.ENOENT {
			return fmt.Errorf("stat object %s: %w", h, err)
		}
	} else if src, err := r.openLoose(h); err == nil {
		err := r.checkPayload(src.rd, src.format, h)
		src.close()
		if err == nil {
			return nil
		}
		replace = true
	} else if !errors.Is(err, ErrNotFound) {
		if !errors.Is(err, ErrCorrupt) {
			return err
		}
		replace = true
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := r.tmp + "/obj-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write object %s: %w", h, err)
	}
	err = fill(fdWriter{fd})
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("write object %s: %w", h, err)
	}
	if replace {
		err = unix.Rename(tmp, dst)
	} else {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL { // a filesystem without RENAME_NOREPLACE
			var st unix.Stat_t
			if unix.Stat(dst, &st) == nil {
				err = unix.EEXIST
			} else {
				err = unix.Rename(tmp, dst)
			}
		}
	}
	if err != nil {
		unix.Unlink(tmp)
		if err == unix.EEXIST { // another spreader placed it meanwhile
			return nil
		}
		return fmt.Errorf("place object %s: %w", h, err)
	}
	return nil
}

// fdWriter writes to a file descriptor; the caller closes it.
type fdWriter struct{ fd int }

func (f fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(f.fd, p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}
