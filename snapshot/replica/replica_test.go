package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"warren/snapshot"
)

// server is one server's side of a store: its repository and its cache
// of pack heads, closed and removed at the test's end.
type server struct {
	repo  *snapshot.Repo
	cache string
}

func newServer(t testing.TB) *server {
	t.Helper()
	dir := t.TempDir()
	repo, err := snapshot.Open(filepath.Join(dir, "repo"))
	if err != nil {
		t.Fatalf("snapshot.Open: %v", err)
	}
	t.Cleanup(func() { repo.Close() })
	return &server{repo: repo, cache: filepath.Join(dir, "heads")}
}

// build stores the folder dir as a tree of s's repository: whole, or as
// the changes since base.
func (s *server) build(t testing.TB, dir string, base snapshot.Hash, changes []snapshot.Change) snapshot.Hash {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	h, _, err := s.repo.Build(context.Background(), fd, base, changes, base.IsZero())
	if err != nil {
		t.Fatalf("Build(%s): %v", dir, err)
	}
	return h
}

func (s *server) upload(t testing.TB, store Store, tree snapshot.Hash, opts UploadOptions) UploadStats {
	t.Helper()
	opts.Cache = s.cache
	st, err := Upload(context.Background(), s.repo, store, tree, opts)
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	return st
}

func (s *server) fetch(t testing.TB, store Store, tree snapshot.Hash) FetchStats {
	t.Helper()
	st, err := Fetch(context.Background(), s.repo, store, tree, FetchOptions{Cache: s.cache})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	return st
}

