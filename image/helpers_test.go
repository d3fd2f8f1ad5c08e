package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// testRegistry is go-containerregistry's registry on loopback, behind a
// handler that counts requests and blob GETs and lets a test answer some
// requests itself (hook).
type testRegistry struct {
	srv      *httptest.Server
	host     string // 127.0.0.1:PORT
	requests atomic.Int64

	mu       sync.Mutex
	blobGets map[string]int // by digest
	hook     func(w http.ResponseWriter, r *http.Request) bool
}

func newRegistry(t testing.TB) *testRegistry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr := &testRegistry{blobGets: map[string]int{}}
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.requests.Add(1)
		tr.mu.Lock()
		if d, ok := blobOf(r); ok && r.Method == http.MethodGet {
			tr.blobGets[d]++
		}
		hook := tr.hook
		tr.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.srv.Close)
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	return tr
}

// blobOf is the digest a blob request is for.
func blobOf(r *http.Request) (string, bool) {
	dir, d := path.Split(r.URL.Path)
	if !strings.HasSuffix(dir, "/blobs/") || !strings.HasPrefix(d, "sha256:") {
		return "", false
	}
	return d, true
}

func (tr *testRegistry) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.hook = h
}

func (tr *testRegistry) gets(digest string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.blobGets[digest]
}

func (tr *testRegistry) allGets() map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string]int{}
	for k, v := range tr.blobGets {
		out[k] = v
	}
	return out
}

// ref is repo:tag (or repo@digest) in this registry.
func (tr *testRegistry) ref(s string) string { return tr.host + "/" + s }

// push writes img as repoTag ("app:1") and returns its digest.
func (tr *testRegistry) push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(tr.ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func (tr *testRegistry) pushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(tr.ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// ent is a tar entry of a test layer. Typeflag 0 is a regular file.
type ent struct {
	name     string
	typ      byte
	body     string
	size     int64 // of zeros, when body is ""
	link     string
	mode     int64
	uid, gid int
	pax      map[string]string
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777}
}
func hardlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeLink, link: to, mode: 0o644}
}

// layerTar is the tar of ents, written as given: hostile names too.
func layerTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{
			Name: e.name, Typeflag: typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(1700000000, 0), PAXRecords: e.pax, Format: tar.FormatPAX,
		}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
			if e.body == "" {
				hdr.Size = e.size
			}
		}
		if typ == tar.TypeChar || typ == tar.TypeBlock {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			var err error
			if e.body != "" {
				_, err = io.WriteString(tw, e.body)
			} else {
				_, err = io.CopyN(tw, zeros{}, e.size)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// layerOf is a gzip layer of raw tar bytes.
func layerOf(t testing.TB, raw []byte, opts ...tarball.LayerOption) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf is an image of layers for this machine's platform; mod (may be
// nil) changes its config.
func imageOf(t testing.TB, mod func(*v1.ConfigFile), layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if mod != nil {
		mod(cf)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// simpleImage is an image of one layer of ents.
func simpleImage(t testing.TB, ents ...ent) v1.Image {
	return imageOf(t, nil, layerOf(t, layerTar(t, ents...)))
}

var testMountPoints = MountPoints{
	Dirs:  []string{"/workspace", "/tmp", "/dev", "/proc", "/home/agent"},
	Files: []string{"/etc/resolv.conf", "/etc/hosts", "/etc/passwd", "/etc/group"},
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: t.Output()})
}

// sandbox is a folder holding the store's folder and, beside it, a canary
// folder that no image may change.
type sandbox struct {
	base, dir, canary string
	snap              map[string]string
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	base := t.TempDir()
	sb := &sandbox{base: base, dir: filepath.Join(base, "store"), canary: filepath.Join(base, "canary")}
	if err := os.MkdirAll(filepath.Join(sb.canary, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.canary, "keep"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.canary, "sub", "keep"), []byte("canary too"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb.snap = sb.snapshot(t)
	return sb
}

// snapshot describes everything in base but the store's folder.
func (sb *sandbox) snapshot(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(sb.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == sb.dir {
			return fs.SkipDir
		}
		if p == sb.base {
			return nil // the store's folder is made in it
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d %v", info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCanary fails t if anything beside the store's folder changed.
func (sb *sandbox) checkCanary(t testing.TB) {
	t.Helper()
	now := sb.snapshot(t)
	for p, d := range now {
		if sb.snap[p] != d {
			t.Errorf("outside the store: %s is %q, was %q", p, d, sb.snap[p])
		}
	}
	for p := range sb.snap {
		if _, ok := now[p]; !ok {
			t.Errorf("outside the store: %s is gone", p)
		}
	}
}

// openStore opens a store in sb (a new sandbox when nil) for reg's
// registry (none when nil), after mod changes the Config.
func openStore(t testing.TB, sb *sandbox, reg *testRegistry, mod func(*Config)) *Store {
	t.Helper()
	testenv.RequireRoot(t)
	if sb == nil {
		sb = newSandbox(t)
	}
	cfg := Config{Dir: sb.dir, MountPoints: testMountPoints, Logger: testLogger(t)}
	if reg != nil {
		cfg.Registries = []string{reg.host}
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkEmpty fails t unless the store holds nothing: no image listed, no
// tree, no work folder, no bytes.
func checkEmpty(t testing.TB, s *Store) {
	t.Helper()
	if l := s.List(); len(l) != 0 {
		t.Errorf("List() = %v, want none", l)
	}
	if b := s.Bytes(); b != 0 {
		t.Errorf("Bytes() = %d, want 0", b)
	}
	if p := s.pending.Load(); p != 0 {
		t.Errorf("pending = %d, want 0", p)
	}
	for _, d := range []string{s.tmp, s.roots} {
		if names := dirNames(t, d); len(names) != 0 {
			t.Errorf("%s holds %v, want nothing", d, names)
		}
	}
}

func dirNames(t testing.TB, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testenvRoot(t testing.TB) { testenv.RequireRoot(t) }

// treeBytes is what Image.Bytes should be for the tree at root: each
// inode's size once, 4 KiB a folder, a link's target length.
func treeBytes(t testing.TB, root string) int64 {
	t.Helper()
	var n int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n += dirBytes
		case unix.S_IFLNK:
			n += st.Size
		case unix.S_IFREG:
			if !seen[st.Ino] {
				seen[st.Ino] = true
				n += st.Size
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
