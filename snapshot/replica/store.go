package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrNotFound is matched (errors.Is) by the error for a key the store
// does not hold.
var ErrNotFound = errors.New("replica: not found in the store")

// errBadKey is matched by the error for a key (or a List prefix) that
// breaks the key rule (validKey).
var errBadKey = errors.New("not a valid key")

// Store is where the copies go: a flat space of immutable blobs by key.
// Keys are "/"-separated paths whose elements are letters, digits, '-',
// '_' and '.', none empty nor starting with '.' (so "..", "." and hidden
// names are refused), 1024 bytes at most; every implementation refuses
// the others alike, so that a key good for one is good for all.
// Implementations are safe for use by several goroutines at once.
type Store interface {
	// Put stores size bytes read from r under key, replacing what is
	// there, all or nothing: a reader that fails, or that holds more or
	// fewer than size bytes, leaves the key as it was. Durable on return.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens what key holds. A missing key is an error matching
	// ErrNotFound. Close the reader when done.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat says what key holds: its size and when it was put; a missing
	// key is an error matching ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// List calls fn with every key that begins with prefix (and what it
	// holds, as Stat says), in no particular order; an error fn returns
	// stops it and is returned.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// Info is what a store says of a key.
type Info struct {
	Key  string
	Size int64
	// ModTime is when the key was last put, by the store's clock (the S3
	// server's, the file system's): a collection (Sweep) tells by it the
	// packs an upload may be writing, and an upload the packs it must put
	// again rather than reuse (UploadOptions.Refresh).
	ModTime time.Time
}

// maxKey bounds a key's length: S3's own bound.
const maxKey = 1024

// validKey reports whether key follows the key rule of Store. prefix
// allows what a List prefix may be besides a key: "" and a trailing "/".
func validKey(key string, prefix bool) bool {
	if len(key) > maxKey || key == "" && !prefix {
		return false
	}
	elems := strings.Split(key, "/")
	for i, e := range elems {
		last := i == len(elems)-1
		if e == "" {
			if prefix && last {
				continue
			}
			return false
		}
		if e[0] == '.' {
			return false
		}
		for j := 0; j < len(e); j++ {
			c := e[j]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
				return false
			}
		}
	}
	return true
}

// checkKey returns an error for a key that breaks the key rule.
func checkKey(key string) error {
	if !validKey(key, false) {
		return fmt.Errorf("key %q: %w", key, errBadKey)
	}
	return nil
}

// checkPrefix returns an error for a List prefix that breaks the key
// rule.
func checkPrefix(prefix string) error {
	if !validKey(prefix, true) {
		return fmt.Errorf("prefix %q: %w", prefix, errBadKey)
	}
	return nil
}

// exactReader reads exactly size bytes from r: an end before is
// io.ErrUnexpectedEOF, a byte more an error. It reads r to its end, so a
// reader that checks what it read at its end (snapshot.OpenRaw's) says
// so before a Put completes.
type exactReader struct {
	r    io.Reader
	left int64
	err  error // sticky
}

// errLonger is the error of an exactReader whose reader holds more than
// its size.
var errLonger = errors.New("more bytes than the size given")

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left == 0 {
		e.err = e.atEnd()
		return 0, e.err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	switch {
	case err == io.EOF && e.left > 0:
		e.err = io.ErrUnexpectedEOF
	case err == io.EOF:
		e.err = io.EOF
	case err != nil:
		e.err = err
	case e.left == 0:
		// Ask for the end now: the caller may stop at size bytes.
		e.err = e.atEnd()
	}
	return n, e.err
}

// atEnd reads r once more, expecting its end.
func (e *exactReader) atEnd() error {
	var probe [1]byte
	for {
		n, err := e.r.Read(probe[:])
		if n > 0 {
			return errLonger
		}
		if err != nil {
			return err // io.EOF, or what the reader found at its end
		}
	}
}
