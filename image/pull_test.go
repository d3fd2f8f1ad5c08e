package image

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"warren/internal/imagetest"
)

// otherArch is an architecture this machine is not.
func otherArch() string {
	if runtime.GOARCH == "s390x" {
		return "amd64"
	}
	return "s390x"
}

func TestPullByTagAndDigest(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, func(c *v1.ConfigFile) {
		c.Config.Env = []string{"PATH=/usr/bin", "LANG=C.UTF-8"}
		c.Config.WorkingDir = "/srv"
		c.Config.User = "1000:1000"
	},
		imagetest.Layer(t, dir("srv"), file("srv/app", "v1"), file("srv/gone", "x")),
		imagetest.Layer(t, file("srv/app", "v2"), file("srv/.wh.gone", "")),
	)
	_, digest := reg.Push(t, "team/app:1", img)
	s := openStore(t, nil, reg, nil)

	var mu sync.Mutex
	var frames []Progress
	got, err := s.Pull(ctxT(t), reg.Ref("team/app:1"), func(p Progress) {
		mu.Lock()
		frames = append(frames, p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := reg.Ref("team/app:1"); got.Ref != want || len(got.Refs) != 1 {
		t.Errorf("Ref, Refs = %q, %v, want %q", got.Ref, got.Refs, want)
	}
	if got.Digest != digest {
		t.Errorf("Digest = %s, want %s", got.Digest, digest)
	}
	if got.WorkingDir != "/srv" || got.User != "1000:1000" || strings.Join(got.Env, " ") != "PATH=/usr/bin LANG=C.UTF-8" {
		t.Errorf("config kept = %q %q %q", got.WorkingDir, got.User, got.Env)
	}
	if got.Loaded || got.PulledAt.IsZero() {
		t.Errorf("Loaded, PulledAt = %v, %v", got.Loaded, got.PulledAt)
	}
	if b := readFile(t, filepath.Join(got.Root, "srv/app")); b != "v2" {
		t.Errorf("srv/app = %q, want v2", b)
	}
	if _, err := os.Lstat(filepath.Join(got.Root, "srv/gone")); !os.IsNotExist(err) {
		t.Errorf("srv/gone after its whiteout: %v", err)
	}
	if got.Bytes <= 0 || s.Bytes() != got.Bytes {
		t.Errorf("Bytes = %d, store's %d", got.Bytes, s.Bytes())
	}
	if l, ok := s.Lookup("127.0.0.1:" + strings.Split(reg.Host, ":")[1] + "/team/app:1"); !ok || l.Digest != digest {
		t.Errorf("Lookup by ref = %v, %v", l, ok)
	}
	if l, ok := s.Lookup(digest); !ok || l.Root != got.Root {
		t.Errorf("Lookup by digest = %v, %v", l, ok)
	}

	// The frames: every phase, and the last one of the unpack whole.
	phases := map[string]bool{}
	for _, f := range frames {
		phases[f.Phase] = true
	}
	if !phases["resolve"] || !phases["download"] || !phases["unpack"] {
		t.Errorf("phases seen %v, want resolve, download, unpack", phases)
	}
	last := frames[len(frames)-1]
	if last.Phase != "unpack" || last.Done != last.Total || last.Total == 0 || last.LayersDone != 2 || last.Layers != 2 {
		t.Errorf("last frame %+v, want unpack done, 2 of 2 layers", last)
	}

	// By digest: the image is there, so only the reference is added,
	// without a request.
	before := reg.BlobGetsByDigest()
	requests := reg.Requests()
	byDigest, err := s.Pull(ctxT(t), reg.Ref("team/app@"+digest), nil)
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.Digest != digest || byDigest.Root != got.Root {
		t.Errorf("by digest: %s at %s, want %s at %s", byDigest.Digest, byDigest.Root, digest, got.Root)
	}
	if n := reg.Requests() - requests; n != 0 {
		t.Errorf("%d requests for a pull by a digest the store has", n)
	}
	if after := reg.BlobGetsByDigest(); len(after) != len(before) {
		t.Errorf("blob GETs %v after a pull of a finished image, were %v", after, before)
	}
	for d, n := range reg.BlobGetsByDigest() {
		if before[d] != n {
			t.Errorf("blob %s fetched again", d)
		}
	}
	if len(byDigest.Refs) != 2 || byDigest.Ref != reg.Ref("team/app@"+digest) {
		t.Errorf("Refs = %v, Ref %s", byDigest.Refs, byDigest.Ref)
	}
	if len(dirNames(t, s.roots)) != 2 {
		t.Errorf("roots holds %v, want one tree and its record", dirNames(t, s.roots))
	}

	// The records hold it across a reopen.
	s.Close()
	s2 := openStore(t, &sandbox{dir: s.dir}, reg, nil)
	if l := s2.List(); len(l) != 1 || l[0].Digest != digest || len(l[0].Refs) != 2 || l[0].Bytes != got.Bytes {
		t.Errorf("after a reopen List() = %+v", l)
	}
}

func TestPullZstdLayer(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, nil, imagetest.LayerWith(t, []tarball.LayerOption{tarball.WithCompression(compression.ZStd)}, file("z", "zstd")))
	reg.Push(t, "z:1", img)
	s := openStore(t, nil, reg, nil)
	got, err := s.Pull(ctxT(t), reg.Ref("z:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, filepath.Join(got.Root, "z")); b != "zstd" {
		t.Errorf("z = %q", b)
	}
}

func TestPullIndexPicksPlatform(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	mine := simpleImage(t, file("arch", "mine"))
	other := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Architecture = otherArch() }, imagetest.Layer(t, file("arch", "other")))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch()}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	reg.PushIndex(t, "multi:1", idx)
	s := openStore(t, nil, reg, nil)
	got, err := s.Pull(ctxT(t), reg.Ref("multi:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := mine.Digest()
	if got.Digest != want.String() {
		t.Errorf("Digest = %s, want the platform manifest's %s", got.Digest, want)
	}
	if b := readFile(t, filepath.Join(got.Root, "arch")); b != "mine" {
		t.Errorf("arch = %q, want mine", b)
	}
	ol, _ := other.Layers()
	od, _ := ol[0].Digest()
	if n := reg.BlobGetsByDigest()[od.String()]; n != 0 {
		t.Errorf("the other platform's layer fetched %d times", n)
	}
}

func TestPullOtherPlatformRefused(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	other := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Architecture = otherArch() }, imagetest.Layer(t, file("arch", "other")))
	reg.Push(t, "other:1", other)
	reg.PushIndex(t, "otheridx:1", mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch()}}}))
	s := openStore(t, nil, reg, nil)
	for _, c := range []struct{ ref, want string }{
		{"other:1", "the image is for linux/" + otherArch()},
		{"otheridx:1", "no manifest for linux/" + runtime.GOARCH},
	} {
		_, err := s.Pull(ctxT(t), reg.Ref(c.ref), nil)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pull(%s) = %v, want ErrRefused saying %q", c.ref, err, c.want)
		}
	}
	checkEmpty(t, s)
}

