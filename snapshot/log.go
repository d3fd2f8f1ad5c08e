package snapshot

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A build log holds the new objects of one Build, in the order written:
//
//	header:  logMagic (8 bytes)
//	record:  hash (32) | format (1) | size (8, little-endian) | payload (size)
//
// The payload is what an object file holds after its format byte. The
// log is tmp/log-<16 hex>, flocked LOCK_EX by its owner for its whole
// life: from before its first record until it is removed, spread. A log
// nobody holds locked was left by a crash (see recover.go).
const (
	logPrefix    = "log-"
	logMagic     = "wrnlog\x00\x01"
	recordHeader = 32 + 1 + 8

	// logBuffer is the size of a log's write buffer: a build's small
	// objects go to the disk in writes this large.
	logBuffer = 1 << 20
)

// loc is where an object's payload lies in a log.
type loc struct {
	off    int64 // of the payload
	size   int64 // of the payload
	format byte
}

// isLogName reports whether name, in tmp/, is a build log's.
func isLogName(name string) bool { return strings.HasPrefix(name, logPrefix) }

// logWriter appends one build's objects to its log. One goroutine uses it.
type logWriter struct {
	f    *os.File
	name string // in tmp/
	bw   *bufio.Writer
	off  int64        // the end of what was written, buffered or not
	recs map[Hash]loc // the records written
}

// createLog makes a new log in tmp/ and locks it. A process that lists
// tmp/ between the make and the lock may take the log for one left by a
// crash and remove it (holding its lock): so once locked, the log must
// still be the file of its name, or it is made again under another.
func (r *Repo) createLog() (*logWriter, error) {
	for tries := 0; ; tries++ {
		var rnd [8]byte
		rand.Read(rnd[:])
		name := logPrefix + hex.EncodeToString(rnd[:])
		path := filepath.Join(r.tmp, name)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("make log: %w", err)
		}
		ok, err := lockedAsNamed(f, path)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("make log %s: %w", name, err)
		}
		if !ok {
			f.Close()
			if tries >= 8 {
				return nil, fmt.Errorf("make log: taken away %d times", tries+1)
			}
			continue
		}
		w := &logWriter{f: f, name: name, bw: bufio.NewWriterSize(f, logBuffer), recs: make(map[Hash]loc)}
		w.bw.WriteString(logMagic)
		w.off = int64(len(logMagic))
		return w, nil
	}
}

// lockedAsNamed takes f's flock exclusive without waiting and reports
// whether it got it while path still names f's file. It returns false,
// holding nothing, where another holds the lock or where the file was
// removed or replaced meanwhile (by one that held the lock: a log is
// removed only under its lock).
func lockedAsNamed(f *os.File, path string) (bool, error) {
	fd := int(f.Fd())
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EWOULDBLOCK {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("flock: %w", err)
		}
		break
	}
	var mine, named unix.Stat_t
	if err := fstat(fd, &mine); err != nil {
		unix.Flock(fd, unix.LOCK_UN)
		return false, fmt.Errorf("stat: %w", err)
	}
	err := unix.Stat(path, &named)
	if err != nil || mine.Ino != named.Ino || mine.Dev != named.Dev || mine.Nlink == 0 {
		unix.Flock(fd, unix.LOCK_UN)
		if err != nil && err != unix.ENOENT {
			return false, fmt.Errorf("stat: %w", err)
		}
		return false, nil
	}
	return true, nil
}

// putHeader encodes a record's header.
func putHeader(b []byte, h Hash, format byte, size int64) []byte {
	b = append(b, h[:]...)
	b = append(b, format)
	return binary.LittleEndian.AppendUint64(b, uint64(size))
}

// add appends the object h, whose payload is payload, and returns the
// bytes it adds to the log.
func (w *logWriter) add(h Hash, format byte, payload []byte) (int64, error) {
	var hdr [recordHeader]byte
	w.bw.Write(putHeader(hdr[:0], h, format, int64(len(payload))))
	if _, err := w.bw.Write(payload); err != nil {
		return 0, fmt.Errorf("write log %s: %w", w.name, err)
	}
	w.recs[h] = loc{off: w.off + recordHeader, size: int64(len(payload)), format: format}
	w.off += recordHeader + int64(len(payload))
	return recordHeader + int64(len(payload)), nil
}

// begin starts a record whose hash and size are known only at its end
// (a streamed file): it writes a header of zeros, which a crash leaves as
// the end of the log, and returns the writer for the payload. Call end
// or drop after.
func (w *logWriter) begin() (start int64, payload *countWriter) {
	var hdr [recordHeader]byte
	w.bw.Write(hdr[:])
	start = w.off
	w.off += recordHeader
	return start, &countWriter{w: w.bw}
}

