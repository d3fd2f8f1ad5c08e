package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Kind is what an Entry is.
type Kind uint8

const (
	KindFile Kind = 1 + iota // a regular file; its Hash is the content's blob
	KindLink                 // a symlink; its Hash is the blob of its target
	KindDir                  // a folder; its Hash is a tree
)

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindLink:
		return "link"
	case KindDir:
		return "dir"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Entry is one name of a folder.
type Entry struct {
	Name string
	Kind Kind
	Mode uint32 // permission bits (0o7777) of files and folders; 0 for links
	Size int64  // bytes of a file (its apparent size), length of a link's target; 0 for folders
	Hash Hash   // the blob (file content, or a link's target), the extent map of a sparse file, or the tree

	// Sparse marks a file with holes: Hash names its extent map
	// (sparse.go), which names the blobs of its data, not a blob of its
	// whole content. Only files are sparse.
	Sparse bool
}

// Tree is a folder: its entries, sorted by Name in byte order, each name
// once. A Tree returned by ReadTree is the caller's own.
type Tree []Entry

// Find returns the index of the entry called name, and whether there is
// one; where there is none, the index is where it would go.
func (t Tree) Find(name string) (int, bool) {
	lo, hi := 0, len(t)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t[m].Name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(t) && t[lo].Name == name
}

// counts are the totals of everything below a folder, kept in its tree
// object's header so that an incremental Build can report the totals of
// the whole tree without reading the subtrees it reuses.
type counts struct {
	files, links, dirs, bytes int64
}

// The totals saturate at math.MaxInt64 and never go below 0: sparse
// files of exabytes each (a truncate costs nothing) must not wrap a total
// into one the decoder refuses, which would make the tree unreadable and
// every collection of the repository fail. Totals are statistics; past
// 8 EiB they are only bounds.
func (c *counts) add(o counts) {
	c.files = addSat(c.files, o.files)
	c.links = addSat(c.links, o.links)
	c.dirs = addSat(c.dirs, o.dirs)
	c.bytes = addSat(c.bytes, o.bytes)
}

func (c *counts) sub(o counts) {
	c.files = max(c.files-o.files, 0)
	c.links = max(c.links-o.links, 0)
	c.dirs = max(c.dirs-o.dirs, 0)
	c.bytes = max(c.bytes-o.bytes, 0)
}

// addSat adds two totals of at least 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// The encoding of a tree object:
//
//	"wt" treeVersion                    header
//	uvarint files, links, dirs, bytes   the totals below the folder (counts)
//	uvarint entries                     how many entries follow
//	per entry, in name order:
//	  uvarint len(name), name, kind byte, uvarint mode, uvarint size, 32-byte hash
//
// The kind byte is the Kind, or kindSparseFile for a file with holes
// (Entry.Sparse). Trees without a sparse file are encoded as before that
// kind existed, so their hashes did not change; a tree with one is
// refused by a reader older than it ("unknown kind"), never misread.
//
// Every uvarint is minimal, so that one tree has one encoding (and one
// hash); the decoder refuses anything else, and a tree cut short (the
// count of entries says so) or followed by more bytes.
const (
	treeMagic   = "wt"
	treeVersion = 1
	maxLinkSize = 4096 // PATH_MAX: no symlink target is longer

	// kindSparseFile is the kind byte of a file whose Hash names an
	// extent map (Entry.Sparse).
	kindSparseFile = 4
)

// kindByte is the kind byte that encodes e.
func kindByte(e Entry) byte {
	if e.Sparse {
		return kindSparseFile
	}
	return byte(e.Kind)
}

// encodeTree appends t's encoding to dst. t must be valid.
func encodeTree(dst []byte, t Tree, c counts) []byte {
	dst = append(dst, treeMagic...)
	dst = append(dst, treeVersion)
	dst = binary.AppendUvarint(dst, uint64(c.files))
	dst = binary.AppendUvarint(dst, uint64(c.links))
	dst = binary.AppendUvarint(dst, uint64(c.dirs))
	dst = binary.AppendUvarint(dst, uint64(c.bytes))
	dst = binary.AppendUvarint(dst, uint64(len(t)))
	for _, e := range t {
		dst = binary.AppendUvarint(dst, uint64(len(e.Name)))
		dst = append(dst, e.Name...)
		dst = append(dst, kindByte(e))
		dst = binary.AppendUvarint(dst, uint64(e.Mode))
		dst = binary.AppendUvarint(dst, uint64(e.Size))
		dst = append(dst, e.Hash[:]...)
	}
	return dst
}

// emptyTreeHash is the hash of the tree with no entries.
func emptyTreeHash() Hash { return sum(encodeTree(nil, nil, counts{})) }

