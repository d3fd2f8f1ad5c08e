package threads

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"warren/api"
	"warren/meta"
)

// ErrOutsideBase means a computed workspace path would not sit exactly two
// levels below its base folder. With the encoding below this cannot happen;
// the check is there so that a future bug refuses instead of escaping.
var ErrOutsideBase = errors.New("gateway: path leaves the base folder")

const (
	// maxShortEncoding is the longest encoding kept whole. Longer ones are
	// shortened to a prefix plus a hash, so that every component stays far
	// below the 255-byte name limit of Linux filesystems.
	maxShortEncoding = 200
	// longPrefix bounds the readable prefix kept in a shortened encoding:
	// prefix + "~" + 64 hex digits is at most 193 bytes.
	longPrefix = 128
)

// WorkspaceRoot returns the folder of thread (tenant, thread) below base:
// base/<enc(tenant)>/<enc(thread)>. The empty tenant means DefaultTenant, so
// "" and "default" name the same tenant; every other pair of ids gets its
// own folder (see EncodeID).
//
// base must be absolute and clean. WorkspaceRoot never clamps: if the result
// were not exactly two components below base it returns an error wrapping
// ErrOutsideBase. It does not touch the disk.
func WorkspaceRoot(base, tenant, thread string) (string, error) {
	if !filepath.IsAbs(base) || filepath.Clean(base) != base {
		return "", fmt.Errorf("workspace root: base %q is not an absolute clean path", base)
	}
	if tenant == "" {
		tenant = api.DefaultTenant
	}
	t, th := EncodeID(tenant), EncodeID(thread)
	p := filepath.Join(base, t, th)

	// Defense in depth: the encoding already rules out "/", "." and "..",
	// but a refusal here costs nothing and keeps a future change honest.
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return "", fmt.Errorf("workspace root of %q/%q: %w: %v", tenant, thread, ErrOutsideBase, err)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 2 || parts[0] != t || parts[1] != th {
		return "", fmt.Errorf("workspace root of %q/%q: %w", tenant, thread, ErrOutsideBase)
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || len(c) > 255 {
			return "", fmt.Errorf("workspace root of %q/%q: component %q: %w", tenant, thread, c, ErrOutsideBase)
		}
	}
	return p, nil
}

// EncodeID turns one client id into one path component.
//
// Bytes in [a-z0-9_-] stay as they are, and so does '.' except as the first
// byte; every other byte (upper case, '/', '\\', '%', '~', NUL, each byte of
// a non-ASCII rune, a leading '.') becomes "%xx" in lower-case hex. Upper
// case is escaped so that ids differing only in case stay apart on
// case-insensitive filesystems too. The encoding is injective and never
// yields "." or "..", a '/', or an empty name:
//
//   - The empty id becomes a lone "%", which no other id produces (every
//     other '%' is followed by two hex digits).
//   - An encoding longer than maxShortEncoding bytes becomes a prefix of it,
//     cut between tokens, then '~', then the hex SHA-256 of the raw id. A
//     short encoding never contains '~' (it is escaped), so long and short
//     forms never meet, and two long forms are equal only if the SHA-256 of
//     two different ids collide: injective up to SHA-256.
func EncodeID(id string) string {
	if id == "" {
		return "%"
	}
	const hexdigits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(id))
	// cut remembers the last token boundary at or below longPrefix bytes, in
	// case the encoding turns out too long.
	cut := 0
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&0xf])
		}
		if b.Len() <= longPrefix {
			cut = b.Len()
		}
	}
	enc := b.String()
	if len(enc) <= maxShortEncoding {
		return enc
	}
	sum := sha256.Sum256([]byte(id))
	return enc[:cut] + "~" + hex.EncodeToString(sum[:])
}

// RootOf returns the backing folder of a binding: its recorded root if
// that is a workspace root of the binding's ids, in this gateway's
// workspaces folder or in one named "workspaces" (a thread taken over from
// another host keeps its folder there), else this gateway's own root for
// the ids. A root read from the store is trusted only in that shape, so a
// damaged record cannot make a delete remove anything else.
func (t *Threads) RootOf(b meta.Binding) (string, error) {
	if b.Root != "" && filepath.IsAbs(b.Root) {
		base := filepath.Dir(filepath.Dir(b.Root))
		if filepath.Base(base) == "workspaces" || base == t.wsBase {
			if want, err := WorkspaceRoot(base, b.Tenant, b.Thread); err == nil && want == filepath.Clean(b.Root) {
				return want, nil
			}
		}
	}
	root, _, err := t.Paths(b.ThreadKey)
	return root, err
}
