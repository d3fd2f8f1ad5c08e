// Package imagetest gives tests and benchmarks what images need without
// the internet: a real OCI registry on loopback (go-containerregistry's
// registry, served over HTTP by this process) and images built from
// files the test names, or from the host's static busybox.
package imagetest

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
	"os/exec"
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
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is an OCI registry on a loopback port of this process.
type Registry struct {
	// Host is its host:port ("127.0.0.1:PORT"), as references name it.
	Host string
	srv  *httptest.Server
	// requests counts every request it was sent.
	requests atomic.Int64
	// hold, when set, is closed to let blob answers finish (HoldBlobs).
	hold atomic.Pointer[chan struct{}]

	mu sync.Mutex
	// blobGets counts the GETs of blobs it was sent, by digest.
	blobGets map[string]int
	// intercept, when set, answers the requests it returns true for.
	intercept func(w http.ResponseWriter, req *http.Request) bool
}

// StartRegistry starts a registry, closed at the test's end.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{blobGets: map[string]int{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		d, blob := BlobDigest(req)
		blob = blob && req.Method == http.MethodGet
		r.mu.Lock()
		if blob {
			r.blobGets[d]++
		}
		intercept := r.intercept
		r.mu.Unlock()
		if intercept != nil && intercept(w, req) {
			return
		}
		if hold := r.hold.Load(); blob && hold != nil {
			inner.ServeHTTP(&heldWriter{ResponseWriter: w, hold: *hold}, req)
			return
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// BlobDigest is the digest a request for a blob (/v2/NAME/blobs/DIGEST)
// is for; false for any other request.
func BlobDigest(req *http.Request) (string, bool) {
	dir, d := path.Split(req.URL.Path)
	if !strings.HasSuffix(dir, "/blobs/") || !strings.HasPrefix(d, "sha256:") {
		return "", false
	}
	return d, true
}

// Intercept makes h see every request first (counted all the same): those it
// returns true for it has answered, the others the registry answers.
// nil ends it.
func (r *Registry) Intercept(h func(w http.ResponseWriter, req *http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intercept = h
}

// HoldBlobs makes every blob answered from now on stop after its first
// heldAfter bytes until release is called (at the test's end at the
// latest): a pull is then seen under way, deterministically.
func (r *Registry) HoldBlobs(t testing.TB) (release func()) {
	ch := make(chan struct{})
	r.hold.Store(&ch)
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return release
}

// heldAfter is how much of a held blob is sent before it waits.
const heldAfter = 64 << 10

// heldWriter sends the first heldAfter bytes of a blob, then waits for
// hold.
type heldWriter struct {
	http.ResponseWriter
	hold   <-chan struct{}
	sent   int
	waited bool
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if w.waited || w.sent+len(p) < heldAfter {
		n, err := w.ResponseWriter.Write(p)
		w.sent += n
		return n, err
	}
	cut := heldAfter - w.sent
	n, err := w.ResponseWriter.Write(p[:cut])
	w.sent += n
	if err != nil {
		return n, err
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	<-w.hold
	w.waited = true
	m, err := w.ResponseWriter.Write(p[cut:])
	return n + m, err
}

// BlobGets is how many blobs were fetched from it so far.
func (r *Registry) BlobGets() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, c := range r.blobGets {
		n += int64(c)
	}
	return n
}

// BlobGetsByDigest is how many times each blob was fetched from it so
// far, by digest: a copy.
func (r *Registry) BlobGetsByDigest() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.blobGets))
	for d, n := range r.blobGets {
		out[d] = n
	}
	return out
}

// Requests is how many requests it was sent so far, of any kind.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// Ref is the full reference of repo:tag or repo@digest in it.
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// Push pushes img as repo:tag ("team/py:3.12") and returns the full
// reference and the manifest's digest.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) (ref, digest string) {
	t.Helper()
	return r.push(t, repoTag, img)
}