// EmptyTree returns the hash of the tree with no entries: an empty folder.
// ReadTree answers it without reading the repository.
func EmptyTree() Hash { return emptyTreeHash() }

// errCorrupt marks a tree encoding that does not decode.
var errCorrupt = errors.New("corrupt tree")

// decoder reads a tree encoding; err is set at the first fault.
type treeDecoder struct {
	b   []byte
	err error
	bad error // what a fault wraps; errCorrupt where nil
}

func (d *treeDecoder) fail(format string, args ...any) {
	if d.err == nil {
		bad := d.bad
		if bad == nil {
			bad = errCorrupt
		}
		d.err = fmt.Errorf("%w: "+format, append([]any{bad}, args...)...)
	}
}

func (d *treeDecoder) uvarint(what string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%s: bad or truncated varint", what)
		return 0
	}
	if n != uvarintLen(v) {
		d.fail("%s: varint not minimal", what)
		return 0
	}
	if v > max {
		d.fail("%s: %d out of range", what, v)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *treeDecoder) bytes(what string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("%s: truncated", what)
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// decodeTree decodes and validates a tree encoding. It never panics on
// any input; a fault is an error wrapping errCorrupt.
func decodeTree(b []byte) (Tree, counts, error) {
	d := treeDecoder{b: b}
	if string(d.bytes("header", len(treeMagic))) != treeMagic {
		d.fail("bad header")
	}
	if v := d.bytes("version", 1); d.err == nil && v[0] != treeVersion {
		d.fail("unknown version %d", v[0])
	}
	var c counts
	c.files = int64(d.uvarint("files", math.MaxInt64))
	c.links = int64(d.uvarint("links", math.MaxInt64))
	c.dirs = int64(d.uvarint("dirs", math.MaxInt64))
	c.bytes = int64(d.uvarint("bytes", math.MaxInt64))
	n := d.uvarint("entries", math.MaxInt32)
	if d.err != nil {
		return nil, counts{}, d.err
	}
	// Each entry takes at least 1+1+1+1+1+32 bytes: bound the allocation
	// by what the input can hold.
	t := make(Tree, 0, min(int(n), len(d.b)/37))
	for range n {
		var e Entry
		nameLen := d.uvarint("name length", 255)
		e.Name = string(d.bytes("name", int(nameLen)))
		if k := d.bytes("kind", 1); d.err == nil {
			e.Kind = Kind(k[0])
			if k[0] == kindSparseFile {
				e.Kind, e.Sparse = KindFile, true
			}
		}
		e.Mode = uint32(d.uvarint("mode", 0o7777))
		e.Size = int64(d.uvarint("size", math.MaxInt64))
		copy(e.Hash[:], d.bytes("hash", len(e.Hash)))
		if d.err != nil {
			break
		}
		if err := checkEntry(e); err != nil {
			d.fail("%v", err)
			break
		}
		if len(t) > 0 && t[len(t)-1].Name >= e.Name {
			d.fail("name %q after %q: not sorted or not unique", e.Name, t[len(t)-1].Name)
			break
		}
		t = append(t, e)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the last entry", len(d.b))
	}
	if d.err != nil {
		return nil, counts{}, d.err
	}
	return t, c, nil
}

// checkEntry validates one entry on its own.
func checkEntry(e Entry) error {
	if !validName(e.Name) {
		return fmt.Errorf("bad name %q", e.Name)
	}
	if e.Sparse && e.Kind != KindFile {
		return fmt.Errorf("%s %q: only a file can be sparse", e.Kind, e.Name)
	}
	switch e.Kind {
	case KindFile:
		if e.Mode > 0o7777 || e.Size < 0 {
			return fmt.Errorf("file %q: bad mode %o or size %d", e.Name, e.Mode, e.Size)
		}
	case KindLink:
		if e.Mode != 0 || e.Size <= 0 || e.Size > maxLinkSize {
			return fmt.Errorf("link %q: bad mode %o or size %d", e.Name, e.Mode, e.Size)
		}
	case KindDir:
		if e.Mode > 0o7777 || e.Size != 0 {
			return fmt.Errorf("folder %q: bad mode %o or size %d", e.Name, e.Mode, e.Size)
		}
	default:
		return fmt.Errorf("entry %q: unknown kind %d", e.Name, e.Kind)
	}
	return nil
}

// validName reports whether name can be one entry of a folder: not empty,
// not "." or "..", no "/" or NUL, at most 255 bytes.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 &&
		!strings.ContainsAny(name, "/\x00")
}

// contribution is what one entry adds to its folder's counts, given the
// counts below it for a folder.
func contribution(e Entry, below counts) counts {
	switch e.Kind {
	case KindFile:
		return counts{files: 1, bytes: e.Size}
	case KindLink:
		return counts{links: 1}
	case KindDir:
		below.dirs++
		return below
	}
	return counts{}
}
