package snapshot

import (
	"errors"
	"fmt"
	"io"
)

// Limits bound the cost of one Build, so that a workspace an agent made
// huge fails its checkpoint quickly, with an error naming the limit,
// instead of holding its writers frozen and a CPU busy for as long as it
// takes to read. Each counts what this build reads, not what the tree
// holds: an incremental build of a huge workspace that changed little
// passes. Zero fields mean the defaults.
type Limits struct {
	// Entries bounds the names a build lists or looks at again (every
	// entry of a folder it walks whole, every changed path of one it
	// updates). Default DefaultMaxEntries.
	Entries int64
	// Depth bounds how deeply folders nest below the root: each one on
	// the way holds a descriptor open while it is walked. Default and
	// most MaxDepth.
	Depth int
	// Bytes bounds the content bytes of the files a build reads. Default
	// DefaultMaxBytes.
	Bytes int64
}

// The defaults of Limits. A million entries is about 100 MiB of a first
// build's index and some seconds of walking; 16 GiB of content is about
// 10 to 30 seconds of hashing and compressing on one core; 512 folders
// deep is 512 descriptors. Ordinary workspaces (a source tree and its
// dependencies) stay far below all three.
const (
	DefaultMaxEntries = 1_000_000
	DefaultMaxBytes   = 16 << 30
	MaxDepth          = 512
)

// WithDefaults returns l with its zero fields set to the defaults, and a
// Depth past MaxDepth brought down to it.
func (l Limits) WithDefaults() Limits {
	if l.Entries <= 0 {
		l.Entries = DefaultMaxEntries
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultMaxBytes
	}
	if l.Depth <= 0 || l.Depth > MaxDepth {
		l.Depth = MaxDepth
	}
	return l
}

// ErrLimit is matched (errors.Is) by the error of a Build that went past
// one of its Limits; errors.As gives the *LimitError.
var ErrLimit = errors.New("snapshot: build limit")

// LimitError says which limit a Build went past.
type LimitError struct {
	Limit string // "entries", "depth" or "bytes"
	Max   int64  // its value
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "depth":
		return fmt.Sprintf("folders nested deeper than the limit of %d", e.Max)
	case "bytes":
		return fmt.Sprintf("more than the limit of %d bytes of file content to read", e.Max)
	}
	return fmt.Sprintf("more than the limit of %d %s to read", e.Max, e.Limit)
}

// Is makes errors.Is(err, ErrLimit) hold.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// countEntries adds n to the entries this build looked at, and fails past
// the limit.
func (b *builder) countEntries(n int) error {
	b.entries += int64(n)
	if b.entries > b.r.limits.Entries {
		return &LimitError{Limit: "entries", Max: b.r.limits.Entries}
	}
	return nil
}

// budgetReader reads a file's content for a build, counting its bytes
// against the build's limit.
type budgetReader struct {
	rd io.Reader
	b  *builder
}

func (r budgetReader) Read(p []byte) (int, error) {
	n, err := r.rd.Read(p)
	r.b.bytes += int64(n)
	if max := r.b.r.limits.Bytes; r.b.bytes > max {
		return n, &LimitError{Limit: "bytes", Max: max}
	}
	return n, err
}
