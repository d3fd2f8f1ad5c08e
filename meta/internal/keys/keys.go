// Package keys is the key layout of the metadata store, shared by both
// engines (warren/meta/badger and warren/meta/etcd), which order keys byte
// by byte: Badger stores these keys as they are; etcd stores the same keys
// after the store's etcd.Config.Prefix, so several deployments share a
// cluster. It is internal to meta: the layout is how the backends keep
// records on disk, not part of the Store interface, and no caller outside
// meta may depend on it.
//
//	binding/<component(tenant)><component(thread)>    a Binding, as JSON
//	imount/<path>                                     an InspectionMount, as JSON (with its
//	                                                  thread key also encoded as two components)
//	job/<component(tenant)><component(thread)><seq>   a Job, as JSON; seq is uint64 big-endian
//	jobseq/<component(tenant)><component(thread)>     a thread's job counter: in Badger a
//	                                                  uint64 big-endian; in etcd an empty value,
//	                                                  the count being the key's etcd version
//	host/<id>                                         a Host's lease record, as JSON
//	pin/<component(tenant)><component(thread)>        a thread's Pin, as JSON
//	history/<component(tenant)><component(thread)>    a thread's History, as JSON
//	claim/<name>                                      a Claim, as JSON
//	sys/rev                                           Badger only: the revision counter, uint64
//	                                                  big-endian (etcd has revisions of its own)
//
// The Revision inside a stored JSON value is Badger's; etcd stores zero
// there and reads a record's revision from the key's ModRevision.
//
// Tenant and thread ids come from clients and may hold any bytes, so they
// cannot simply be joined with a separator: ("a/b", "c") and ("a", "b/c")
// must stay apart, and so must ids with NUL, empty ids and ids that are not
// UTF-8. Each id is written as a component: every 0x00 byte becomes
// 0x00 0xFF and the component ends with 0x00 0x01. This is injective, and it
// keeps order: the terminator sorts below every byte that can follow inside
// an id (an escaped NUL or any non-zero byte), so comparing two keys byte by
// byte compares (tenant, thread) pairs the way Go compares strings. A range
// scan over binding/ therefore yields bindings ordered by tenant then
// thread, with no sorting in memory. A length prefix would also be
// injective, but it orders by length first.
//
// A tenant's history keys share the prefix history/<component(tenant)>
// (Histories): the component is terminated, so tenant "a" does not match
// the keys of tenant "a/b" or "a\x00", and a range scan over it yields
// the tenant's histories ordered by thread.
//
// An inspection mount key has a single component, the path, so the raw
// bytes are enough and the order is the path's.
package keys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"warren/meta"
)

// Prefixes of the record kinds, and the one key of the revision counter.
const (
	BindingPrefix = "binding/"
	MountPrefix   = "imount/"
	JobPrefix     = "job/"
	JobSeqPrefix  = "jobseq/"
	HostPrefix    = "host/"
	PinPrefix     = "pin/"
	HistoryPrefix = "history/"
	ClaimPrefix   = "claim/"
	Rev           = "sys/rev"
)

const (
	escByte  = 0x00
	escNUL   = 0xFF // escByte escNUL stands for a NUL inside an id
	escEnd   = 0x01 // escByte escEnd ends a component
	endBytes = 2
)

// ErrBadKey means a stored key does not follow the layout; it points at a
// corrupt store or a bug, never at a client's input.
var ErrBadKey = errors.New("malformed key")

// appendComponent appends s to dst as one escaped, terminated component.
func appendComponent(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			dst = append(dst, escByte, escNUL)
			continue
		}
		dst = append(dst, s[i])
	}
	return append(dst, escByte, escEnd)
}

// readComponent decodes the component at the start of b and returns it with
// the bytes that follow it.
func readComponent(b []byte) (s string, rest []byte, err error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != escByte {
			out = append(out, b[i])
			continue
		}
		if i+1 == len(b) {
			return "", nil, fmt.Errorf("%w: escape at end of key", ErrBadKey)
		}
		switch b[i+1] {
		case escNUL:
			out = append(out, escByte)
			i++
		case escEnd:
			return string(out), b[i+endBytes:], nil
		default:
			return "", nil, fmt.Errorf("%w: bad escape 0x%02x", ErrBadKey, b[i+1])
		}
	}
	return "", nil, fmt.Errorf("%w: unterminated component", ErrBadKey)
}

// AppendThreadKey appends k to dst as two components, tenant then thread.
func AppendThreadKey(dst []byte, k meta.ThreadKey) []byte {
	return appendComponent(appendComponent(dst, k.Tenant), k.Thread)
}

