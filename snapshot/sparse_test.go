package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// piece is data written at an offset of a sparse file.
type piece struct {
	off  int64
	data []byte
}

// makeSparse makes the file p of size bytes with only pieces written: the
// rest is holes.
func makeSparse(t testing.TB, p string, size int64, pieces ...piece) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, pc := range pieces {
		if _, err := f.WriteAt(pc.data, pc.off); err != nil {
			t.Fatal(err)
		}
	}
}

// onDisk returns the file p's size and the bytes it holds on disk.
func onDisk(t testing.TB, p string) (size, disk int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// dataOf returns the data spans of the file p (SEEK_DATA, SEEK_HOLE) and
// their bytes: all there is to compare of a sparse file without reading
// its holes.
func dataOf(t testing.TB, p string) ([]span, [][]byte) {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	spans, ok, err := dataSpans(fd, st.Size)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		spans = []span{{0, st.Size}}
	}
	var data [][]byte
	for _, s := range spans {
		b := make([]byte, s.end-s.off)
		if _, err := unix.Pread(fd, b, s.off); err != nil {
			t.Fatal(err)
		}
		data = append(data, b)
	}
	return spans, data
}

// holesSupported skips the test where dir's filesystem keeps no holes.
func holesSupported(t testing.TB, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".probe")
	makeSparse(t, p, 64<<20, piece{32 << 20, []byte("x")})
	defer os.Remove(p)
	if _, disk := onDisk(t, p); disk > 1<<20 {
		cannotRun(t, "%s keeps no holes (a 64 MiB file of one byte takes %d bytes)", dir, disk)
	}
}

// TestSparseBig is the target: a 20 GiB file with 1 MiB of data is
// checkpointed and restored in under a second each, to its size, its data
// and about its on-disk size, its holes never read.
func TestSparseBig(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	holesSupported(t, src)
	const size = 20 << 30
	half := bytes.Repeat([]byte("sparse data, "), (512<<10)/13+1)[:512<<10]
	other := bytes.Repeat([]byte{0xa5, 0x5a, 0x11}, (512<<10)/3+1)[:512<<10]
	p := filepath.Join(src, "big.img")
	makeSparse(t, p, size, piece{3 << 30, half}, piece{size - 512<<10, other})
	r := openRepo(t)

	start := time.Now()
	h, st := build(t, r, src, Hash{}, nil, true)
	took := time.Since(start)
	t.Logf("checkpoint of a 20 GiB file with 1 MiB of data: %v, %d bytes read", took, st.BytesRead)
	if took > time.Second {
		t.Errorf("the checkpoint took %v, want under a second", took)
	}
	if st.BytesRead > 1<<20+64<<10 {
		t.Errorf("the checkpoint read %d bytes, want about 1 MiB: it read holes", st.BytesRead)
	}
	if st.Bytes != size {
		t.Errorf("BuildStats.Bytes = %d, want the apparent size %d", st.Bytes, int64(size))
	}
	tree, err := r.ReadTree(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) != 1 || !tree[0].Sparse || tree[0].Size != size {
		t.Fatalf("tree %+v: want one sparse file of %d bytes", tree, int64(size))
	}

	start = time.Now()
	restore(t, r, h, dst)
	took = time.Since(start)
	q := filepath.Join(dst, "big.img")
	gotSize, disk := onDisk(t, q)
	t.Logf("restore: %v, %d bytes of %d on disk", took, disk, gotSize)
	if took > time.Second {
		t.Errorf("the restore took %v, want under a second", took)
	}
	if gotSize != size {
		t.Errorf("restored size %d, want %d", gotSize, int64(size))
	}
	if disk < 1<<20 || disk > 1<<20+256<<10 {
		t.Errorf("the restored file takes %d bytes on disk, want about 1 MiB (the original takes %d)", disk, func() int64 { _, d := onDisk(t, p); return d }())
	}
	wantSpans, wantData := dataOf(t, p)
	gotSpans, gotData := dataOf(t, q)
	if !equalSpans(gotSpans, wantSpans) {
		t.Errorf("restored data at %v, want %v", gotSpans, wantSpans)
	} else {
		for i := range gotData {
			if !bytes.Equal(gotData[i], wantData[i]) {
				t.Errorf("the data at %d differ", gotSpans[i].off)
			}
		}
	}
}

