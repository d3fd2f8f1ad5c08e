package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
	"warren/snapshot"
)

// testStore is the conformance suite every Store runs: open returns an
// empty store, cleaned up at the test's end.
func testStore(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	put := func(t *testing.T, s Store, key, content string) {
		t.Helper()
		if err := s.Put(ctx, key, strings.NewReader(content), int64(len(content))); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
	}
	// holds fails the test unless key holds content (or, with want
	// "", unless key is missing).
	holds := func(t *testing.T, s Store, key, want string) {
		t.Helper()
		info, serr := s.Stat(ctx, key)
		size := info.Size
		rc, gerr := s.Get(ctx, key)
		if want == "" {
			if !errors.Is(serr, ErrNotFound) || !errors.Is(gerr, ErrNotFound) {
				t.Errorf("%q: Stat %v, Get %v; want ErrNotFound from both", key, serr, gerr)
			}
			if gerr == nil {
				rc.Close()
			}
			return
		}
		if serr != nil || size != int64(len(want)) || info.Key != key {
			t.Errorf("Stat(%q): got %+v, %v; want %d bytes", key, info, serr, len(want))
		}
		// Put within the test: a store's clock may be a little off ours.
		if age := time.Since(info.ModTime); serr == nil && (age < -time.Minute || age > time.Hour) {
			t.Errorf("Stat(%q): modified %v, %v ago", key, info.ModTime, age)
		}
		if gerr != nil {
			t.Fatalf("Get(%q): %v", key, gerr)
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		if err != nil || string(got) != want {
			t.Errorf("Get(%q): got %q, %v; want %q", key, got, err, want)
		}
	}
	list := func(t *testing.T, s Store, prefix string) []string {
		t.Helper()
		var keys []string
		err := s.List(ctx, prefix, func(i Info) error {
			keys = append(keys, i.Key)
			if st, err := s.Stat(ctx, i.Key); err != nil || st.Size != i.Size || !st.ModTime.Equal(i.ModTime) && st.ModTime.Sub(i.ModTime).Abs() > time.Second {
				t.Errorf("List(%q): %+v, but Stat: %+v, %v", prefix, i, st, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		slices.Sort(keys)
		return keys
	}

	t.Run("PutGet", func(t *testing.T) {
		s := open(t)
		put(t, s, "packs/one", "first")
		holds(t, s, "packs/one", "first")
		put(t, s, "packs/one", "second, longer")
		holds(t, s, "packs/one", "second, longer")
		put(t, s, "empty", "")
		if info, err := s.Stat(ctx, "empty"); err != nil || info.Size != 0 {
			t.Errorf("Stat(empty): got %+v, %v", info, err)
		}
		big := make([]byte, 3<<20+17)
		rand.Read(big)
		if err := s.Put(ctx, "a/b/c/big", bytes.NewReader(big), int64(len(big))); err != nil {
			t.Fatal(err)
		}
		holds(t, s, "a/b/c/big", string(big))
	})
	t.Run("Missing", func(t *testing.T) {
		s := open(t)
		holds(t, s, "trees/none", "")
		put(t, s, "a/b", "x")
		holds(t, s, "a", "") // a folder on the way, for some stores: no key
		if err := s.Delete(ctx, "trees/none"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
	})
	t.Run("AllOrNothing", func(t *testing.T) {
		s := open(t)
		put(t, s, "k", "before")
		broken := errors.New("the source failed")
		for _, tc := range []struct {
			name string
			r    io.Reader
			size int64
		}{
			{"shorter than its size", strings.NewReader("abc"), 10},
			{"longer than its size", strings.NewReader("abcdefghijklmnop"), 10},
			{"a read error", io.MultiReader(strings.NewReader("abc"), errReader{broken}), 10},
		} {
			if err := s.Put(ctx, "k", tc.r, tc.size); err == nil {
				t.Errorf("%s: Put succeeded", tc.name)
			}
			if err := s.Put(ctx, "new", tc.r, tc.size); err == nil {
				t.Errorf("%s: Put succeeded", tc.name)
			}
			holds(t, s, "k", "before")
			holds(t, s, "new", "")
		}
		if got := list(t, s, ""); !slices.Equal(got, []string{"k"}) {
			t.Errorf("after failed Puts, the store lists %q, want only k", got)
		}
	})
	t.Run("List", func(t *testing.T) {
		s := open(t)
		for _, k := range []string{"packs/aa", "packs/ab", "packs/b", "packsx", "trees/t1", "a/b/c"} {
			put(t, s, k, k)
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"a/b/c", "packs/aa", "packs/ab", "packs/b", "packsx", "trees/t1"}},
			{"packs/", []string{"packs/aa", "packs/ab", "packs/b"}},
			{"packs/a", []string{"packs/aa", "packs/ab"}},
			{"packs", []string{"packs/aa", "packs/ab", "packs/b", "packsx"}},
			{"tr", []string{"trees/t1"}},
			{"a/", []string{"a/b/c"}},
			{"nothing/", nil},
		} {
			if got := list(t, s, tc.prefix); !slices.Equal(got, tc.want) {
				t.Errorf("List(%q): got %q, want %q", tc.prefix, got, tc.want)
			}
		}
		stop := errors.New("enough")
		n := 0
		err := s.List(ctx, "packs/", func(Info) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("List stopped by fn: got %v after %d calls, want fn's error after 1", err, n)
		}
		if err := s.Delete(ctx, "packs/ab"); err != nil {
			t.Fatal(err)
		}
		holds(t, s, "packs/ab", "")
		if got := list(t, s, "packs/"); !slices.Equal(got, []string{"packs/aa", "packs/b"}) {
			t.Errorf("after Delete, List: got %q", got)
		}
	})
	t.Run("BadKeys", func(t *testing.T) {
		s := open(t)
		put(t, s, "good", "x")
		for _, key := range badKeys {
			if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, errBadKey) {
				t.Errorf("Put(%q): got %v, want errBadKey", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, errBadKey) {
				t.Errorf("Get(%q): got %v, want errBadKey", key, err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, errBadKey) {
				t.Errorf("Stat(%q): got %v, want errBadKey", key, err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, errBadKey) {
				t.Errorf("Delete(%q): got %v, want errBadKey", key, err)
			}
		}
		for _, prefix := range []string{"..", "../", "a/../", "/", ".tmp/", "a//"} {
			if err := s.List(ctx, prefix, func(Info) error { return nil }); !errors.Is(err, errBadKey) {
				t.Errorf("List(%q): got %v, want errBadKey", prefix, err)
			}
		}
		if got := list(t, s, ""); !slices.Equal(got, []string{"good"}) {
			t.Errorf("the store lists %q, want only good", got)
		}
	})
}

// badKeys break the key rule: every store refuses them.
var badKeys = []string{
	"", "..", ".", "../x", "a/../../x", "a/..", "/abs", "a//b", "a/", ".hidden", "a/.tmp",
	".tmp/put-1", "a\\b", "a b", "nul\x00", "é", strings.Repeat("k", maxKey+1),
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// newFolderStore opens a FolderStore in a new temporary folder.
func newFolderStore(t *testing.T) *FolderStore {
	t.Helper()
	s, err := NewFolder(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatalf("NewFolder: %v", err)
	}
	return s
}

func TestFolderStore(t *testing.T) {
	testStore(t, func(t *testing.T) Store { return newFolderStore(t) })
}

// TestFolderStoreStaysInside: no key reaches outside the store's folder,
// whatever it is made of; and what a crashed Put left is removed once old.
func TestFolderStoreStaysInside(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	canary := filepath.Join(parent, "canary")
	if err := os.WriteFile(canary, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewFolder(filepath.Join(parent, "store"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"../canary", "a/../../canary", "../store2/x", "/" + canary} {
		if err := s.Put(ctx, key, strings.NewReader("bad"), 3); !errors.Is(err, errBadKey) {
			t.Errorf("Put(%q): got %v, want errBadKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, errBadKey) {
			t.Errorf("Delete(%q): got %v, want errBadKey", key, err)
		}
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "untouched" {
		t.Errorf("canary: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 2 {
		t.Errorf("the store's parent holds %d names, want 2 (canary, store)", len(ents))
	}

	old, fresh := filepath.Join(s.tmp, "put-old"), filepath.Join(s.tmp, "put-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("half a pack"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFolder(s.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a temporary file two hours old is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh temporary file (a Put under way) was removed: %v", err)
	}
}

// newS3Store opens a store on srv's bucket, below a new prefix, emptied
// at the test's end.
func newS3Store(t *testing.T, srv *testenv.S3, bucket string) *S3Store {
	t.Helper()
	var rnd [6]byte
	rand.Read(rnd[:])
	u := srv.URL(bucket, "replica-test-"+hex.EncodeToString(rnd[:]))
	ctx := context.Background()
	s, err := NewS3(ctx, u)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	t.Cleanup(func() {
		var keys []string
		s.List(ctx, "", func(i Info) error { keys = append(keys, i.Key); return nil })
		for _, k := range keys {
			s.Delete(ctx, k)
		}
	})
	return s
}

// TestS3Store: the store's suite, and an upload and a fetch, against a
// real S3-compatible server on loopback (testenv.S3Server); and refused
// credentials are an error at NewS3.
func TestS3Store(t *testing.T) {
	srv := testenv.S3Server(t)
	srv.MakeBucket(t, "warren")
	srv.UseCredentials(t)
	t.Run("suite", func(t *testing.T) {
		testStore(t, func(t *testing.T) Store { return newS3Store(t, srv, "warren") })
	})
	t.Run("upload and fetch", func(t *testing.T) {
		dir := t.TempDir()
		makeFiles(t, dir, 20, 100, 60, 3)
		a, b := newServer(t), newServer(t)
		tree := a.build(t, dir, snapshot.Hash{}, nil)
		store := newS3Store(t, srv, "warren")
		st := a.upload(t, store, tree, UploadOptions{})
		if st.Objects < 2000 || st.PacksSent < 1 || st.PacksSent > 4 {
			t.Errorf("upload over S3: %d objects in %d packs sent; want ~2,000 objects in a few packs", st.Objects, st.PacksSent)
		}
		fst := b.fetch(t, store, tree)
		if fst.Objects != st.Objects {
			t.Errorf("fetch over S3: %d objects, want %d", fst.Objects, st.Objects)
		}
		if err := b.repo.Raw().Objects(context.Background(), tree, func(h snapshot.Hash, _ snapshot.ObjectKind) error {
			if !b.repo.Raw().Has(h) {
				return fmt.Errorf("object %s missing after the fetch", h)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		testSweep(t, func(t *testing.T) Store { return newS3Store(t, srv, "warren") }, nil)
	})
	t.Run("sweep aborted uploads", func(t *testing.T) {
		testSweepAborted(t, newS3Store(t, srv, "warren"))
	})
	t.Run("refused credentials", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
		u := fmt.Sprintf("s3://warren/x?endpoint=%s&region=%s&insecure=1", srv.Host, srv.Region)
		if _, err := NewS3(context.Background(), u); err == nil {
			t.Error("NewS3 with a wrong secret succeeded")
		}
	})
}

func TestNewS3URL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		bucket   string
		prefix   string
		endpoint string
		secure   bool
		region   string
	}{
		{"s3://bkt?endpoint=127.0.0.1:9000&insecure=1", "bkt", "", "127.0.0.1:9000", false, ""},
		{"s3://bkt/a/b/?endpoint=store.example:443&region=eu-1", "bkt", "a/b/", "store.example:443", true, "eu-1"},
		{"s3://bkt/warren?endpoint=h&insecure=0", "bkt", "warren/", "h", true, ""},
	} {
		s, endpoint, opts, err := parseS3(tc.url)
		if err != nil {
			t.Errorf("parseS3(%q): %v", tc.url, err)
			continue
		}
		if s.bucket != tc.bucket || s.prefix != tc.prefix || endpoint != tc.endpoint || opts.Secure != tc.secure || opts.Region != tc.region {
			t.Errorf("parseS3(%q): got bucket %q prefix %q endpoint %q secure %v region %q; want %q %q %q %v %q",
				tc.url, s.bucket, s.prefix, endpoint, opts.Secure, opts.Region, tc.bucket, tc.prefix, tc.endpoint, tc.secure, tc.region)
		}
	}
	for _, bad := range []string{
		"",
		"/local/folder",
		"http://bkt?endpoint=h",
		"s3://?endpoint=h",
		"s3://bkt",
		"s3://bkt?endpoint=",
		"s3://bkt?endpoint=http://h:9000",
		"s3://bkt/../x?endpoint=h",
		"s3://bkt/.hidden?endpoint=h",
		"s3://bkt?endpoint=h&insecure=maybe",
		"s3://bkt?endpoint=h&endpoint=i",
		"s3://bkt?endpoint=h&secret=s",
		"s3://user:pw@bkt?endpoint=h",
		"s3://bkt:99?endpoint=h",
	} {
		if _, _, _, err := parseS3(bad); err == nil {
			t.Errorf("parseS3(%q): no error", bad)
		}
	}
}

// TestNewS3Unreachable: a server that is not there is an error at NewS3,
// at once (the client does not retry).
func TestNewS3Unreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	_, err = NewS3(ctx, "s3://bkt/p?endpoint="+addr+"&insecure=1&region=us-east-1")
	if err == nil || !strings.Contains(err.Error(), "reach bucket") || ctx.Err() != nil {
		t.Errorf("got %v, want an error saying the bucket could not be reached, before the deadline", err)
	}
}