// end writes the header of the record begun at start, of the object h
// with its payload of size bytes.
func (w *logWriter) end(start int64, h Hash, format byte, size int64) error {
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("write log %s: %w", w.name, err)
	}
	var hdr [recordHeader]byte
	if _, err := w.f.WriteAt(putHeader(hdr[:0], h, format, size), start); err != nil {
		return fmt.Errorf("write log %s: %w", w.name, err)
	}
	w.recs[h] = loc{off: start + recordHeader, size: size, format: format}
	w.off = start + recordHeader + size
	return nil
}

// drop forgets the record begun at start (its object was found in place
// meanwhile): the log is cut back to start.
func (w *logWriter) drop(start int64) error {
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("write log %s: %w", w.name, err)
	}
	if err := w.f.Truncate(start); err != nil {
		return fmt.Errorf("cut log %s: %w", w.name, err)
	}
	if _, err := w.f.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("cut log %s: %w", w.name, err)
	}
	w.off = start
	return nil
}

// commit makes the log durable: its content, then its name in tmp/
// (tmpFd). This is the build's durability point.
func (w *logWriter) commit(tmpFd int) error {
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("write log %s: %w", w.name, err)
	}
	if err := fdatasync(int(w.f.Fd())); err != nil {
		return fmt.Errorf("sync log %s: %w", w.name, err)
	}
	if err := fsyncFd(tmpFd); err != nil {
		return fmt.Errorf("sync tmp for log %s: %w", w.name, err)
	}
	return nil
}

// abort removes the log of a build that failed: no tree names its
// objects, and no other build found them (they are published only once
// durable). Its lock goes with its descriptor, after the removal.
func (w *logWriter) abort(tmp string) {
	os.Remove(filepath.Join(tmp, w.name))
	w.f.Close()
}

// logScanner reads the records of a log in order, from its header on. It
// stops at the first record that does not fit in the file or is not well
// formed (a zero hash, an unknown format): the end of the log, or where a
// crash cut it. It does not check payloads against their hashes.
type logScanner struct {
	ra   io.ReaderAt
	size int64 // of the file
	off  int64 // of the next record
	err  error // a read error; not set for a log's end

	buf    []byte
	bufOff int64 // of buf[0] in the file
}

// newLogScanner starts reading ra, a log of size bytes, at its first
// record. ok is false where it has no (whole) header.
func newLogScanner(ra io.ReaderAt, size int64) (s *logScanner, ok bool, err error) {
	var magic [len(logMagic)]byte
	if size < int64(len(magic)) {
		return nil, false, nil
	}
	if _, err := ra.ReadAt(magic[:], 0); err != nil {
		return nil, false, fmt.Errorf("read log header: %w", err)
	}
	if string(magic[:]) != logMagic {
		return nil, false, nil
	}
	return &logScanner{ra: ra, size: size, off: int64(len(magic))}, true, nil
}

// resumeLogScanner continues a scan at off (the end of the records read before)
// in a file now of size bytes.
func resumeLogScanner(ra io.ReaderAt, off, size int64) *logScanner {
	return &logScanner{ra: ra, size: size, off: off}
}

// scanWindow is how much of a log the scanner reads at once: the headers
// of the small records around it come with one read.
const scanWindow = 256 << 10

// next returns the next record, or ok false at the log's end (or a read
// error, in s.err).
func (s *logScanner) next() (h Hash, l loc, ok bool) {
	if s.err != nil || s.off+recordHeader > s.size {
		return Hash{}, loc{}, false
	}
	if s.off < s.bufOff || s.off+recordHeader > s.bufOff+int64(len(s.buf)) {
		n := min(int64(scanWindow), s.size-s.off)
		if cap(s.buf) < int(n) {
			s.buf = make([]byte, n)
		}
		s.buf = s.buf[:n]
		m, err := s.ra.ReadAt(s.buf, s.off)
		s.buf, s.bufOff = s.buf[:m], s.off
		if err != nil && err != io.EOF {
			s.err = fmt.Errorf("read log: %w", err)
			return Hash{}, loc{}, false
		}
		if m < recordHeader {
			return Hash{}, loc{}, false // cut since its size was taken
		}
	}
	hdr := s.buf[s.off-s.bufOff:][:recordHeader]
	copy(h[:], hdr)
	format := hdr[32]
	size := binary.LittleEndian.Uint64(hdr[33:])
	start := s.off + recordHeader
	if h.IsZero() || format != formatRaw && format != formatZstd || size > uint64(s.size-start) {
		return Hash{}, loc{}, false
	}
	s.off = start + int64(size)
	return h, loc{off: start, size: int64(size), format: format}, true
}
