package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Hash names an object: the SHA-256 of its uncompressed bytes. The zero
// Hash names no object; where a tree is expected (a Build's base, Diff's
// sides) it stands for the empty tree.
type Hash [32]byte

// String returns the hash in lowercase hex, as ParseHash reads it and as
// the object's file is named.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero Hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash reads a hash written by String: exactly 64 lowercase hex
// digits, nothing else.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return Hash{}, fmt.Errorf("snapshot: parse hash %q: want %d hex digits, got %d characters", s, 2*len(h), len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Hash{}, fmt.Errorf("snapshot: parse hash %q: byte %d is not a lowercase hex digit", s, i)
		}
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("snapshot: parse hash %q: %w", s, err)
	}
	return h, nil
}

// sum hashes an object's uncompressed bytes.
func sum(data []byte) Hash { return sha256.Sum256(data) }
