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
	// blobGets counts the GETs of blobs it answered.
	blobGets atomic.Int64
	// hold, when set, is closed to let blob answers finish (HoldBlobs).
	hold atomic.Pointer[chan struct{}]
}

// StartRegistry starts a registry, closed at the test's end.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
			if hold := r.hold.Load(); hold != nil {
				inner.ServeHTTP(&heldWriter{ResponseWriter: w, hold: *hold}, req)
				return
			}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
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
func (r *Registry) BlobGets() int64 { return r.blobGets.Load() }

// Push pushes img as repo:tag ("team/py:3.12") and returns the full
// reference and the manifest's digest.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) (ref, digest string) {
	t.Helper()
	ref = r.Host + "/" + repoTag
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatalf("imagetest: tag %s: %v", ref, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("imagetest: push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("imagetest: digest of %s: %v", ref, err)
	}
	return ref, d.String()
}

// File is one entry of a layer.
type File struct {
	Path string // inside the image, without a leading slash
	Body string // a regular file's content
	Mode int64  // permission bits; 0 means 0644 (0755 for folders)
	Dir  bool
	Link string // a symbolic link's target
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

// MakeLayer is Layer for a program.
func MakeLayer(files ...File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("imagetest: layer: %w", err)
		}
		if _, err := io.WriteString(tw, f.Body); err != nil {
			return nil, fmt.Errorf("imagetest: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagetest: layer: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, fmt.Errorf("imagetest: layer: %w", err)
	}
	return l, nil
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
	cf.Config.Env, cf.Config.WorkingDir = env, workdir
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

// SaveLayout is WriteLayout for a program, which names the empty
// folder the layout is written in before it is tarred.
func SaveLayout(file, dir string, img v1.Image, refName string) error {
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
	if out, err := exec.Command("tar", "-C", dir, "-cf", file, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("imagetest: tar the layout: %w: %s", err, out)
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