// PushIndex is Push for an image index.
func (r *Registry) PushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) (ref, digest string) {
	t.Helper()
	return r.push(t, repoTag, idx)
}

// pushable is what Push and PushIndex push: an image or an index.
type pushable interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

func (r *Registry) push(t testing.TB, repoTag string, x pushable) (ref, digest string) {
	t.Helper()
	ref = r.Ref(repoTag)
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatalf("imagetest: tag %s: %v", ref, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := remote.Push(tag, x, remote.WithContext(ctx)); err != nil {
		t.Fatalf("imagetest: push %s: %v", ref, err)
	}
	d, err := x.Digest()
	if err != nil {
		t.Fatalf("imagetest: digest of %s: %v", ref, err)
	}
	return ref, d.String()
}

// File is one entry of a layer. Its Path is written as given: a test
// of hostile layers may name what no image should ("../x", "/etc/x").
type File struct {
	Path string // inside the image, without a leading slash
	Body string // a regular file's content
	Size int64  // a regular file's size, of zero bytes, when Body is ""
	// Mode is the permission bits: 0 means 0644 for a regular file, 0755
	// for a folder; a symbolic link is always 0777; any other Type is
	// written with Mode as it is.
	Mode int64
	Dir  bool
	Link string // a symbolic link's target, or a hard link's (Type tar.TypeLink)
	// Type is the tar type flag (tar.TypeLink, TypeChar, TypeBlock,
	// TypeFifo...) where Dir and Link do not say it: 0 is a folder for
	// Dir, a symbolic link for Link, a regular file otherwise. A device
	// is 1,3.
	Type     byte
	UID, GID int
	PAX      map[string]string // PAX records, such as SCHILY.xattr.NAME
}

// Layer is a layer holding files, in that order.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	l, err := MakeLayer(files...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// LayerWith is Layer made with opts, such as
// tarball.WithCompression(compression.ZStd).
func LayerWith(t testing.TB, opts []tarball.LayerOption, files ...File) v1.Layer {
	t.Helper()
	l, err := makeLayer(opts, files)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// MakeLayer is Layer for a program.
func MakeLayer(files ...File) (v1.Layer, error) { return makeLayer(nil, files) }

func makeLayer(opts []tarball.LayerOption, files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := writeEntry(tw, f); err != nil {
			return nil, fmt.Errorf("imagetest: layer: %q: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagetest: layer: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, opts...)
	if err != nil {
		return nil, fmt.Errorf("imagetest: layer: %w", err)
	}
	return l, nil
}

// writeEntry writes f's header and content.
func writeEntry(tw *tar.Writer, f File) error {
	h := &tar.Header{
		Name: f.Path, Typeflag: f.Type, Linkname: f.Link, Mode: f.Mode, Uid: f.UID, Gid: f.GID,
		ModTime: time.Unix(1700000000, 0), PAXRecords: f.PAX, Format: tar.FormatPAX,
	}
	if h.Typeflag == 0 {
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
		case f.Link != "":
			h.Typeflag = tar.TypeSymlink
		default:
			h.Typeflag = tar.TypeReg
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if h.Mode == 0 {
			h.Mode = 0o755
		}
	case tar.TypeSymlink:
		h.Mode = 0o777
	case tar.TypeReg:
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		h.Size = int64(len(f.Body))
		if f.Body == "" {
			h.Size = f.Size
		}
	case tar.TypeChar, tar.TypeBlock:
		h.Devmajor, h.Devminor = 1, 3
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	var err error
	if f.Body != "" {
		_, err = io.WriteString(tw, f.Body)
	} else {
		_, err = io.CopyN(tw, zeros{}, f.Size)
	}
	return err
}

// zeros reads as zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Image is an image of layers, for linux on this machine's architecture,
// with env as its config's Env and workdir its WorkingDir.
func Image(t testing.TB, env []string, workdir string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := MakeImage(env, workdir, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// MakeImage is Image for a program.
func MakeImage(env []string, workdir string, layers ...v1.Layer) (v1.Image, error) {
	return makeImage(func(cf *v1.ConfigFile) { cf.Config.Env, cf.Config.WorkingDir = env, workdir }, layers)
}

// ImageWith is an image of layers, for linux on this machine's
// architecture, after mod (may be nil) changed its config: its User, or
// its Architecture to another one.
func ImageWith(t testing.TB, mod func(*v1.ConfigFile), layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := makeImage(mod, layers)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func makeImage(mod func(*v1.ConfigFile), layers []v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("imagetest: image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("imagetest: image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if mod != nil {
		mod(cf)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("imagetest: image config: %w", err)
	}
	return img, nil
}

// BusyboxPath is where Debian's busybox-static installs its binary.
const BusyboxPath = "/usr/bin/busybox"

// Busybox is an image of the host's static busybox: /bin/busybox with
// every applet linked beside it (/bin/sh among them), an /etc/os-release
// saying name, a passwd and group with root, and /marker holding name.
// extra are added in a layer of their own. Its Env sets PATH and
// IMAGE_NAME=name.
func Busybox(t testing.TB, name string, extra ...File) v1.Image {
	t.Helper()
	img, err := MakeBusybox(name, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// MakeBusybox is Busybox for a program.
func MakeBusybox(name string, extra ...File) (v1.Image, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("imagetest: busybox-static is needed (make test installs it): %w", err)
	}
	out, err := exec.Command(BusyboxPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("imagetest: busybox --list-full: %w", err)
	}
	files := []File{
		{Path: "bin", Dir: true}, {Path: "etc", Dir: true}, {Path: "usr", Dir: true}, {Path: "usr/bin", Dir: true},
		{Path: "usr/sbin", Dir: true}, {Path: "sbin", Dir: true}, {Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "bin/busybox", Body: string(bin), Mode: 0o755},
		{Path: "etc/os-release", Body: fmt.Sprintf("NAME=%q\nID=warren-test\n", name)},
		{Path: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\n"},
		{Path: "etc/group", Body: "root:x:0:\n"},
		{Path: "marker", Body: name + "\n"},
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" || applet == "" {
			continue
		}
		files = append(files, File{Path: applet, Link: relTo(path.Dir(applet), "bin/busybox")})
	}
	base, err := MakeLayer(files...)
	if err != nil {
		return nil, err
	}
	layers := []v1.Layer{base}
	if len(extra) > 0 {
		l, err := MakeLayer(extra...)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	return MakeImage([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "IMAGE_NAME=" + name}, "", layers...)
}

// relTo is the relative link from folder dir to target, both relative
// to the image's root.
func relTo(dir, target string) string {
	if dir == "." || dir == "" {
		return target
	}
	return strings.Repeat("../", strings.Count(dir, "/")+1) + target
}

// WriteLayout writes img as an OCI image layout in a tar at file, its
// manifest annotated with refName (org.opencontainers.image.ref.name)
// unless it is "".
func WriteLayout(t testing.TB, file string, img v1.Image, refName string) {
	t.Helper()
	if err := SaveLayout(file, t.TempDir(), img, refName); err != nil {
		t.Fatal(err)
	}
}

// WriteLayoutDir writes img as an OCI image layout in the folder dir
// (made if missing), untarred, annotated as WriteLayout does: for a
// test that changes the layout before it tars it.
func WriteLayoutDir(t testing.TB, dir string, img v1.Image, refName string) {
	t.Helper()
	if err := saveLayoutDir(dir, img, refName); err != nil {
		t.Fatal(err)
	}
}

// SaveLayout is WriteLayout for a program, which names the empty
// folder the layout is written in before it is tarred.
func SaveLayout(file, dir string, img v1.Image, refName string) error {
	if err := saveLayoutDir(dir, img, refName); err != nil {
		return err
	}
	if out, err := exec.Command("tar", "-C", dir, "-cf", file, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("imagetest: tar the layout: %w: %s", err, out)
	}
	return nil
}

func saveLayoutDir(dir string, img v1.Image, refName string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("imagetest: layout: %w", err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return fmt.Errorf("imagetest: layout: %w", err)
	}
	return nil
}

// WriteDockerSave writes img as a docker save tarball at file, tagged tag.
func WriteDockerSave(t testing.TB, file string, img v1.Image, tag string) {
	t.Helper()
	tg, err := name.NewTag(tag)
	if err != nil {
		t.Fatalf("imagetest: tag %s: %v", tag, err)
	}
	if err := tarball.WriteToFile(file, tg, img); err != nil {
		t.Fatalf("imagetest: docker save tarball: %v", err)
	}
}

// MediaTypes makes sure img is served as an OCI image (not Docker's
// v2 schema 2), for tests that care.
func MediaTypes(img v1.Image) v1.Image {
	return mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)
}

// HostTree are the entries of a layer holding a copy of the host's
// folder onHost at inImage ("usr/lib/locale/C.utf8"), its files' content
// and modes, its folders, no links: for what programs of HostPrograms
// read (a locale, say).
func HostTree(inImage, onHost string) ([]File, error) {
	var files []File
	for d := path.Dir(inImage); d != "." && d != "/"; d = path.Dir(d) {
		files = append([]File{{Path: d, Dir: true}}, files...)
	}
	err := filepath.WalkDir(onHost, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(onHost, p)
		if err != nil {
			return err
		}
		at := path.Join(inImage, filepath.ToSlash(rel))
		switch {
		case e.IsDir():
			files = append(files, File{Path: at, Dir: true})
		case e.Type().IsRegular():
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			files = append(files, File{Path: at, Body: string(body), Mode: int64(info.Mode().Perm())})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("imagetest: copy %s: %w", onHost, err)
	}
	return files, nil
}

// HostPrograms are the entries of a layer holding host programs and the
// shared libraries they load (as ldd(1) lists them), at the paths the
// dynamic loader looks for them: programs maps each program's path in
// the image ("bin/bash") to its path on the host. The folders on the way
// are made. For an image whose tests need a real bash, perl...
func HostPrograms(programs map[string]string) ([]File, error) {
	seen := map[string]bool{}
	var files []File
	dir := func(p string) {
		var parts []string
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			parts = append(parts, d)
		}
		for i := len(parts) - 1; i >= 0; i-- {
			if !seen[parts[i]] {
				seen[parts[i]] = true
				files = append(files, File{Path: parts[i], Dir: true})
			}
		}
	}
	add := func(inImage, onHost string, mode int64) error {
		inImage = strings.TrimPrefix(inImage, "/")
		if seen[inImage] {
			return nil
		}
		body, err := os.ReadFile(onHost) // follows the host's links: the content
		if err != nil {
			return fmt.Errorf("imagetest: %w", err)
		}
		dir(inImage)
		seen[inImage] = true
		files = append(files, File{Path: inImage, Body: string(body), Mode: mode})
		return nil
	}
	names := make([]string, 0, len(programs))
	for inImage := range programs {
		names = append(names, inImage)
	}
	sort.Strings(names) // the same layer, the same digest, at every run
	for _, inImage := range names {
		onHost := programs[inImage]
		if err := add(inImage, onHost, 0o755); err != nil {
			return nil, err
		}
		out, err := exec.Command("ldd", onHost).Output()
		if err != nil {
			return nil, fmt.Errorf("imagetest: ldd %s: %w", onHost, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
			// "/lib64/ld-linux-x86-64.so.2 (0x...)".
			f := strings.Fields(line)
			lib := ""
			switch {
			case len(f) >= 3 && f[1] == "=>":
				lib = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				lib = f[0]
			}
			if strings.HasPrefix(lib, "/") {
				if err := add(lib, lib, 0o755); err != nil {
					return nil, err
				}
			}
		}
	}
	return files, nil
}