// makeFiles fills dir with folders d000... of perFolder files each, each
// of about size bytes of text drawn from seed: distinct contents, which
// compress a little.
func makeFiles(t testing.TB, dir string, folders, perFolder, size int, seed uint64) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 7))
	for i := range folders {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range perFolder {
			b := fmt.Appendf(nil, "file %d of folder %d\n", j, i)
			for len(b) < size {
				b = append(b, byte('a'+rnd.IntN(26)))
			}
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", j)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// makeExtras adds to dir what exercises every kind of object besides
// small files: a big file of random bytes (alone in its pack), a sparse
// file (an extent map), a link and an empty folder.
func makeExtras(t testing.TB, dir string) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, bigObject+(1<<20))
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(16 << 20)
	f.WriteAt([]byte("a header"), 0)
	f.WriteAt([]byte("a block in the middle"), 8<<20)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d000/f000", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// checkTree fails the test unless the tree, read from repo, holds what
// dir holds: every path, each file's content and each link's target.
func checkTree(t testing.TB, repo *snapshot.Repo, tree snapshot.Hash, dir string) {
	t.Helper()
	deltas, err := repo.Diff(context.Background(), snapshot.Hash{}, tree)
	if err != nil {
		t.Fatalf("Diff(empty, %s): %v", tree, err)
	}
	read := func(rc io.ReadCloser, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, d := range deltas {
		p := filepath.Join(dir, d.Path)
		switch d.New.Kind {
		case snapshot.KindFile:
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := read(repo.OpenFile(d.New)); !bytes.Equal(got, want) {
				t.Fatalf("%s: the tree's content (%d bytes) is not the file's (%d)", d.Path, len(got), len(want))
			}
		case snapshot.KindLink:
			want, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := read(repo.OpenBlob(d.New.Hash)); string(got) != want {
				t.Fatalf("%s: the tree's target %q, the link's %q", d.Path, got, want)
			}
		case snapshot.KindDir:
			if info, err := os.Lstat(p); err != nil || !info.IsDir() {
				t.Fatalf("%s: a folder in the tree, not in %s", d.Path, dir)
			}
		}
	}
	n := 0
	filepath.WalkDir(dir, func(string, os.DirEntry, error) error { n++; return nil })
	if n-1 != len(deltas) {
		t.Fatalf("the tree holds %d paths, %s %d", len(deltas), dir, n-1)
	}
}

// errCut is the error of a meteredStore's Puts past its failAfter.
var errCut = errors.New("the store went away")

// meteredStore counts what goes through it, and checks that every
// manifest Put names only packs the store holds. With failAfter > 0,
// every Put past that many fails, as a cut connection or a kill would
// leave an upload.
type meteredStore struct {
	Store
	t testing.TB

	// mu guards the fields below it.
	mu        sync.Mutex
	failAfter int
	started   int   // Puts begun (each reserves its turn, for failAfter)
	puts      int   // Puts completed
	sent      int64 // bytes of them
	gets      int
	got       int64 // bytes read through Gets
}

func (m *meteredStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	m.mu.Lock()
	m.started++
	cut := m.failAfter > 0 && m.started > m.failAfter
	m.mu.Unlock()
	if cut {
		return errCut
	}
	if tree, ok := strings.CutPrefix(key, "trees/"); ok {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		h, _ := snapshot.ParseHash(tree)
		mf, err := decodeManifest(b, h)
		if err != nil {
			m.t.Errorf("a manifest put that does not decode: %v", err)
		}
		for _, p := range mf.packs {
			if _, err := m.Store.Stat(ctx, packKey(p.name)); err != nil {
				m.t.Errorf("manifest %s put before its pack %s: %v", tree, p.name, err)
			}
		}
		r = bytes.NewReader(b)
	}
	if err := m.Store.Put(ctx, key, r, size); err != nil {
		return err
	}
	m.mu.Lock()
	m.puts++
	m.sent += size
	m.mu.Unlock()
	return nil
}

func (m *meteredStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := m.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.gets++
	m.mu.Unlock()
	return &meteredReader{ReadCloser: rc, m: m}, nil
}

type meteredReader struct {
	io.ReadCloser
	m *meteredStore
}

func (r *meteredReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.m.mu.Lock()
	r.m.got += int64(n)
	r.m.mu.Unlock()
	return n, err
}

// reset zeroes the figures and sets failAfter.
func (m *meteredStore) reset(failAfter int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failAfter, m.started, m.puts, m.sent, m.gets, m.got = failAfter, 0, 0, 0, 0, 0
}

// keys lists what store holds, sorted.
func keys(t testing.TB, store Store) []string {
	t.Helper()
	var out []string
	if err := store.List(context.Background(), "", func(i Info) error { out = append(out, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func countPrefix(keys []string, prefix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// TestUploadFetch: a workspace of 20,000 small files (and a big file, a
// sparse one, a link, an empty folder) goes to the store in a handful of
// packs, and comes back whole into another server's repository.
func TestUploadFetch(t *testing.T) {
	dir := t.TempDir()
	makeFiles(t, dir, 200, 100, 60, 1)
	makeExtras(t, dir)
	a, b := newServer(t), newServer(t)
	tree := a.build(t, dir, snapshot.Hash{}, nil)
	store := &meteredStore{Store: newFolderStore(t), t: t}

	st := a.upload(t, store, tree, UploadOptions{})
	held := keys(t, store)
	t.Logf("upload: %d objects in %d packs (%d sent), %d bytes; the store holds %d keys", st.Objects, st.Packs, st.PacksSent, st.BytesSent, len(held))
	if st.Objects < 20000 || st.Packed != st.Objects || st.Reused != 0 {
		t.Errorf("objects %d, packed %d, reused %d; want over 20,000, all packed", st.Objects, st.Packed, st.Reused)
	}
	// A meta pack, a data pack, the big file's: three packs, one manifest.
	if st.Packs != 3 || st.PacksSent != 3 || st.Manifest != 3 || countPrefix(held, "packs/") != 3 || countPrefix(held, "trees/") != 1 {
		t.Errorf("got %d packs (%d sent, %d in the manifest), store keys %q; want 3 packs and one manifest", st.Packs, st.PacksSent, st.Manifest, held)
	}
	if store.puts != 4 || st.BytesSent != store.sent {
		t.Errorf("the store saw %d Puts of %d bytes; the upload says %d bytes, want 4 Puts", store.puts, store.sent, st.BytesSent)
	}

	fst := b.fetch(t, store, tree)
	t.Logf("fetch: %d objects from %d packs, %d bytes read", fst.Objects, fst.Packs, fst.Bytes)
	if fst.Objects != st.Objects || fst.Packs != 3 || fst.Bytes != store.got {
		t.Errorf("fetch: %d objects from %d packs, %d bytes (the store gave %d); want %d objects from 3 packs",
			fst.Objects, fst.Packs, fst.Bytes, store.got, st.Objects)
	}
	err := b.repo.Raw().Objects(context.Background(), tree, func(h snapshot.Hash, _ snapshot.ObjectKind) error {
		if !b.repo.Raw().Has(h) {
			return fmt.Errorf("object %s missing after the fetch", h)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, b.repo, tree, dir)

	// Done already, both ways: nothing read, nothing sent.
	store.reset(0)
	if st := a.upload(t, store, tree, UploadOptions{}); !st.Present || store.puts != 0 {
		t.Errorf("a second upload: %+v, %d Puts; want Present and none", st, store.puts)
	}
	if fst := b.fetch(t, store, tree); !fst.Present || store.gets != 0 {
		t.Errorf("a second fetch: %+v, %d Gets; want Present and none", fst, store.gets)
	}
}

// TestUploadIncremental: a tree with 10 files changed since its base
// sends one small pack of trees, one of blobs and the manifest; another
// server that holds the base reads only those two packs.
func TestUploadIncremental(t *testing.T) {
	dir := t.TempDir()
	makeFiles(t, dir, 100, 100, 200, 2)
	a, b := newServer(t), newServer(t)
	store := &meteredStore{Store: newFolderStore(t), t: t}
	first := a.build(t, dir, snapshot.Hash{}, nil)
	st1 := a.upload(t, store, first, UploadOptions{})
	b.fetch(t, store, first)

	var changes []snapshot.Change
	for i := range 10 {
		p := fmt.Sprintf("d%03d/f%03d", i*7, i*11)
		if err := os.WriteFile(filepath.Join(dir, p), fmt.Appendf(nil, "changed, %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, snapshot.Change{Path: p})
	}
	second := a.build(t, dir, first, changes)

	store.reset(0)
	st2 := a.upload(t, store, second, UploadOptions{Bases: []snapshot.Hash{first}})
	t.Logf("first upload: %d objects, %d bytes; second: %d objects, %d new (%d reused), %d packs, %d bytes in %d Puts",
		st1.Objects, st1.BytesSent, st2.Objects, st2.Packed, st2.Reused, st2.PacksSent, st2.BytesSent, store.puts)
	// 10 blobs, the trees of 10 folders and the root's.
	if st2.Packed != 21 || st2.Reused != st2.Objects-21 {
		t.Errorf("packed %d, reused %d of %d; want 21 packed, the rest reused", st2.Packed, st2.Reused, st2.Objects)
	}
	if st2.PacksSent != 2 || store.puts != 3 || st2.BytesSent != store.sent || st2.BytesSent > 64<<10 {
		t.Errorf("sent %d packs, %d bytes, in %d Puts; want 2 packs and a manifest, under 64 KiB", st2.PacksSent, st2.BytesSent, store.puts)
	}
	if st2.Manifest != st1.Manifest+2 {
		t.Errorf("the manifest names %d packs, want the base's %d and the 2 new", st2.Manifest, st1.Manifest)
	}

	store.reset(0)
	fst := b.fetch(t, store, second)
	t.Logf("fetch of the second tree where the first is: %d objects from %d packs, %d bytes read", fst.Objects, fst.Packs, fst.Bytes)
	if fst.Packs != 2 || fst.Objects != 21 || fst.Bytes > 64<<10 {
		t.Errorf("fetch: %d objects from %d packs, %d bytes; want 21 from the 2 new packs", fst.Objects, fst.Packs, fst.Bytes)
	}
	checkTree(t, b.repo, second, dir)

	// Without the base, the second tree is sent whole.
	other := &meteredStore{Store: newFolderStore(t), t: t}
	if st := a.upload(t, other, second, UploadOptions{}); st.Packed != st.Objects || st.BytesSent < st1.BytesSent/2 {
		t.Errorf("without a base: %d of %d objects packed, %d bytes", st.Packed, st.Objects, st.BytesSent)
	}
}

// TestUploadCut: an upload cut after some Puts leaves no manifest, and
// run again sends only the packs the store lacks, ending with the very
// store an upload never cut makes.
func TestUploadCut(t *testing.T) {
	dir := t.TempDir()
	makeFiles(t, dir, 20, 100, 400, 3)
	makeExtras(t, dir)
	a := newServer(t)
	tree := a.build(t, dir, snapshot.Hash{}, nil)
	opts := UploadOptions{PackSize: 32 << 10, Parallel: 3}
	ref := newFolderStore(t)
	full := a.upload(t, ref, tree, opts)
	want := keys(t, ref)
	t.Logf("uncut: %d packs, %d bytes", full.Packs, full.BytesSent)
	if full.Packs < 10 {
		t.Fatalf("only %d packs: the test wants more", full.Packs)
	}

	for _, cut := range []int{1, 7, int(full.Packs) - 1, int(full.Packs)} {
		t.Run(fmt.Sprintf("after %d Puts", cut), func(t *testing.T) {
			store := &meteredStore{Store: newFolderStore(t), t: t, failAfter: cut}
			s := newServer(t) // a cache of its own: the store tells what is there
			s.repo = a.repo
			_, err := Upload(context.Background(), s.repo, store, tree, UploadOptions{Cache: s.cache, PackSize: opts.PackSize, Parallel: opts.Parallel})
			if !errors.Is(err, errCut) {
				t.Fatalf("Upload: got %v, want errCut", err)
			}
			if _, err := store.Stat(context.Background(), manifestKey(tree)); !errors.Is(err, ErrNotFound) {
				t.Errorf("the manifest of a cut upload: %v, want ErrNotFound", err)
			}
			// The Puts begun before the cut end (none is canceled): the
			// store holds as many packs as Puts succeeded.
			held := keys(t, store)
			if n := countPrefix(held, "packs/"); n != min(cut, int(full.Packs)) || store.puts != n {
				t.Errorf("the store holds %d packs after %d Puts (%d succeeded)", n, cut, store.puts)
			}
			for _, k := range held {
				if !slices.Contains(want, k) {
					t.Errorf("%s: a key the uncut upload does not make", k)
				}
			}

			store.reset(0)
			again := newServer(t)
			st, err := Upload(context.Background(), a.repo, store, tree, UploadOptions{Cache: again.cache, PackSize: opts.PackSize, Parallel: opts.Parallel})
			if err != nil {
				t.Fatalf("the upload run again: %v", err)
			}
			if st.PacksSent != full.Packs-int64(cut) || st.Packs != full.Packs {
				t.Errorf("run again: %d packs made, %d sent; want %d made, %d sent", st.Packs, st.PacksSent, full.Packs, full.Packs-int64(cut))
			}
			if got := keys(t, store); !slices.Equal(got, want) {
				t.Errorf("the store holds %q, the uncut upload's %q", got, want)
			}
			b := newServer(t)
			b.fetch(t, store, tree)
			checkTree(t, b.repo, tree, dir)
		})
	}
}

// spoilers change a file of a FolderStore: flip one byte, cut it.
func flipAt(t testing.TB, p string, off int64) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x20
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFetchCorrupt: whatever of the store is spoiled, a fetch fails
// naming it, and keeps nothing unchecked: the objects of the spoiled pack
// read with the bad one are not kept. With the store mended, a fetch run
// again finishes.
func TestFetchCorrupt(t *testing.T) {
	dir := t.TempDir()
	makeFiles(t, dir, 10, 30, 100, 4)
	makeExtras(t, dir)
	a := newServer(t)
	tree := a.build(t, dir, snapshot.Hash{}, nil)
	fs := newFolderStore(t)
	a.upload(t, fs, tree, UploadOptions{})

	// The packs, by what they hold.
	m, err := readManifest(context.Background(), fs, tree)
	if err != nil {
		t.Fatal(err)
	}
	type packFile struct {
		path string
		name snapshot.Hash
		head *packHead
		off  []int64 // of each object
	}
	var metaPack, dataPack, bigPack packFile
	for _, p := range m.packs {
		path := fs.path(packKey(p.name))
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		h, hb, err := readHead(f, p.name)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		pf := packFile{path: path, name: p.name, head: h}
		off := int64(len(hb))
		for _, e := range h.entries {
			pf.off = append(pf.off, off)
			off += e.size
		}
		switch {
		case p.meta:
			metaPack = pf
		case len(h.entries) == 1 && h.entries[0].size > bigObject:
			bigPack = pf
		default:
			dataPack = pf
		}
	}
	if metaPack.head == nil || dataPack.head == nil || bigPack.head == nil {
		t.Fatalf("want a meta, a data and a big pack; the manifest names %d packs", len(m.packs))
	}
	obj := func(pf packFile, i int) (snapshot.Hash, int64) {
		e := pf.head.entries[i]
		return e.hash, pf.off[i] + e.size/2 + 1
	}

	for _, tc := range []struct {
		name    string
		pack    packFile                // the pack spoiled, whose objects must not be kept
		spoil   func() (names []string) // what the error must name
		notKept []snapshot.Hash
		notFind bool // the error matches ErrNotFound, not ErrCorrupt
	}{
		{name: "a small object flipped", pack: dataPack, spoil: func() []string {
			h, off := obj(dataPack, 5)
			flipAt(t, dataPack.path, off)
			return []string{dataPack.name.String(), h.String()}
		}},
		{name: "a big object flipped", pack: bigPack, spoil: func() []string {
			h, off := obj(bigPack, 0)
			flipAt(t, bigPack.path, off)
			return []string{bigPack.name.String(), h.String()}
		}},
		{name: "a tree flipped", pack: metaPack, spoil: func() []string {
			h, off := obj(metaPack, len(metaPack.head.entries)-1)
			flipAt(t, metaPack.path, off)
			return []string{metaPack.name.String(), h.String()}
		}},
		{name: "a head flipped", pack: dataPack, spoil: func() []string {
			flipAt(t, dataPack.path, 20)
			return []string{dataPack.name.String(), "head"}
		}},
		{name: "a pack cut short", pack: dataPack, spoil: func() []string {
			os.Truncate(dataPack.path, dataPack.off[len(dataPack.off)-1])
			return []string{dataPack.name.String(), "cut short"}
		}},
		{name: "a big pack cut short", pack: bigPack, spoil: func() []string {
			os.Truncate(bigPack.path, bigPack.off[0]+1000)
			return []string{bigPack.name.String(), "cut short"}
		}},
		{name: "a pack missing", pack: dataPack, notFind: true, spoil: func() []string {
			os.Remove(dataPack.path)
			return []string{dataPack.name.String()}
		}},
		{name: "the manifest without its blobs' pack", spoil: func() []string {
			rewriteManifest(t, fs, m, func(p packRef) bool { return p.name != dataPack.name })
			return []string{"in none of the packs"}
		}},
		{name: "the manifest without its trees' pack", spoil: func() []string {
			rewriteManifest(t, fs, m, func(p packRef) bool { return !p.meta })
			return []string{manifestKey(tree), "do not hold all its trees"}
		}},
		{name: "the manifest changed", spoil: func() []string {
			flipAt(t, fs.path(manifestKey(tree)), 40)
			return []string{manifestKey(tree), "sum"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := make(map[string][]byte)
			for _, k := range keys(t, fs) {
				b, err := os.ReadFile(fs.path(k))
				if err != nil {
					t.Fatal(err)
				}
				saved[k] = b
			}
			defer func() {
				for k, b := range saved {
					if err := os.WriteFile(fs.path(k), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}()
			names := tc.spoil()

			b := newServer(t)
			_, err := Fetch(context.Background(), b.repo, fs, tree, FetchOptions{Cache: b.cache})
			switch {
			case err == nil:
				t.Fatal("Fetch succeeded")
			case tc.notFind && !errors.Is(err, ErrNotFound):
				t.Errorf("got %v, want ErrNotFound", err)
			case !tc.notFind && !errors.Is(err, ErrCorrupt):
				t.Errorf("got %v, want ErrCorrupt", err)
			}
			for _, n := range names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("the error %q does not name %s", err, n)
				}
			}
			t.Logf("%v", err)
			if tc.pack.head != nil && !tc.notFind {
				for _, e := range tc.pack.head.entries {
					if b.repo.Raw().Has(e.hash) && e.size <= bigObject {
						t.Errorf("%s of the spoiled pack kept", e.hash)
					}
				}
			}
			if b.repo.Raw().Has(tree) && tc.pack.name == metaPack.name {
				t.Errorf("the root tree kept")
			}

			// Mended, the store gives the whole tree to the same repository.
			for k, data := range saved {
				os.WriteFile(fs.path(k), data, 0o600)
			}
			b.fetch(t, fs, tree)
			checkTree(t, b.repo, tree, dir)
		})
	}
}

// rewriteManifest writes m again in fs, with only the packs keep keeps: a
// manifest well formed that does not hold its tree.
func rewriteManifest(t testing.TB, fs *FolderStore, m manifest, keep func(packRef) bool) {
	t.Helper()
	m.packs = slices.DeleteFunc(slices.Clone(m.packs), func(p packRef) bool { return !keep(p) })
	b := encodeManifest(m)
	if err := fs.Put(context.Background(), manifestKey(m.tree), bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// TestChecksCatchEveryByte: a pack's head and a manifest fail their
// checks at any byte flipped and at any length cut, and never panic.
func TestChecksCatchEveryByte(t *testing.T) {
	var entries []entry
	for i := range 5 {
		entries = append(entries, entry{hash: snapshot.Hash{byte(i + 1), 9}, kind: snapshot.ObjectBlob, size: int64(10 * (i + 1))})
	}
	head, name := encodeHead(entries)
	if h, _, err := readHead(bytes.NewReader(head), name); err != nil || len(h.entries) != 5 || h.bytes != int64(len(head))+150 {
		t.Fatalf("readHead of a good head: %+v, %v", h, err)
	}
	mf := encodeManifest(manifest{tree: snapshot.Hash{1}, packs: []packRef{{name: snapshot.Hash{3}}, {name: snapshot.Hash{2}, meta: true}, {name: snapshot.Hash{4}}}})
	if m, err := decodeManifest(mf, snapshot.Hash{1}); err != nil || len(m.packs) != 3 || !m.packs[0].meta {
		t.Fatalf("decodeManifest of a good manifest: %+v, %v", m, err)
	}
	if _, err := decodeManifest(mf, snapshot.Hash{2}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a manifest read as another tree's: %v", err)
	}
	for i := range head {
		b := slices.Clone(head)
		b[i] ^= 1
		if _, _, err := readHead(bytes.NewReader(b), name); !errors.Is(err, ErrCorrupt) {
			t.Errorf("head, byte %d flipped: %v", i, err)
		}
		if _, _, err := readHead(bytes.NewReader(head[:i]), name); !errors.Is(err, ErrCorrupt) {
			t.Errorf("head, cut at %d: %v", i, err)
		}
		decodeHead(b) // never panics
	}
	for i := range mf {
		b := slices.Clone(mf)
		b[i] ^= 1
		if _, err := decodeManifest(b, snapshot.Hash{1}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("manifest, byte %d flipped: %v", i, err)
		}
		if _, err := decodeManifest(mf[:i], snapshot.Hash{1}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("manifest, cut at %d: %v", i, err)
		}
	}
}
