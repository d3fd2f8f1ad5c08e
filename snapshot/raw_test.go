package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rawWorkspace fills dir with what exercises every kind of object: small
// raw and compressed files, one that compresses to more than 1 MiB, one
// of random bytes past 1 MiB (stored raw), a link, a sparse file, an
// empty folder and content shared by several paths.
func rawWorkspace(t testing.TB, dir string) {
	t.Helper()
	random, mixed := randomBytes(3<<20, 256), randomBytes(4<<20, 16)
	write(t, filepath.Join(dir, "small"), "a small raw blob", 0o644)
	write(t, filepath.Join(dir, "a/same"), "shared content", 0o644)
	write(t, filepath.Join(dir, "b/same"), "shared content", 0o600)
	write(t, filepath.Join(dir, "a/text"), strings.Repeat("a compressible line\n", 50), 0o644)
	write(t, filepath.Join(dir, "big/text"), strings.Repeat("a compressible line\n", 200000), 0o644)
	write(t, filepath.Join(dir, "big/random"), string(random), 0o644)
	write(t, filepath.Join(dir, "big/mixed"), string(mixed), 0o644)
	if err := os.Symlink("a/text", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeSparse(t, filepath.Join(dir, "sparse"), 8<<20, piece{off: 0, data: []byte("head")}, piece{off: 6 << 20, data: []byte("shared content")})
}

// randomBytes returns n bytes drawn from the first of the alphabet's
// letters (256: any byte), always the same for the same n and letters.
func randomBytes(n, letters int) []byte {
	rnd := rand.New(rand.NewPCG(uint64(n), uint64(letters)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rnd.IntN(letters))
	}
	return b
}

// reachable returns what the tree h references, by reading it as Collect
// does, with the kind of each object.
func reachable(t testing.TB, r *Repo, h Hash) map[Hash]ObjectKind {
	t.Helper()
	out := make(map[Hash]ObjectKind)
	var walk func(h Hash)
	walk = func(h Hash) {
		if h == EmptyTree() {
			return
		}
		out[h] = ObjectTree
		tree, err := r.ReadTree(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tree {
			if e.Kind == KindDir {
				walk(e.Hash)
				continue
			}
			refs, err := r.FileObjects(e)
			if err != nil {
				t.Fatal(err)
			}
			for i, ref := range refs {
				if e.Sparse && i == 0 {
					out[ref] = ObjectMap
				} else {
					out[ref] = ObjectBlob
				}
			}
		}
	}
	walk(h)
	return out
}

func TestObjects(t *testing.T) {
	r := openRepo(t)
	dir := t.TempDir()
	rawWorkspace(t, dir)
	root, _ := build(t, r, dir, Hash{}, nil, true)

	var order []Hash
	kinds := make(map[Hash]ObjectKind)
	err := r.Raw().Objects(context.Background(), root, func(h Hash, kind ObjectKind) error {
		if _, ok := kinds[h]; ok {
			t.Errorf("%s visited twice", h)
		}
		kinds[h] = kind
		order = append(order, h)
		return nil
	})
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}
	want := reachable(t, r, root)
	if len(kinds) != len(want) {
		t.Errorf("got %d objects, want %d", len(kinds), len(want))
	}
	for h, k := range want {
		if kinds[h] != k {
			t.Errorf("object %s: got kind %v, want %v", h, kinds[h], k)
		}
	}
	if _, ok := kinds[EmptyTree()]; ok {
		t.Errorf("the empty tree was visited")
	}

	// Every object but the root comes after a tree (or map) that names it.
	if len(order) == 0 || order[0] != root {
		t.Fatalf("the root is not visited first")
	}
	for i, h := range order[1:] {
		named := false
		for _, p := range order[:i+1] {
			if kinds[p] == ObjectBlob {
				continue
			}
			var refs []Hash
			if kinds[p] == ObjectTree {
				tree, _ := r.ReadTree(p)
				for _, e := range tree {
					refs = append(refs, e.Hash)
				}
			} else {
				m, _ := r.readMap(p)
				for _, x := range m.extents {
					refs = append(refs, x.hash)
				}
			}
			if slices.Contains(refs, h) {
				named = true
				break
			}
		}
		if !named {
			t.Errorf("object %s (%v) is visited before anything that names it", h, kinds[h])
		}
	}

	t.Run("visit error", func(t *testing.T) {
		stop := errors.New("stop here")
		n := 0
		err := r.Raw().Objects(context.Background(), root, func(Hash, ObjectKind) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if err != stop {
			t.Errorf("got %v, want the visit's own error", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := r.Raw().Objects(ctx, root, func(Hash, ObjectKind) error { return nil })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		for _, h := range []Hash{{}, EmptyTree()} {
			err := r.Raw().Objects(context.Background(), h, func(h Hash, _ ObjectKind) error {
				t.Errorf("visited %s", h)
				return nil
			})
			if err != nil {
				t.Errorf("Objects(%s): %v", h, err)
			}
		}
	})
	t.Run("missing tree", func(t *testing.T) {
		other := openRepo(t)
		err := other.Raw().Objects(context.Background(), root, func(Hash, ObjectKind) error { return nil })
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), root.String()) {
			t.Errorf("got %v, want ErrNotFound naming %s", err, root)
		}
	})
}

// copyRaw copies the objects of the tree h from src to dst, each through
// ReadRaw or OpenRaw and PutRaw or PutRawStream, and checks that both
// reads give the same bytes.
func copyRaw(t testing.TB, src, dst *Repo, h Hash) {
	t.Helper()
	ctx := context.Background()
	var batch []RawObject
	err := src.Raw().Objects(ctx, h, func(h Hash, _ ObjectKind) error {
		obj, err := src.Raw().ReadRaw(h)
		if err != nil {
			return err
		}
		rc, size, err := src.Raw().OpenRaw(h)
		if err != nil {
			return err
		}
		defer rc.Close()
		if size != int64(len(obj.Data)) {
			t.Errorf("object %s: OpenRaw's size %d, ReadRaw's %d", h, size, len(obj.Data))
		}
		if size > smallMax {
			return dst.Raw().PutRawStream(ctx, h, rc)
		}
		data, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		if !bytes.Equal(data, obj.Data) {
			t.Errorf("object %s: OpenRaw and ReadRaw differ", h)
		}
		batch = append(batch, obj)
		return nil
	})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if err := dst.Raw().PutRaw(ctx, batch); err != nil {
		t.Fatalf("PutRaw: %v", err)
	}
}

func TestRawCopy(t *testing.T) {
	src, dst := openRepo(t), openRepo(t)
	dir := t.TempDir()
	rawWorkspace(t, dir)
	root, _ := build(t, src, dir, Hash{}, nil, true)
	// Half the objects from the build's log, half loose.
	spreadAll(t, src)
	copyRaw(t, src, dst, root)

	formats := make(map[byte]int)
	err := dst.Raw().Objects(context.Background(), root, func(h Hash, _ ObjectKind) error {
		if !dst.Raw().Has(h) {
			t.Errorf("%s: not held after PutRaw", h)
		}
		obj, err := dst.Raw().ReadRaw(h)
		formats[obj.Data[0]]++
		return err
	})
	if err != nil {
		t.Fatalf("Objects in the copy: %v", err)
	}
	if formats[formatRaw] == 0 || formats[formatZstd] == 0 {
		t.Errorf("formats copied: %v, want both raw and zstd", formats)
	}
	out := t.TempDir()
	restore(t, dst, root, out)
	sameDirs(t, out, dir)

	// Again: everything is there, nothing is written.
	logs := func() int {
		names, _ := listTmp(dst.tmp)
		return len(names)
	}
	spreadAll(t, dst)
	copyRaw(t, src, dst, root)
	if n := logs(); n != 0 {
		t.Errorf("a copy of what is there left %d files in tmp/", n)
	}
}

func TestPutRawRefuses(t *testing.T) {
	src := openRepo(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "raw"), "a small raw blob", 0o644)
	write(t, filepath.Join(dir, "zstd"), strings.Repeat("a compressible line\n", 50), 0o644)
	root, _ := build(t, src, dir, Hash{}, nil, true)
	rawObj, err := src.Raw().ReadRaw(sum([]byte("a small raw blob")))
	if err != nil {
		t.Fatal(err)
	}
	zstdObj, err := src.Raw().ReadRaw(sum([]byte(strings.Repeat("a compressible line\n", 50))))
	if err != nil {
		t.Fatal(err)
	}
	if zstdObj.Data[0] != formatZstd {
		t.Fatalf("the compressible blob is stored in format %d", zstdObj.Data[0])
	}
	tree, err := src.Raw().ReadRaw(root)
	if err != nil {
		t.Fatal(err)
	}
	spoil := func(o RawObject, fn func(d []byte) []byte) RawObject {
		return RawObject{Hash: o.Hash, Data: fn(slices.Clone(o.Data))}
	}
	for _, tc := range []struct {
		name string
		bad  RawObject
	}{
		{"raw, a byte flipped", spoil(rawObj, func(d []byte) []byte { d[3] ^= 1; return d })},
		{"raw, cut", spoil(rawObj, func(d []byte) []byte { return d[:5] })},
		{"zstd, a byte flipped", spoil(zstdObj, func(d []byte) []byte { d[len(d)/2] ^= 1; return d })},
		{"zstd, cut", spoil(zstdObj, func(d []byte) []byte { return d[:len(d)-3] })},
		{"unknown format", spoil(rawObj, func(d []byte) []byte { d[0] = 7; return d })},
		{"no format byte", spoil(rawObj, func(d []byte) []byte { return nil })},
		{"another object's bytes", RawObject{Hash: rawObj.Hash, Data: zstdObj.Data}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := openRepo(t)
			// A good object before the bad one: nothing of the call is kept.
			err := dst.Raw().PutRaw(context.Background(), []RawObject{tree, tc.bad})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.bad.Hash.String()) {
				t.Errorf("PutRaw: got %v, want ErrCorrupt naming %s", err, tc.bad.Hash)
			}
			err = dst.Raw().PutRawStream(context.Background(), tc.bad.Hash, bytes.NewReader(tc.bad.Data))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.bad.Hash.String()) {
				t.Errorf("PutRawStream: got %v, want ErrCorrupt naming %s", err, tc.bad.Hash)
			}
			for _, h := range []Hash{tree.Hash, tc.bad.Hash} {
				if dst.Raw().Has(h) {
					t.Errorf("%s kept", h)
				}
			}
			if names, _ := listTmp(dst.tmp); len(names) != 0 {
				t.Errorf("tmp/ holds %q", names)
			}
		})
	}

	t.Run("read error", func(t *testing.T) {
		dst := openRepo(t)
		broken := errors.New("the network went away")
		data := io.MultiReader(bytes.NewReader(zstdObj.Data[:len(zstdObj.Data)/2]), errReader{broken})
		err := dst.Raw().PutRawStream(context.Background(), zstdObj.Hash, data)
		if !errors.Is(err, broken) || errors.Is(err, ErrCorrupt) {
			t.Errorf("got %v, want the read error, not ErrCorrupt", err)
		}
		if dst.Raw().Has(zstdObj.Hash) {
			t.Errorf("kept")
		}
		if names, _ := listTmp(dst.tmp); len(names) != 0 {
			t.Errorf("tmp/ holds %q", names)
		}
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestReadRawCorrupt(t *testing.T) {
	dir := t.TempDir()
	rawWorkspace(t, dir)
	r := openRepo(t)
	build(t, r, dir, Hash{}, nil, true)
	spreadAll(t, r)
	small := sum([]byte("a small raw blob"))
	text := sum([]byte(strings.Repeat("a compressible line\n", 50)))
	mixed := sum(randomBytes(4<<20, 16))
	if rc, size, err := r.Raw().OpenRaw(mixed); err != nil || size <= smallMax {
		t.Fatalf("the mixed file is stored in %d bytes (%v), want more than %d", size, err, smallMax)
	} else {
		rc.Close()
	}
	for _, tc := range []struct {
		name string
		h    Hash
		off  int
	}{
		{"raw", small, 4},
		{"small zstd", text, -5},
		{"big zstd", mixed, -5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := r.objectPath(tc.h)
			good, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(p, good, 0o600)
			flipByte(t, p, tc.off)
			if _, err := r.Raw().ReadRaw(tc.h); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.h.String()) {
				t.Errorf("ReadRaw: got %v, want ErrCorrupt naming %s", err, tc.h)
			}
			rc, _, err := r.Raw().OpenRaw(tc.h)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if _, err := io.Copy(io.Discard, rc); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.h.String()) {
				t.Errorf("OpenRaw, read to its end: got %v, want ErrCorrupt naming %s", err, tc.h)
			}
		})
	}
}