func TestPullNotFound(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	s := openStore(t, nil, reg, nil)
	if _, err := s.Pull(ctxT(t), reg.Ref("nothing:1"), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Pull of a missing image = %v, want ErrNotFound", err)
	}
	if _, ok := s.Lookup(reg.Ref("nothing:1")); ok {
		t.Error("Lookup found a missing image")
	}
	if err := s.Remove(ctxT(t), reg.Ref("nothing:1")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove of a missing image = %v, want ErrNotFound", err)
	}
	checkEmpty(t, s)
}

func TestPullTamperedBlob(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	l := imagetest.Layer(t, file("f", strings.Repeat("data", 1000)))
	img := imagetest.ImageWith(t, nil, l)
	reg.Push(t, "tampered:1", img)
	ld, _ := l.Digest()
	rc, _ := l.Compressed()
	blob, _ := io.ReadAll(rc)
	bad := bytes.Clone(blob)
	bad[len(bad)/2] ^= 0xff
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if d, ok := imagetest.BlobDigest(r); !ok || d != ld.String() || r.Method != http.MethodGet {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(bad)))
		w.Write(bad)
		return true
	})
	sb := newSandbox(t)
	s := openStore(t, sb, reg, nil)
	_, err := s.Pull(ctxT(t), reg.Ref("tampered:1"), nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not the blob the manifest names") {
		t.Errorf("Pull of a tampered blob = %v, want ErrRefused, bytes not the digest's", err)
	}
	checkEmpty(t, s)
	sb.checkCanary(t)
}

func TestRegistryNotAllowed(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "app:1", simpleImage(t, file("f", "x")))
	s := openStore(t, nil, nil, func(c *Config) { c.Registries = []string{"registry.example:5000", "docker.io"} })
	before := reg.Requests()
	_, err := s.Pull(ctxT(t), reg.Ref("app:1"), nil)
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "not one of the allowed registries") {
		t.Errorf("Pull from a registry not named = %v, want ErrNotAllowed", err)
	}
	if n := reg.Requests() - before; n != 0 {
		t.Errorf("%d requests reached the registry, want none", n)
	}
	checkEmpty(t, s)
}

