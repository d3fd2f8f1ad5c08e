package snapshot

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flipByte flips the byte at offset off of the file p (from the end where
// off is negative).
func flipByte(t testing.TB, p string, off int) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(data)
	}
	data[off] ^= 0x40
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptObjects(t *testing.T) {
	dir := t.TempDir()
	repoDir := filepath.Join(t.TempDir(), "repo")
	small := "a small raw blob"
	big := strings.Repeat("a compressible line\n", 100000)
	write(t, filepath.Join(dir, "small"), small, 0o644)
	write(t, filepath.Join(dir, "big"), big, 0o644)
	write(t, filepath.Join(dir, "sub/x"), "x", 0o644)
	r, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := build(t, r, dir, Hash{}, nil, true)
	tree, _ := r.ReadTree(root)
	r.Close()
	sub := tree[2].Hash

	readBlob := func(r *Repo, h Hash) error {
		rc, err := r.OpenBlob(h)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		return err
	}
	for _, tc := range []struct {
		name  string
		h     Hash
		spoil func(p string)
		read  func(r *Repo, h Hash) error
	}{
		{"raw blob, flipped", sum([]byte(small)), func(p string) { flipByte(t, p, 5) }, readBlob},
		{"zstd blob, flipped", sum([]byte(big)), func(p string) { flipByte(t, p, -10) }, readBlob},
		{"zstd blob, truncated", sum([]byte(big)), func(p string) { os.Truncate(p, 100) }, readBlob},
		{"blob, unknown format", sum([]byte(small)), func(p string) { flipByte(t, p, 0) }, readBlob},
		{"tree, flipped", sub, func(p string) { flipByte(t, p, -1) }, func(r *Repo, h Hash) error { _, err := r.ReadTree(h); return err }},
		{"tree, truncated", root, func(p string) { os.Truncate(p, 20) }, func(r *Repo, h Hash) error { _, err := r.ReadTree(h); return err }},
		{"tree, empty file", root, func(p string) { os.Truncate(p, 0) }, func(r *Repo, h Hash) error { _, err := r.ReadTree(h); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Open(repoDir) // a fresh cache
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			p := r.objectPath(tc.h)
			good, _ := os.ReadFile(p)
			defer os.WriteFile(p, good, 0o600)
			tc.spoil(p)
			err = tc.read(r, tc.h)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want an error matching ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.h.String()) {
				t.Errorf("error %q does not name the object %s", err, tc.h)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		r, err := Open(repoDir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		os.Remove(r.objectPath(sub))
		if _, err := r.ReadTree(sub); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadTree of a missing tree: got %v, want ErrNotFound", err)
		}
		if _, err := r.OpenBlob(Hash{1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("OpenBlob of a missing blob: got %v, want ErrNotFound", err)
		}
	})
}

func TestParseHash(t *testing.T) {
	good := sum([]byte("x"))
	for _, tc := range []struct {
		in   string
		want Hash
		ok   bool
	}{
		{good.String(), good, true},
		{strings.Repeat("0", 64), Hash{}, true},
		{strings.ToUpper(good.String()), Hash{}, false},
		{good.String()[:63], Hash{}, false},
		{good.String() + "0", Hash{}, false},
		{"g" + good.String()[1:], Hash{}, false},
		{"", Hash{}, false},
	} {
		got, err := ParseHash(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseHash(%q): got %s, %v; want %s, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if !(Hash{}).IsZero() || good.IsZero() {
		t.Errorf("IsZero is wrong")
	}
}

// TestCorruptDiff checks that a text diff reads its sides checked: a blob
// that fails its hash, or is longer than its entry says, is an error
// naming it, never a diff of what it holds.
func TestCorruptDiff(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.txt"), "one\ntwo\n", 0o644)
	r := openRepo(t)
	h, _ := build(t, r, dir, Hash{}, nil, true)
	spreadAll(t, r)
	tree, _ := r.ReadTree(h)
	e := tree[0]
	d := Delta{Path: "a.txt", Op: Added, New: e}
	if s, ok, err := r.TextDiff(context.Background(), d, 3); err != nil || !ok || !strings.Contains(s, "+two") {
		t.Fatalf("TextDiff of a good blob: %q, %v, %v", s, ok, err)
	}
	p := r.objectPath(e.Hash)
	flipByte(t, p, -2)
	if _, _, err := r.TextDiff(context.Background(), d, 3); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), e.Hash.String()) {
		t.Errorf("TextDiff of a flipped blob: got %v, want ErrCorrupt naming %s", err, e.Hash)
	}
	// An entry that says less than the blob holds: not a silent cut.
	flipByte(t, p, -2)
	short := e
	short.Size--
	if _, _, err := r.TextDiff(context.Background(), Delta{Path: "a.txt", Op: Added, New: short}, 3); !errors.Is(err, ErrCorrupt) {
		t.Errorf("TextDiff of a blob longer than its entry: got %v, want ErrCorrupt", err)
	}
}
