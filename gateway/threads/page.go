package threads

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
)

// The paging of GET /v1/threads: what ?limit= and ?cursor= may be.
//
// A cursor is the key of the last binding of a page, which the next page
// starts after. It is opaque to clients but not secret: it is
// base64url (unpadded) of a version byte, the tenant's length as a
// uvarint, the tenant and the thread. A client can forge one, which
// gains it nothing (the listing shows the same bindings to every peer
// allowed on the socket, and a cursor only says where to start), so it
// is not signed; it is checked as any id from a client is: its length
// before it is decoded, then its encoding, then both ids as threadKey
// checks a path's.

// CursorVersion is the first byte of every cursor: a later layout gets
// another, and an old cursor is refused rather than misread.
const CursorVersion = 1

// MaxCursorBytes bounds a cursor as sent: the encoding of two ids of
// api.MaxIDBytes each, with the version and the length.
var MaxCursorBytes = base64.RawURLEncoding.EncodedLen(1 + binary.MaxVarintLen64 + 2*api.MaxIDBytes)

// EncodeCursor is the cursor of a page whose last binding is k.
func EncodeCursor(k meta.ThreadKey) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(k.Tenant)+len(k.Thread))
	b = append(b, CursorVersion)
	b = binary.AppendUvarint(b, uint64(len(k.Tenant)))
	b = append(b, k.Tenant...)
	b = append(b, k.Thread...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor is the inverse of EncodeCursor, for a cursor a client
// sent. Every way a cursor can be wrong is an api.ErrInvalid that says
// which, without echoing the cursor.
func DecodeCursor(c string) (meta.ThreadKey, error) {
	bad := func(why string, args ...any) (meta.ThreadKey, error) {
		return meta.ThreadKey{}, fmt.Errorf("%w: malformed cursor (pass nextCursor from the previous page as it is): %s", api.ErrInvalid, fmt.Sprintf(why, args...))
	}
	if c == "" {
		return bad("empty")
	}
	if len(c) > MaxCursorBytes {
		return bad("%d bytes, more than %d", len(c), MaxCursorBytes)
	}
	// Strict: a cursor has one spelling, so trailing bits must be zero.
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return bad("not unpadded base64url")
	}
	if len(b) == 0 || b[0] != CursorVersion {
		return bad("unknown version")
	}
	n, size := binary.Uvarint(b[1:])
	if size <= 0 {
		return bad("bad tenant length")
	}
	rest := b[1+size:]
	if n == 0 || n > uint64(len(rest)) {
		return bad("tenant length %d out of range", n)
	}
	tenant, thread := string(rest[:n]), string(rest[n:])
	// threadKey applies the ids' rules (length, UTF-8, a thread); a stored
	// tenant is never empty, the default having been applied.
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return bad("%v", err)
	}
	return k, nil
}

// pageQuery reads ?limit= and ?cursor= of q: the page's size
// (api.ThreadsPageDefault when absent) and the key it starts after (nil
// when absent: the first page).
func pageQuery(q url.Values) (limit int, after *meta.ThreadKey, err error) {
	limit = api.ThreadsPageDefault
	if vs, ok := q["limit"]; ok {
		n, err := strconv.Atoi(vs[0])
		if err != nil || n < 1 || n > api.ThreadsPageMax {
			return 0, nil, fmt.Errorf("%w: limit %s: want a whole number from 1 to %d", api.ErrInvalid, call.Quote(vs[0]), api.ThreadsPageMax)
		}
		limit = n
	}
	if vs, ok := q["cursor"]; ok {
		k, err := DecodeCursor(vs[0])
		if err != nil {
			return 0, nil, err
		}
		after = &k
	}
	return limit, after, nil
}