func TestLoopbackRefusedByDialer(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "app:1", simpleImage(t, file("f", "x")))
	// No Registries: any registry at a public address, and 127.0.0.1 is
	// not one.
	s := openStore(t, nil, nil, nil)
	before := reg.Requests()
	_, err := s.Pull(ctxT(t), reg.Ref("app:1"), nil)
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "a loopback address") {
		t.Errorf("Pull from loopback, not named = %v, want ErrNotAllowed from the dialer", err)
	}
	if n := reg.Requests() - before; n != 0 {
		t.Errorf("%d requests reached the registry, want none", n)
	}
	checkEmpty(t, s)
}

func TestConcurrentPulls(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, nil,
		imagetest.Layer(t, file("a", strings.Repeat("a", 100000))),
		imagetest.Layer(t, file("b", strings.Repeat("b", 100000))),
	)
	_, digest := reg.Push(t, "busy:1", img)
	before := reg.BlobGetsByDigest()
	s := openStore(t, nil, reg, nil)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	roots := make([]string, n)
	for i := range n {
		wg.Go(func() {
			img, err := s.Pull(ctxT(t), reg.Ref("busy:1"), nil)
			errs[i], roots[i] = err, img.Root
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if roots[i] != roots[0] {
			t.Errorf("pull %d: root %s, pull 0: %s", i, roots[i], roots[0])
		}
	}
	m, _ := img.Manifest()
	blobs := []v1.Hash{m.Config.Digest}
	for _, l := range m.Layers {
		blobs = append(blobs, l.Digest)
	}
	for _, b := range blobs {
		if got := reg.BlobGetsByDigest()[b.String()] - before[b.String()]; got != 1 {
			t.Errorf("blob %s fetched %d times, want once", b, got)
		}
	}
	if names := dirNames(t, s.roots); len(names) != 2 || names[0] != strings.TrimPrefix(digest, "sha256:") {
		t.Errorf("roots holds %v, want one tree and its record", names)
	}
	if l := s.List(); len(l) != 1 {
		t.Errorf("List() = %v", l)
	}
}

func TestPullWithCredentials(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	reg.Push(t, "private:1", simpleImage(t, file("f", "secret")))
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if u, p, ok := r.BasicAuth(); ok && u == "me" && p == "pw" {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"who are you"}]}`, http.StatusUnauthorized)
		return true
	})
	anon := openStore(t, nil, reg, nil)
	if _, err := anon.Pull(ctxT(t), reg.Ref("private:1"), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("anonymous Pull = %v, want ErrNotFound (access refused)", err)
	}
	auth := filepath.Join(t.TempDir(), "config.json")
	must(t, os.WriteFile(auth, []byte(`{"auths":{"`+reg.Host+`":{"username":"me","password":"pw"}}}`), 0o600))
	s := openStore(t, nil, reg, func(c *Config) { c.AuthFile = auth })
	got, err := s.Pull(ctxT(t), reg.Ref("private:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(got.Root, "f")) != "secret" {
		t.Error("f differs")
	}
}

// TestRedirectRefused: a registry's redirect of a blob to an address the
// store does not dial, or to plain HTTP, fails the pull: the checks are on
// every connection, not on the registry's name alone.
func TestRedirectRefused(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := simpleImage(t, file("f", "x"))
	reg.Push(t, "redirect:1", img)
	m, _ := img.Manifest()
	layer := m.Layers[0].Digest.String()
	s := openStore(t, nil, reg, nil)
	for _, c := range []struct{ name, to, want string }{
		// localhost resolves to the registry's address, not its port.
		{"dialer", "https://localhost:1/blob", "no registry named in the allowed registries resolves to"},
		{"plain-http", "http://localhost:1/blob", "plain HTTP is only for registries on loopback named"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
				if d, ok := imagetest.BlobDigest(r); ok && d == layer {
					http.Redirect(w, r, c.to, http.StatusTemporaryRedirect)
					return true
				}
				return false
			})
			_, err := s.Pull(ctxT(t), reg.Ref("redirect:1"), nil)
			if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Pull = %v, want ErrNotAllowed saying %q", err, c.want)
			}
			checkEmpty(t, s)
		})
	}
}
