package image

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"warren/internal/imagetest"
)

// layoutTar writes img as an OCI image layout whose manifest has the
// ref.name annotation refName ("" = none), tars it, and returns the tar's
// path. spoil (may be nil) changes the layout's folder first.
func layoutTar(t testing.TB, img v1.Image, refName string, spoil func(dir string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	imagetest.WriteLayoutDir(t, dir, img, refName)
	if spoil != nil {
		spoil(dir)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadOCILayout(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	img := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Config.Env = []string{"A=1"} },
		imagetest.Layer(t, file("one", "1")),
		imagetest.Layer(t, file("two", "2"), symlink("abs", "/one")))
	digest, _ := img.Digest()
	s := openStore(t, nil, reg, nil)
	var frames []Progress
	got, err := s.Load(ctxT(t), layoutTar(t, img, "example.test/team/app:1.0", nil), "", func(p Progress) { frames = append(frames, p) })
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "example.test/team/app:1.0" || got.Digest != digest.String() || !got.Loaded {
		t.Errorf("Load = %s %s loaded %v, want example.test/team/app:1.0 %s loaded", got.Ref, got.Digest, got.Loaded, digest)
	}
	if readFile(t, filepath.Join(got.Root, "two")) != "2" || strings.Join(got.Env, " ") != "A=1" {
		t.Errorf("the tree or the config differ: env %v", got.Env)
	}
	if l, err := os.Readlink(filepath.Join(got.Root, "abs")); err != nil || l != "one" {
		t.Errorf("abs -> %q, %v, want one", l, err)
	}
	if last := frames[len(frames)-1]; last.Phase != "unpack" || last.Done != last.Total || last.LayersDone != 2 {
		t.Errorf("last frame %+v", last)
	}
	// The same image pulled: one tree, and no longer only loaded.
	reg.Push(t, "app:1.0", img)
	pulled, err := s.Pull(ctxT(t), reg.Ref("app:1.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Root != got.Root || pulled.Loaded || len(pulled.Refs) != 2 {
		t.Errorf("pulled after loading: root %s (loaded %s), Loaded %v, Refs %v", pulled.Root, got.Root, pulled.Loaded, pulled.Refs)
	}
	if s.Bytes() != got.Bytes {
		t.Errorf("Bytes() = %d, want %d: one tree", s.Bytes(), got.Bytes)
	}
}

func TestLoadBareTag(t *testing.T) {
	img := simpleImage(t, file("f", "x"))
	path := layoutTar(t, img, "1.0", nil)
	s := openStore(t, nil, nil, nil)
	if _, err := s.Load(ctxT(t), path, "", nil); err == nil || !strings.Contains(err.Error(), "give the name") {
		t.Errorf("Load of a layout named by a bare tag, no name = %v, want an error asking for a name", err)
	}
	got, err := s.Load(ctxT(t), path, "app:1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "docker.io/library/app:1.0" {
		t.Errorf("Ref = %q", got.Ref)
	}
	if _, ok := s.Lookup("app:1.0"); !ok {
		t.Error("Lookup(app:1.0) found nothing")
	}
}

func TestLoadDockerSave(t *testing.T) {
	img := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Config.WorkingDir = "/w" },
		imagetest.Layer(t, dir("w"), file("w/f", "saved")))
	path := filepath.Join(t.TempDir(), "saved.tar")
	imagetest.WriteDockerSave(t, path, img, "example.test/saved:2")
	s := openStore(t, nil, nil, nil)
	got, err := s.Load(ctxT(t), path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "example.test/saved:2" || !got.Loaded || got.WorkingDir != "/w" {
		t.Errorf("Load = %+v", got)
	}
	if readFile(t, filepath.Join(got.Root, "w/f")) != "saved" {
		t.Error("w/f differs")
	}
	// The same archive again, under another name: the same image.
	again, err := s.Load(ctxT(t), path, "other:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != got.Digest || len(again.Refs) != 2 || again.Ref != "docker.io/library/other:1" {
		t.Errorf("second Load = %+v, want the same image with two references", again)
	}
	if len(s.List()) != 1 {
		t.Errorf("List() = %v", s.List())
	}
}

func TestLoadRefused(t *testing.T) {
	sb := newSandbox(t)
	s := openStore(t, sb, nil, nil)
	hostile := simpleImage(t, symlink("esc", sb.canary), file("esc/keep", "pwned"))
	l, _ := simpleImage(t, file("f", strings.Repeat("x", 1000))).Layers()
	tampered := imagetest.ImageWith(t, nil, l[0])
	ld, _ := l[0].Digest()
	other := imagetest.ImageWith(t, func(c *v1.ConfigFile) { c.Architecture = otherArch() }, imagetest.Layer(t, file("f", "x")))
	notTar := filepath.Join(t.TempDir(), "not.tar")
	must(t, os.WriteFile(notTar, []byte("not a tar at all, not even close to one: just some text here"), 0o644))
	empty := filepath.Join(t.TempDir(), "empty.tar")
	f, _ := os.Create(empty)
	tar.NewWriter(f).Close()
	f.Close()
	for _, c := range []struct {
		name, path, want string
	}{
		{"hostile", layoutTar(t, hostile, "x.test/h:1", nil), "passes through a symbolic link"},
		{"tampered", layoutTar(t, tampered, "x.test/t:1", func(dir string) {
			p := filepath.Join(dir, "blobs", "sha256", ld.Hex)
			b, err := os.ReadFile(p)
			must(t, err)
			b[len(b)/2] ^= 0xff
			must(t, os.WriteFile(p, b, 0o644))
		}), "are not the ones the manifest names"},
		{"other-platform", layoutTar(t, other, "x.test/o:1", nil), "the image is for linux/" + otherArch()},
		{"not-a-tar", notTar, "archive"},
		{"neither", empty, "neither an OCI layout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Load(ctxT(t), c.path, "", nil)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load = %v, want ErrRefused saying %q", err, c.want)
			}
			checkEmpty(t, s)
			sb.checkCanary(t)
		})
	}
}