// ParseThreadKey is the inverse of AppendThreadKey; b must hold nothing
// else.
func ParseThreadKey(b []byte) (meta.ThreadKey, error) {
	tenant, rest, err := readComponent(b)
	if err != nil {
		return meta.ThreadKey{}, fmt.Errorf("tenant: %w", err)
	}
	thread, rest, err := readComponent(rest)
	if err != nil {
		return meta.ThreadKey{}, fmt.Errorf("thread: %w", err)
	}
	if len(rest) != 0 {
		return meta.ThreadKey{}, fmt.Errorf("%w: %d trailing bytes", ErrBadKey, len(rest))
	}
	return meta.ThreadKey{Tenant: tenant, Thread: thread}, nil
}

// Binding returns the store key of the binding for k.
func Binding(k meta.ThreadKey) []byte {
	key := make([]byte, 0, len(BindingPrefix)+len(k.Tenant)+len(k.Thread)+2*endBytes)
	return AppendThreadKey(append(key, BindingPrefix...), k)
}

// ParseBinding is the inverse of Binding.
func ParseBinding(key []byte) (meta.ThreadKey, error) {
	return parseThreadKeyAfter(key, BindingPrefix)
}

// parseThreadKeyAfter parses key as prefix followed by a thread key.
func parseThreadKeyAfter(key []byte, prefix string) (meta.ThreadKey, error) {
	rest, ok := bytes.CutPrefix(key, []byte(prefix))
	if !ok {
		return meta.ThreadKey{}, fmt.Errorf("%w: %q has no %q prefix", ErrBadKey, key, prefix)
	}
	k, err := ParseThreadKey(rest)
	if err != nil {
		return meta.ThreadKey{}, fmt.Errorf("key %q: %w", key, err)
	}
	return k, nil
}

// BindingPage returns what a page of bindings reads: the keys starting
// with prefix (the bindings of tenant, or of every tenant when tenant is
// nil), from the key from on. from is the first key after the binding of
// after (its key with a 0x00 appended: no key sorts between the two), or
// the prefix itself when after is nil or sorts before it. ok is false when
// no binding of the page can exist: after sorts past every key of the
// prefix (a cursor of another tenant, say).
func BindingPage(tenant *string, after *meta.ThreadKey) (prefix, from []byte, ok bool) {
	prefix = []byte(BindingPrefix)
	if tenant != nil {
		prefix = appendComponent(prefix, *tenant)
	}
	if after == nil {
		return prefix, prefix, true
	}
	from = append(Binding(*after), 0x00)
	switch {
	case bytes.HasPrefix(from, prefix):
		return prefix, from, true
	case bytes.Compare(from, prefix) < 0:
		return prefix, prefix, true
	}
	return prefix, nil, false
}

// Mount returns the store key of the inspection mount at path.
func Mount(path string) []byte {
	return append([]byte(MountPrefix), path...)
}

// ParseMount is the inverse of Mount.
func ParseMount(key []byte) (string, error) {
	path, ok := bytes.CutPrefix(key, []byte(MountPrefix))
	if !ok {
		return "", fmt.Errorf("%w: %q has no %q prefix", ErrBadKey, key, MountPrefix)
	}
	return string(path), nil
}

// Jobs returns the prefix of every job key of thread k. Components are
// terminated, so no other thread's keys share it.
func Jobs(k meta.ThreadKey) []byte {
	return AppendThreadKey([]byte(JobPrefix), k)
}

// Job returns the store key of job seq of thread k. The number is
// big-endian, so a scan yields a thread's jobs in order.
func Job(k meta.ThreadKey, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(Jobs(k), seq)
}

// JobSeq returns the store key of thread k's job counter.
func JobSeq(k meta.ThreadKey) []byte {
	return AppendThreadKey([]byte(JobSeqPrefix), k)
}

// Host returns the store key of host id's record.
func Host(id string) []byte { return append([]byte(HostPrefix), id...) }

// Claim returns the store key of the claim named name.
func Claim(name string) []byte { return append([]byte(ClaimPrefix), name...) }

// Pin returns the store key of thread k's pin.
func Pin(k meta.ThreadKey) []byte { return AppendThreadKey([]byte(PinPrefix), k) }

// History returns the store key of thread k's history.
func History(k meta.ThreadKey) []byte {
	key := make([]byte, 0, len(HistoryPrefix)+len(k.Tenant)+len(k.Thread)+2*endBytes)
	return AppendThreadKey(append(key, HistoryPrefix...), k)
}

// ParseHistory is the inverse of History.
func ParseHistory(key []byte) (meta.ThreadKey, error) {
	return parseThreadKeyAfter(key, HistoryPrefix)
}

// Histories returns the prefix of every history key of tenant. The
// tenant's component is terminated, so no other tenant's keys share it.
func Histories(tenant string) []byte {
	return appendComponent([]byte(HistoryPrefix), tenant)
}