func equalSpans(a, b []span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSparseLayouts builds and restores files with holes in every place,
// through a target that makes holes and one that reads the content whole:
// both get the same bytes, and the first the holes.
func TestSparseLayouts(t *testing.T) {
	src := t.TempDir()
	holesSupported(t, src)
	const mib = 1 << 20
	data := func(n int, c byte) []byte { return bytes.Repeat([]byte{c, c + 1, c + 2}, n/3+1)[:n] }
	layouts := map[string]struct {
		size   int64
		pieces []piece
		sparse bool
	}{
		"all hole":       {64 * mib, nil, true},
		"hole at start":  {8 * mib, []piece{{7 * mib, data(mib, 'a')}}, true},
		"hole at end":    {8 * mib, []piece{{0, data(mib, 'b')}}, true},
		"holes around":   {9 * mib, []piece{{4 * mib, data(100, 'c')}}, true},
		"several":        {32 * mib, []piece{{0, data(5000, 'd')}, {3 * mib, data(mib+7, 'e')}, {20 * mib, data(1, 'f')}, {32*mib - 3, data(3, 'g')}}, true},
		"dense":          {0, []piece{{0, data(3*mib+5, 'h')}}, false},
		"empty":          {0, nil, false},
		"small, no hole": {0, []piece{{0, data(10, 'i')}}, false},
	}
	for name, l := range layouts {
		makeSparse(t, filepath.Join(src, name), l.size, l.pieces...)
	}
	r := openRepo(t)
	h, _ := build(t, r, src, Hash{}, nil, true)
	tree, err := r.ReadTree(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tree {
		if e.Sparse != layouts[e.Name].sparse {
			t.Errorf("%s: Sparse = %v, want %v", e.Name, e.Sparse, layouts[e.Name].sparse)
		}
	}
	for _, dense := range []bool{false, true} {
		dst := t.TempDir()
		deltas, err := r.Diff(context.Background(), Hash{}, h)
		if err != nil {
			t.Fatal(err)
		}
		target := newDirTarget(t, dst)
		target.dense = dense
		if _, err := r.Apply(context.Background(), deltas, target); err != nil {
			t.Fatalf("Apply (dense %v): %v", dense, err)
		}
		for name := range layouts {
			want, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dst, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s (dense target %v): restored content differs (%d bytes, want %d)", name, dense, len(got), len(want))
			}
			_, wantDisk := onDisk(t, filepath.Join(src, name))
			_, gotDisk := onDisk(t, filepath.Join(dst, name))
			if !dense && gotDisk > wantDisk+64<<10 {
				t.Errorf("%s: restored on %d bytes of disk, the original on %d", name, gotDisk, wantDisk)
			}
		}
	}

	// OpenFile reads the holes as zeros.
	for _, e := range tree {
		rc, err := r.OpenFile(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		want, _ := os.ReadFile(filepath.Join(src, e.Name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("OpenFile(%s): %d bytes, %v; want the file's %d", e.Name, len(got), err, len(want))
		}
	}
}

// TestSparseIncremental checks that an incremental build of a changed
// sparse file stores only its new data, that a mode change restores as a
// chmod, and that a collection keeps the blobs a map references.
func TestSparseIncremental(t *testing.T) {
	src := t.TempDir()
	holesSupported(t, src)
	p := filepath.Join(src, "disk.img")
	makeSparse(t, p, 1<<30, piece{0, []byte("boot sector")}, piece{512 << 20, bytes.Repeat([]byte("x"), 1<<20)})
	r := openRepo(t)
	h1, _ := build(t, r, src, Hash{}, nil, true)
	spans1, data1 := dataOf(t, p)

	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("a new block"), 900<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	h2, st := build(t, r, src, h1, []Change{{Path: "disk.img"}}, false)
	// The unchanged 1 MiB extent is read again but found in place: only the
	// new extent's blob, the map and the root are new.
	if st.NewObjects != 3 {
		t.Errorf("incremental build of one new extent: %d new objects, want 3", st.NewObjects)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	h3, _ := build(t, r, src, h2, []Change{{Path: "disk.img"}}, false)
	deltas, err := r.Diff(context.Background(), h2, h3)
	if err != nil || len(deltas) != 1 || deltas[0].Old.Hash != deltas[0].New.Hash || !deltas[0].New.Sparse {
		t.Fatalf("Diff after a chmod: %+v, %v; want one mode change of a sparse file", deltas, err)
	}

	// Only h1 live: h2's new extent goes, h1's stay, and h1 restores.
	spreadAll(t, r)
	st2, err := r.Collect(context.Background(), roots(h1))
	if err != nil {
		t.Fatal(err)
	}
	if st2.Removed == 0 {
		t.Errorf("Collect removed nothing of h2 and h3")
	}
	dst := t.TempDir()
	restore(t, r, h1, dst)
	spans, data := dataOf(t, filepath.Join(dst, "disk.img"))
	if !equalSpans(spans, spans1) || !bytes.Equal(bytes.Join(data, nil), bytes.Join(data1, nil)) {
		t.Errorf("h1 restored after a collection: data at %v, want %v", spans, spans1)
	}
	if _, err := r.Collect(context.Background(), roots()); err != nil {
		t.Fatal(err)
	}
	if n := len(objectFiles(t, r)); n != 0 {
		t.Errorf("%d objects left with no root", n)
	}
}

// TestSparseCorrupt checks that a sparse file's map or extent that fails
// its hash fails the restore with ErrCorrupt naming the object, through
// either kind of target, and replaces nothing.
func TestSparseCorrupt(t *testing.T) {
	src := t.TempDir()
	holesSupported(t, src)
	ext := bytes.Repeat([]byte("extent data "), 1024) // three whole pages: the extent is its data
	makeSparse(t, filepath.Join(src, "f"), 16<<20, piece{8 << 20, ext})
	r := openRepo(t)
	h, _ := build(t, r, src, Hash{}, nil, true)
	spreadAll(t, r)
	tree, _ := r.ReadTree(h)
	mapHash := tree[0].Hash
	extHash := sum(ext)
	for _, tc := range []struct {
		name string
		obj  Hash
		off  int
	}{
		{"map, flipped", mapHash, -1},
		{"map, header", mapHash, 1},
		{"extent, flipped", extHash, -5},
	} {
		for _, dense := range []bool{false, true} {
			p := r.objectPath(tc.obj)
			good, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			flipByte(t, p, tc.off)
			dst := t.TempDir()
			write(t, filepath.Join(dst, "f"), "what was there", 0o644)
			deltas, err := r.Diff(context.Background(), EmptyTree(), h)
			if err != nil {
				t.Fatal(err)
			}
			target := newDirTarget(t, dst)
			target.dense = dense
			_, err = r.Apply(context.Background(), deltas, target)
			os.WriteFile(p, good, 0o600)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.obj.String()) {
				t.Errorf("%s (dense target %v): Apply got %v, want ErrCorrupt naming %s", tc.name, dense, err, tc.obj)
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "f")); string(got) != "what was there" {
				t.Errorf("%s (dense target %v): the file was replaced (%d bytes)", tc.name, dense, len(got))
			}
		}
	}
	// A corrupt map fails a collection: it removes nothing.
	p := r.objectPath(mapHash)
	good, _ := os.ReadFile(p)
	flipByte(t, p, -1)
	before := len(objectFiles(t, r))
	if _, err := r.Collect(context.Background(), roots(h)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Collect with a corrupt map: got %v, want ErrCorrupt", err)
	}
	if n := len(objectFiles(t, r)); n != before {
		t.Errorf("Collect with a corrupt map removed %d objects", before-n)
	}
	os.WriteFile(p, good, 0o600)
}

// TestDecodeMap checks that only valid, canonical maps decode.
func TestDecodeMap(t *testing.T) {
	good := fileMap{size: 100, extents: []extent{{off: 10, len: 5, hash: Hash{1}}, {off: 20, len: 80, hash: Hash{2}}}}
	m, err := decodeMap(encodeMap(good))
	if err != nil || m.size != good.size || len(m.extents) != 2 || m.extents[1] != good.extents[1] {
		t.Fatalf("decodeMap(encodeMap(%v)) = %v, %v", good, m, err)
	}
	if _, err := decodeMap(encodeMap(fileMap{size: 1 << 40})); err != nil {
		t.Errorf("an all-hole map: %v", err)
	}
	bad := map[string][]byte{
		"empty":          nil,
		"bad header":     append([]byte("wt"), encodeMap(good)[2:]...),
		"version":        append([]byte("wx\x02"), encodeMap(good)[3:]...),
		"no hole":        encodeMap(fileMap{size: 5, extents: []extent{{off: 0, len: 5}}}),
		"empty file":     encodeMap(fileMap{}),
		"adjacent":       encodeMap(fileMap{size: 100, extents: []extent{{off: 0, len: 5}, {off: 5, len: 5}}}),
		"zero length":    encodeMap(fileMap{size: 100, extents: []extent{{off: 3, len: 0}}}),
		"past the size":  encodeMap(fileMap{size: 100, extents: []extent{{off: 90, len: 11}}}),
		"gap overflow":   encodeMap(fileMap{size: math.MaxInt64, extents: []extent{{off: math.MaxInt64 - 1, len: 1}, {off: math.MaxInt64, len: 1}}}),
		"trailing bytes": append(encodeMap(good), 0),
		"truncated":      encodeMap(good)[:20],
		"not minimal":    append([]byte("wx\x01\x80\x00"), encodeMap(good)[4:]...),
		"too many":       append([]byte("wx\x01\x64"), 0xff, 0xff, 0x7f),
	}
	for name, b := range bad {
		if _, err := decodeMap(b); !errors.Is(err, errBadMap) {
			t.Errorf("%s: got %v, want errBadMap", name, err)
		}
	}
	// A file entry's sparse kind survives its tree's encoding; the same
	// tree without it encodes as before sparse files existed.
	tr := Tree{{Name: "f", Kind: KindFile, Mode: 0o644, Size: 100, Hash: Hash{3}, Sparse: true}}
	got, _, err := decodeTree(encodeTree(nil, tr, counts{}))
	if err != nil || len(got) != 1 || got[0] != tr[0] {
		t.Errorf("a sparse entry decodes to %+v, %v", got, err)
	}
	tr[0].Sparse = false
	// "wt" 1, five counts of one byte, the name's length and "f": then the kind.
	if enc := encodeTree(nil, tr, counts{}); enc[10] != byte(KindFile) {
		t.Errorf("a dense entry encodes with kind byte %d, want %d", enc[10], KindFile)
	}
}

// TestSparseManyHoles checks a file with more holes than a map holds:
// its smallest holes are stored as data, the rest stay holes, and the
// content is the same.
func TestSparseManyHoles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	holesSupported(t, src)
	page := int64(os.Getpagesize())
	n := int64(maxExtents + 100)
	var pieces []piece
	for i := range n {
		pieces = append(pieces, piece{2 * i * page, []byte{byte(i) | 1}})
	}
	tail := 2*n*page + 64<<20
	pieces = append(pieces, piece{tail, []byte("the last extent")})
	size := tail + page
	makeSparse(t, filepath.Join(src, "f"), size, pieces...)
	r := openRepo(t)
	h, st := build(t, r, src, Hash{}, nil, true)
	tree, _ := r.ReadTree(h)
	if !tree[0].Sparse {
		t.Fatalf("a file with %d holes is not stored sparse", n+1)
	}
	m, err := r.readMap(tree[0].Hash)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d holes stored as %d extents, %d bytes read", n+1, len(m.extents), st.BytesRead)
	if len(m.extents) > maxExtents || len(m.extents) < 2 {
		t.Errorf("%d extents, want at least 2 and at most %d", len(m.extents), maxExtents)
	}
	if st.BytesRead > 2*n*page+page {
		t.Errorf("read %d bytes: the 64 MiB hole was read", st.BytesRead)
	}
	restore(t, r, h, dst)
	sameContent(t, filepath.Join(dst, "f"), filepath.Join(src, "f"))
	if _, disk := onDisk(t, filepath.Join(dst, "f")); disk > 2*n*page+2*page {
		t.Errorf("restored on %d bytes of disk: the 64 MiB hole was written", disk)
	}
}

// sameContent compares the files a and b a MiB at a time.
func sameContent(t testing.TB, a, b string) {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; off += 1 << 20 {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			t.Fatalf("%s and %s differ in the MiB at %d", a, b, off)
		}
		if ea != nil || eb != nil {
			return
		}
	}
}

// TestSparseHuge checks that files of exabytes (holes cost nothing to
// make) neither wrap the totals into a tree that cannot be read again
// nor are read: the tree reads back from disk and a collection walks it.
func TestSparseHuge(t *testing.T) {
	src := t.TempDir()
	holesSupported(t, src)
	for _, name := range []string{"a", "b", "c"} {
		f, err := os.Create(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		err = f.Truncate(1 << 62)
		f.Close()
		if err != nil {
			cannotRun(t, "%s holds no file of 4 EiB: %v", src, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, st := build(t, r, src, Hash{}, nil, true)
	r.Close()
	if st.Bytes != math.MaxInt64 || st.BytesRead != 0 {
		t.Errorf("three 4 EiB holes: Bytes %d (want the bound %d), %d bytes read", st.Bytes, int64(math.MaxInt64), st.BytesRead)
	}
	r, err = Open(dir) // no cache: the tree is read from disk
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if tree, err := r.ReadTree(h); err != nil || len(tree) != 3 || !tree[0].Sparse {
		t.Fatalf("ReadTree: %+v, %v", tree, err)
	}
	if _, err := r.Collect(context.Background(), roots(h)); err != nil {
		t.Fatalf("Collect: %v", err)
	}
}
