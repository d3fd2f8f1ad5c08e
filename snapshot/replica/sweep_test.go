package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"warren/snapshot"
)

// sweepEnv is a store with trees uploaded by one server, to sweep.
type sweepEnv struct {
	store Store
	a     *server
	dirs  map[snapshot.Hash]string // each tree's folder, to check a fetch against
}

// tree builds and uploads a tree: base's files but its big one, if any
// (base's packs reused), files drawn from seed and, with big, a file over
// 4 MiB (a pack of its own).
func (e *sweepEnv) tree(t *testing.T, seed uint64, base snapshot.Hash, big bool) snapshot.Hash {
	t.Helper()
	dir := t.TempDir()
	var opts UploadOptions
	if !base.IsZero() {
		if err := os.CopyFS(dir, os.DirFS(e.dirs[base])); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "big"))
		opts.Bases = []snapshot.Hash{base}
	}
	sub := filepath.Join(dir, fmt.Sprintf("s%d", seed))
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	makeFiles(t, sub, 3, 20, 200, seed)
	if big {
		b := make([]byte, 5<<20)
		rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
		if err := os.WriteFile(filepath.Join(dir, "big"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tree := e.a.build(t, dir, snapshot.Hash{}, nil)
	e.a.upload(t, e.store, tree, opts)
	e.dirs[tree] = dir
	return tree
}

// fetchable fails the test unless each tree comes whole into a new
// server's repository.
func (e *sweepEnv) fetchable(t *testing.T, trees ...snapshot.Hash) {
	t.Helper()
	b := newServer(t)
	for _, tree := range trees {
		b.fetch(t, e.store, tree)
		checkTree(t, b.repo, tree, e.dirs[tree])
	}
}

// packsOf are the packs tree's manifest names.
func (e *sweepEnv) packsOf(t *testing.T, tree snapshot.Hash) []string {
	t.Helper()
	m, err := readManifest(context.Background(), e.store, tree)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m.packs {
		out = append(out, packKey(p.name))
	}
	return out
}

func liveOf(trees ...snapshot.Hash) LiveFunc {
	return func(context.Context) ([]snapshot.Hash, error) { return trees, nil }
}

func (e *sweepEnv) sweep(t *testing.T, live LiveFunc, grace time.Duration, at time.Time) SweepStats {
	t.Helper()
	st, err := Sweep(context.Background(), e.store, live, SweepOptions{Grace: grace, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	t.Logf("sweep: %+v", st)
	return st
}

// testSweep is the Sweep's suite over the stores open makes. age, if not
// nil, sets a key's ModTime back by d (a folder's; S3's cannot be).
func testSweep(t *testing.T, open func(t *testing.T) Store, age func(t *testing.T, s Store, key string, d time.Duration)) {
	const grace = time.Hour
	newEnv := func(t *testing.T) *sweepEnv {
		return &sweepEnv{store: open(t), a: newServer(t), dirs: make(map[snapshot.Hash]string)}
	}

	// A dead tree's manifest goes at once; its own packs a grace after,
	// never those it shares with a live tree; live trees stay whole.
	t.Run("dead and live", func(t *testing.T) {
		e := newEnv(t)
		t1 := e.tree(t, 1, snapshot.Hash{}, true)
		t2 := e.tree(t, 2, t1, false) // t1's packs but the big file's, and its own
		t3 := e.tree(t, 3, snapshot.Hash{}, false)
		p1, p2 := e.packsOf(t, t1), e.packsOf(t, t2)
		own1 := slices.DeleteFunc(slices.Clone(p1), func(k string) bool { return slices.Contains(p2, k) })
		if len(own1) == 0 || len(own1) == len(p1) {
			t.Fatalf("t1's packs %q, t2's %q: want some shared, some not", p1, p2)
		}

		now := time.Now()
		st := e.sweep(t, liveOf(t2, t3), grace, now)
		if st.Manifests != 1 || st.Packs != 0 || st.KeptManifests != 2 || st.Held != len(own1) {
			t.Errorf("first sweep: %+v; want t1's manifest deleted, its %d own packs held", st, len(own1))
		}
		held := keys(t, e.store)
		if slices.Contains(held, manifestKey(t1)) || countPrefix(held, holdPrefix) != 1 {
			t.Errorf("store after the first sweep: %q; want t1's manifest gone, one hold record", held)
		}
		e.fetchable(t, t2, t3)

		// Later than the grace: t1's own packs and the record go.
		st = e.sweep(t, liveOf(t2, t3), grace, now.Add(2*grace+time.Minute))
		if st.Manifests != 0 || st.Packs != len(own1) || st.Held != 0 || st.Freed <= 0 {
			t.Errorf("second sweep: %+v; want t1's %d own packs deleted", st, len(own1))
		}
		held = keys(t, e.store)
		for _, k := range own1 {
			if slices.Contains(held, k) {
				t.Errorf("t1's pack %s is still there", k)
			}
		}
		if countPrefix(held, holdPrefix) != 0 {
			t.Errorf("store after the second sweep: %q; want no hold record", held)
		}
		e.fetchable(t, t2, t3)

		// Nothing live: everything goes (a grace later for the packs).
		e.sweep(t, liveOf(), grace, now.Add(2*grace+time.Minute))
		e.sweep(t, liveOf(), grace, now.Add(4*grace))
		if held := keys(t, e.store); len(held) != 0 {
			t.Errorf("nothing live, the store holds %q", held)
		}
	})

	// A pack no manifest names stays while younger than the grace: an
	// upload may be writing it, before its manifest.
	t.Run("young packs", func(t *testing.T) {
		e := newEnv(t)
		t1 := e.tree(t, 4, snapshot.Hash{}, false)
		if err := e.store.Delete(context.Background(), manifestKey(t1)); err != nil { // an upload under way
			t.Fatal(err)
		}
		n := len(keys(t, e.store))
		st := e.sweep(t, liveOf(), grace, time.Now())
		if st.Packs != 0 || st.Young != n {
			t.Errorf("sweep: %+v; want the %d packs kept, young", st, n)
		}
		st = e.sweep(t, liveOf(), grace, time.Now().Add(grace+time.Minute))
		if st.Packs != n {
			t.Errorf("sweep past the grace: %+v; want the %d packs deleted", st, n)
		}
	})

	// An upload that writes its manifest after the sweep listed the
	// manifests (while it asks for the live trees) loses no pack, even
	// one found there, old, from an upload cut short long ago.
	t.Run("racing upload", func(t *testing.T) {
		e := newEnv(t)
		base := e.tree(t, 5, snapshot.Hash{}, false)
		dir := t.TempDir()
		makeFiles(t, dir, 3, 20, 200, 6)
		racer := e.a.build(t, dir, snapshot.Hash{}, nil)
		e.dirs[racer] = dir
		if age != nil {
			// Cut short long ago: its packs there, old, no manifest.
			e.a.upload(t, e.store, racer, UploadOptions{})
			if err := e.store.Delete(context.Background(), manifestKey(racer)); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys(t, e.store) {
				if k != manifestKey(base) && !slices.Contains(e.packsOf(t, base), k) {
					age(t, e.store, k, 3*grace)
				}
			}
		}
		var once sync.Once
		live := func(ctx context.Context) ([]snapshot.Hash, error) {
			once.Do(func() { e.a.upload(t, e.store, racer, UploadOptions{Refresh: grace / 4}) })
			return []snapshot.Hash{base}, nil // the racer's checkpoint not yet listed
		}
		e.sweep(t, live, grace, time.Now())
		e.fetchable(t, base, racer)
		// Listed live now, it stays whatever the time.
		e.sweep(t, liveOf(base, racer), grace, time.Now().Add(3*grace))
		e.fetchable(t, base, racer)
	})

	// A tree live again while the sweep deletes its manifest (a new
	// checkpoint of the same content, whose upload found it there) has
	// it put back; so has one whose sweep crashed before sealing.
	t.Run("live again", func(t *testing.T) {
		e := newEnv(t)
		t1 := e.tree(t, 7, snapshot.Hash{}, false)
		calls := 0
		live := func(ctx context.Context) ([]snapshot.Hash, error) {
			calls++
			if calls == 1 {
				return nil, nil
			}
			return []snapshot.Hash{t1}, nil
		}
		st := e.sweep(t, live, grace, time.Now())
		if st.Manifests != 1 || st.Restored != 1 {
			t.Errorf("sweep: %+v; want the manifest deleted and put back", st)
		}
		e.fetchable(t, t1)
		// Past the grace, t1 live: every pack stays.
		st = e.sweep(t, liveOf(t1), grace, time.Now().Add(3*grace))
		if st.Packs != 0 {
			t.Errorf("sweep: %+v; want no pack deleted", st)
		}
		e.fetchable(t, t1)

		// A sweep that crashed after its deletes: an open hold record.
		raw, err := e.read(t1)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := decodeManifest(raw, t1)
		h := &hold{manifests: []heldManifest{{m: m, raw: raw}}}
		b := h.encode()
		ctx := context.Background()
		if err := e.store.Put(ctx, holdKey(time.Now()), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Delete(ctx, manifestKey(t1)); err != nil {
			t.Fatal(err)
		}
		st = e.sweep(t, liveOf(t1), grace, time.Now())
		if st.Restored != 1 {
			t.Errorf("sweep: %+v; want the manifest put back from the open record", st)
		}
		e.fetchable(t, t1)
	})

	// An error listing the live trees, or reading a manifest, deletes
	// nothing.
	t.Run("fails closed", func(t *testing.T) {
		e := newEnv(t)
		t1 := e.tree(t, 8, snapshot.Hash{}, false)
		t2 := e.tree(t, 9, snapshot.Hash{}, false)
		before := keys(t, e.store)
		boom := errors.New("the metadata store is away")
		_, err := Sweep(context.Background(), e.store, func(context.Context) ([]snapshot.Hash, error) { return nil, boom },
			SweepOptions{Grace: 0})
		if !errors.Is(err, boom) {
			t.Errorf("Sweep: %v, want %v", err, boom)
		}
		// t2's manifest cut short: a corrupt manifest.
		raw, err := e.read(t2)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := e.store.Put(ctx, manifestKey(t2), bytes.NewReader(raw[:len(raw)-5]), int64(len(raw)-5)); err != nil {
			t.Fatal(err)
		}
		_, err = Sweep(ctx, e.store, liveOf(t1), SweepOptions{Grace: 0})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("Sweep over a corrupt manifest: %v, want ErrCorrupt", err)
		}
		if after := keys(t, e.store); !slices.Equal(before, after) {
			t.Errorf("the store held %q, holds %q after sweeps that failed", before, after)
		}
	})
}

// read reads tree's manifest as the store holds it.
func (e *sweepEnv) read(tree snapshot.Hash) ([]byte, error) {
	s := &sweeper{store: e.store}
	return s.read(context.Background(), manifestKey(tree), maxManifest)
}

func TestSweepFolder(t *testing.T) {
	testSweep(t, func(t *testing.T) Store { return newFolderStore(t) }, func(t *testing.T, s Store, key string, d time.Duration) {
		p := s.(*FolderStore).path(key)
		at := time.Now().Add(-d)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	})
	// A Put a crash cut short leaves a temporary file: gone a grace later.
	s := newFolderStore(t)
	tmp := filepath.Join(s.tmp, "put-cut")
	if err := os.WriteFile(tmp, []byte("half a pack"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Sweep(context.Background(), s, liveOf(), SweepOptions{Grace: time.Hour})
	if err != nil || st.Aborted != 0 {
		t.Errorf("Sweep: %+v, %v; want the young temporary file kept", st, err)
	}
	st, err = Sweep(context.Background(), s, liveOf(), SweepOptions{Grace: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil || st.Aborted != 1 {
		t.Errorf("Sweep: %+v, %v; want the old temporary file removed", st, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file is still there: %v", err)
	}
}

// testSweepAborted: a multipart upload cut short is aborted once older
// than the grace; keys outside the store's prefix are not its.
func testSweepAborted(t *testing.T, s *S3Store) {
	ctx := context.Background()
	key := s.prefix + "packs/" + strings.Repeat("ab", 32)
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("begin a multipart upload: %v", err)
	}
	if _, err := s.core.PutObjectPart(ctx, s.bucket, key, id, 1, bytes.NewReader(make([]byte, 5<<20)), 5<<20, minio.PutObjectPartOptions{}); err != nil {
		t.Fatalf("send a part: %v", err)
	}
	count := func() int {
		n := 0
		for u := range s.client.ListIncompleteUploads(ctx, s.bucket, s.prefix, true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			if u.UploadID == id {
				n++
			}
		}
		return n
	}
	if count() != 1 {
		t.Fatal("the server does not list the multipart upload begun")
	}
	st, err := Sweep(ctx, s, liveOf(), SweepOptions{Grace: time.Hour})
	if err != nil || st.Aborted != 0 || count() != 1 {
		t.Errorf("Sweep: %+v, %v; want the young upload kept", st, err)
	}
	st, err = Sweep(ctx, s, liveOf(), SweepOptions{Grace: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil || st.Aborted != 1 || count() != 0 {
		t.Errorf("Sweep: %+v, %v; want the old upload aborted", st, err)
	}
}
