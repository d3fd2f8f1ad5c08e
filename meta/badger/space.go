package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"warren/meta"
)

// A full disk and Badger. Badger writes its write-ahead log (the memtable's
// .mem file) and the tables it flushes and compacts through mmap'd files
// that it sizes with ftruncate, so their blocks are allocated only when a
// page is first written. On a full disk that write has no error to return:
// the kernel sends SIGBUS and the process dies; and it dies again at every
// start, since an open writes the header of a new log file and flushes
// the logs it replayed. (A read-only open is no way out: Badger refuses it
// for a log that a crash left untruncated.) So:
//
//   - The store keeps a ballast: a file of BallastBytes in its folder,
//     with its blocks allocated (fallocate). Nothing else can take that
//     room. Open and Close, the two steps that must write whatever the
//     disk looks like, first give it up when the disk is nearly full, so
//     that Badger's new log and flushes land in it; at those moments
//     warren's own writers (the workspaces' mounts) are not being served.
//   - A write (update) checks the free space first and refuses with
//     ErrNoSpace below MinFreeBytes, or while the ballast is gone and the
//     disk has not room for it again; once it has, the write makes the
//     ballast again and goes on. The check holds the write turn, so no
//     write of this store runs between it and the write.
//
// Reads never need space. What this cannot stop is a third party that
// fills the last MinFreeBytes while Badger flushes or compacts in the
// background; the workspaces' reserve (docs/operations.md) keeps warren's
// own threads from doing that.

const (
	// MinFreeBytes is the free space (for unprivileged users: statfs
	// f_bavail) below which the Badger store refuses writes: room for a
	// memtable flush (8 MiB) and more.
	MinFreeBytes = 16 << 20
	// BallastBytes is the size of the ballast, the room an open or close
	// on a full disk writes into: a new log file's first page and the
	// flush of both memtables (NumMemtables 2, 8 MiB each), with margin.
	BallastBytes = 32 << 20
	ballastName  = "warren-ballast"
)

// freeBytes is the space left on dir's filesystem for unprivileged
// writers. Root could use ext4's reserved blocks too; they are left to
// whatever else on the machine needs them. A folder not made yet is on
// its nearest existing parent's filesystem.
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	for p := dir; ; p = filepath.Dir(p) {
		err := unix.Statfs(p, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		}
		if !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return 0, fmt.Errorf("meta: free space of %s: %w", dir, err)
		}
	}
}

// spaceError is the refusal of a write with free bytes left.
func (s *Store) spaceError(free uint64, why string) error {
	return fmt.Errorf("%w: %d bytes free on the disk of %s, %s (%w)", meta.ErrNoSpace, free, s.dir, why, syscall.ENOSPC)
}

func (s *Store) ballastPath() string { return filepath.Join(s.dir, ballastName) }

// makeBallast allocates the ballast file. A filesystem without fallocate
// gets it written with zeros.
func (s *Store) makeBallast() error {
	path := s.ballastPath()
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("meta: make ballast: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, BallastBytes)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = nil
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < BallastBytes && err == nil; off += int64(len(zeros)) {
			_, err = f.WriteAt(zeros, off)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Renamed into place whole: a ballast file is never a short one.
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("meta: make ballast: %w", err)
	}
	return nil
}

// hasBallast says whether the ballast is in place.
func (s *Store) hasBallast() bool {
	fi, err := os.Stat(s.ballastPath())
	return err == nil && fi.Size() >= BallastBytes
}

// releaseBallast gives the ballast's room back to the filesystem.
func (s *Store) releaseBallast(why string) {
	if err := os.Remove(s.ballastPath()); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Error("release the ballast", "error", err)
		}
		return
	}
	s.log.Warn("disk nearly full: ballast released for the metadata store; writes are refused until space is freed",
		"dir", s.dir, "step", why)
}

// prepareOpen readies the folder for Badger's open: room on the disk
// (roomToOpen) and no empty log file a crash left (dropEmptyLogFiles).
// Both run under the folder's lock, the one Badger takes for itself, so a
// second opener of a store another process holds touches nothing of it
// (neither its ballast nor its logs); Badger's open then refuses it.
func (s *Store) prepareOpen() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("meta: create %s: %w", s.dir, err)
	}
	fd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("meta: open %s: %w", s.dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // held: Badger's open says so
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	if err := s.roomToOpen(); err != nil {
		return err
	}
	return dropEmptyLogFiles(s.dir, s.log)
}

// roomToOpen makes sure Badger's open has room: it makes the ballast if
// the disk has room for it, and gives it up if the disk is nearly full.
// A store is never created on a full disk.
//
// The folder's lock must be held (prepareOpen).
func (s *Store) roomToOpen() error {
	free, err := freeBytes(s.dir)
	if err != nil {
		return err
	}
	switch {
	case free >= MinFreeBytes+BallastBytes && !s.hasBallast():
		return s.makeBallast()
	case free < MinFreeBytes:
		if !s.hasBallast() {
			return s.spaceError(free, fmt.Sprintf("below the %d its open needs, and no ballast", MinFreeBytes))
		}
		s.releaseBallast("open")
	}
	return nil
}

// roomToClose gives up the ballast before Badger's close (which flushes
// the memtable into a new mmap'd table) when the disk is nearly full.
func (s *Store) roomToClose() {
	if free, err := freeBytes(s.dir); err != nil || free < MinFreeBytes {
		s.releaseBallast("close")
	}
}

// checkSpace refuses a write unless the disk has MinFreeBytes free and the
// ballast is in place, making the ballast again first if the disk has room
// for it. An error of statfs refuses too. The write turn must be held.
func (s *Store) checkSpace() error {
	free, err := freeBytes(s.dir)
	if err != nil {
		return err
	}
	if !s.hasBallast() {
		if free < MinFreeBytes+BallastBytes {
			return s.spaceError(free, fmt.Sprintf("below the %d it needs to make its ballast again", MinFreeBytes+BallastBytes))
		}
		if err := s.makeBallast(); err != nil {
			return err
		}
		s.log.Info("space is back: ballast made again; the metadata store takes writes", "dir", s.dir)
		return nil
	}
	if free < MinFreeBytes {
		return s.spaceError(free, fmt.Sprintf("below the %d it keeps for its own files", MinFreeBytes))
	}
	return nil
}
