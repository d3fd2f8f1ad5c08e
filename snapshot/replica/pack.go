package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"warren/snapshot"
)

// ErrCorrupt is matched (errors.Is) by the error for what the store holds
// that fails its checks: a pack whose head does not hash to its name, is
// not well formed or is cut short, a manifest that does not decode, an
// object that fails its hash (that error matches snapshot.ErrCorrupt
// too, and names the object). The error names the key.
var ErrCorrupt = errors.New("replica: corrupt data in the store")

// The encoding of a pack (packs/<name>):
//
//	head:     packMagic (8 bytes) | count (uint32, little endian)
//	          count entries: hash (32) | kind (1) | size (uint64, little endian)
//	objects:  each entry's object in its stored form (snapshot.RawObject's
//	          Data: format byte and payload), size bytes, in the head's order
//
// The pack is named by the SHA-256 of its head. The head names every
// object's hash and size, so the name commits to the whole pack: each
// object is checked against its hash as it is stored (snapshot.PutRaw),
// and the head against the name. A name known before the objects are
// read lets an upload stream a big object once, and Stat the name before
// sending (an upload resumed after a cut finds the packs it sent). The
// head comes first so that a download learns what a pack holds from its
// first bytes, and stops there when it needs nothing of it.
const (
	packMagic = "wrnpack\x01"
	countSize = 4
	entrySize = 32 + 1 + 8

	// maxEntries bounds a head a reader accepts (41 MiB); a writer puts
	// at most writeEntries in one.
	maxEntries   = 1 << 20
	writeEntries = 1 << 16

	// maxObject bounds an entry's size: far above any file a workspace
	// holds (snapshot's Limits read 16 GiB at most by default); maxPack
	// a whole pack's, so that no sum of sizes overflows.
	maxObject = 1 << 44
	maxPack   = 1 << 46
)

// entry is one object of a pack.
type entry struct {
	hash snapshot.Hash
	kind snapshot.ObjectKind
	size int64 // of its stored form
}

// packHead is a pack's head, decoded.
type packHead struct {
	entries []entry
	bytes   int64 // the whole pack's: head and objects
}

// encodeHead returns the head of a pack of entries, and its name.
func encodeHead(entries []entry) ([]byte, snapshot.Hash) {
	b := make([]byte, 0, len(packMagic)+countSize+len(entries)*entrySize)
	b = append(b, packMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = append(b, e.hash[:]...)
		b = append(b, byte(e.kind))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.size))
	}
	return b, sha256.Sum256(b)
}

// readHead reads the head of the pack name from r, checks it against the
// name and decodes it; r is left at the pack's first object. It returns
// the head's bytes too, for the cache. A head that fails is an error
// wrapping ErrCorrupt; a read error is returned as it is.
func readHead(r io.Reader, name snapshot.Hash) (*packHead, []byte, error) {
	fixed := make([]byte, len(packMagic)+countSize)
	if _, err := io.ReadFull(r, fixed); err != nil {
		return nil, nil, headReadErr(err)
	}
	if string(fixed[:len(packMagic)]) != packMagic {
		return nil, nil, fmt.Errorf("%w: not a pack (its first bytes are %q)", ErrCorrupt, fixed[:len(packMagic)])
	}
	n := binary.LittleEndian.Uint32(fixed[len(packMagic):])
	if n > maxEntries {
		return nil, nil, fmt.Errorf("%w: a head of %d entries, more than %d", ErrCorrupt, n, maxEntries)
	}
	b := make([]byte, len(fixed)+int(n)*entrySize)
	copy(b, fixed)
	if _, err := io.ReadFull(r, b[len(fixed):]); err != nil {
		return nil, nil, headReadErr(err)
	}
	if got := snapshot.Hash(sha256.Sum256(b)); got != name {
		return nil, nil, fmt.Errorf("%w: its head hashes to %s", ErrCorrupt, got)
	}
	h, err := decodeHead(b)
	if err != nil {
		return nil, nil, err
	}
	return h, b, nil
}

// headReadErr is the error for a head that could not be read whole: a
// pack cut short is corrupt; another error is returned as it is.
func headReadErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: the pack ends in its head", ErrCorrupt)
	}
	return fmt.Errorf("read the head: %w", err)
}

// decodeHead decodes a head's bytes, b, checked against its name before.
// It never panics on any input; a fault is an error wrapping ErrCorrupt.
func decodeHead(b []byte) (*packHead, error) {
	fail := func(format string, args ...any) (*packHead, error) {
		return nil, fmt.Errorf("%w: head: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	if len(b) < len(packMagic)+countSize || string(b[:len(packMagic)]) != packMagic {
		return fail("no header")
	}
	n := binary.LittleEndian.Uint32(b[len(packMagic):])
	rest := b[len(packMagic)+countSize:]
	if n > maxEntries || uint64(len(rest)) != uint64(n)*entrySize {
		return fail("%d entries in %d bytes", n, len(rest))
	}
	h := &packHead{entries: make([]entry, n), bytes: int64(len(b))}
	seen := make(map[snapshot.Hash]struct{}, n)
	for i := range h.entries {
		e := &h.entries[i]
		copy(e.hash[:], rest[:32])
		e.kind = snapshot.ObjectKind(rest[32])
		size := binary.LittleEndian.Uint64(rest[33:entrySize])
		rest = rest[entrySize:]
		switch {
		case e.hash.IsZero():
			return fail("entry %d: the zero hash", i)
		case e.kind != snapshot.ObjectTree && e.kind != snapshot.ObjectBlob && e.kind != snapshot.ObjectMap:
			return fail("entry %d: unknown kind %d", i, e.kind)
		case size == 0 || size > maxObject:
			return fail("entry %d: %d bytes", i, size)
		}
		if _, dup := seen[e.hash]; dup {
			return fail("entry %d: %s twice", i, e.hash)
		}
		seen[e.hash] = struct{}{}
		e.size = int64(size)
		if h.bytes += e.size; h.bytes > maxPack {
			return fail("more than %d bytes", int64(maxPack))
		}
	}
	return h, nil
}
