package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Loading: an image from a tar file on the daemon's host, read with the
// daemon's own rights (the caller checks the path is absolute). Two kinds:
//
//   - an OCI image layout in a tar (oci-layout, index.json, blobs/sha256/),
//     as `docker save` also writes since Docker 25 beside its
//     manifest.json; named by the org.opencontainers.image.ref.name
//     annotation of the chosen manifest when that is a full reference
//     (a bare tag such as "1.0" is not), else by containerd's
//     io.containerd.image.name, else by manifest.json's RepoTags;
//   - an older `docker save` tarball (manifest.json only), named by its
//     RepoTags. Such an archive holds no manifest: the store makes one
//     (OCI, from the config and the layers as they are in the archive),
//     whose digest is the image's identity; the same archive always gets
//     the same.
//
// A name given to Load wins over the archive's. No name at all is an
// error. Every blob is checked against its digest as it is read: a layer
// is unpacked while it is read (the archive is local, and the unpacker
// takes hostile tars), and the image refused whole when the layer's
// bytes turn out not to be its digest's.

const (
	annotRefName        = "org.opencontainers.image.ref.name"
	annotContainerdName = "io.containerd.image.name"
)

// maxArchiveEntries bounds the entries of an archive Load indexes;
// maxArchiveJSON bounds index.json, manifest.json and a manifest.
const (
	maxArchiveEntries = 100_000
	maxArchiveJSON    = 16 << 20
)

// Load makes the image in the tar file tarPath available, named name (""
// = the name the archive gives it). progress (may be nil) gets frames
// until Load returns; it must not block.
func (s *Store) Load(ctx context.Context, tarPath, name string, progress func(Progress)) (Image, error) {
	var given Ref
	if name != "" {
		r, err := ParseRef(name)
		if err != nil {
			return Image{}, err
		}
		given = r
	}
	if progress != nil {
		progress(Progress{Phase: "resolve"})
	}
	a, err := openArchive(tarPath)
	if err != nil {
		return Image{}, err
	}
	defer a.f.Close()
	sp, names, err := s.readArchive(a)
	if err != nil {
		return Image{}, err
	}
	ref := given
	if ref.IsZero() {
		for _, n := range names {
			if r, err := ParseRef(n); err == nil {
				ref = r
				break
			}
		}
	}
	if ref.IsZero() {
		return Image{}, fmt.Errorf("image: %s names no image (no full reference in its annotations or tags): give the name to load it as", tarPath)
	}
	sp.ref = ref.String()
	sp.loaded = true
	img, err := s.pulls.do(ctx, s, sp.digest, progress, func(ctx context.Context, report func(Progress, bool)) (Image, error) {
		if img, ok := s.finished(sp.digest); ok {
			return img, nil
		}
		if err := s.checkRoom(sp.ref, sp.manifest); err != nil {
			return Image{}, err
		}
		work, err := s.newWork()
		if err != nil {
			return Image{}, err
		}
		defer os.RemoveAll(work)
		return s.build(ctx, work, sp, report)
	})
	if err != nil {
		return Image{}, err
	}
	return s.addRef(ref, img.Digest, false)
}

// archive is a tar file indexed: where each member's bytes are.
type archive struct {
	path    string
	f       *os.File
	members map[string]member
	links   map[string]string // symlinks and hard links between members
}

type member struct{ off, size int64 }

// openArchive indexes the tar at path. tar.Reader reads a header's blocks
// and no further, so after Next the file's offset is where the member's
// bytes start (and it seeks past them).
func openArchive(p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("image: opening the archive: %w", err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("image: archive %s: %w", p, err)
	}
	a := &archive{path: p, f: f, members: map[string]member{}, links: map[string]string{}}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err == nil && n >= maxArchiveEntries {
			err = fmt.Errorf("more than %d entries", maxArchiveEntries)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: archive %s: %v", ErrRefused, p, err)
		}
		name := archiveName(hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeReg:
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("image: archive %s: %w", p, err)
			}
			a.members[name] = member{off, hdr.Size}
		case tar.TypeSymlink:
			// Older `docker save` links a layer shared by two images.
			a.links[name] = archiveName(path.Join(path.Dir(name), hdr.Linkname))
		case tar.TypeLink:
			a.links[name] = archiveName(hdr.Linkname)
		}
	}
	return a, nil
}

func archiveName(n string) string {
	return strings.TrimPrefix(path.Clean("/"+n), "/")
}

// open is a member's bytes; ok false when there is no such member.
func (a *archive) open(name string) (*io.SectionReader, bool) {
	name = archiveName(name)
	for i := 0; i < 8; i++ {
		if m, ok := a.members[name]; ok {
			return io.NewSectionReader(a.f, m.off, m.size), true
		}
		t, ok := a.links[name]
		if !ok {
			break
		}
		name = t
	}
	return nil, false
}

// readAll reads a member whole, up to limit bytes.
func (a *archive) readAll(name string, limit int64) ([]byte, error) {
	r, ok := a.open(name)
	if !ok {
		return nil, fmt.Errorf("%w: archive %s has no %s", ErrRefused, a.path, name)
	}
	if r.Size() > limit {
		return nil, fmt.Errorf("%w: archive %s: %s is %d bytes, more than %d", ErrRefused, a.path, name, r.Size(), limit)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("image: reading %s of archive %s: %w", name, a.path, err)
	}
	return b, nil
}

// blob reads the layout blob d, checked against its digest and size.
func (a *archive) blob(d v1.Descriptor, limit int64) ([]byte, error) {
	if d.Size > limit {
		return nil, fmt.Errorf("%w: archive %s: blob %s is %d bytes, more than %d", ErrRefused, a.path, d.Digest, d.Size, limit)
	}
	b, err := a.readAll(blobPath(d.Digest), limit)
	if err != nil {
		return nil, err
	}
	if got := sha256Of(b); got != d.Digest.String() || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("%w: archive %s: blob %s has digest %s and %d bytes, not %d", ErrRefused, a.path, d.Digest, got, len(b), d.Size)
	}
	return b, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// dockerManifest is an entry of `docker save`'s manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// readArchive reads the image of the store's platform from a, and the
// names the archive gives it, best first.
func (s *Store) readArchive(a *archive) (spec, []string, error) {
	var dms []dockerManifest
	if b, err := a.readAll("manifest.json", maxArchiveJSON); err == nil {
		if err := json.Unmarshal(b, &dms); err != nil {
			return spec{}, nil, fmt.Errorf("%w: archive %s: manifest.json: %v", ErrRefused, a.path, err)
		}
	}
	if _, ok := a.open("index.json"); ok {
		sp, names, err := s.readLayout(a)
		if err != nil {
			return spec{}, nil, err
		}
		// docker save's tags for the same config.
		for _, dm := range dms {
			if archiveName(dm.Config) == blobPath(sp.manifest.Config.Digest) || strings.TrimPrefix(dm.Config, "sha256:") == sp.manifest.Config.Digest.Hex {
				names = append(names, dm.RepoTags...)
			}
		}
		return sp, names, nil
	}
	if dms == nil {
		return spec{}, nil, fmt.Errorf("%w: archive %s holds neither an OCI layout (index.json) nor a docker save (manifest.json)", ErrRefused, a.path)
	}
	return s.readDockerSave(a, dms)
}

// readLayout reads an OCI layout's image for the store's platform.
func (s *Store) readLayout(a *archive) (spec, []string, error) {
	b, err := a.readAll("index.json", maxArchiveJSON)
	if err != nil {
		return spec{}, nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return spec{}, nil, fmt.Errorf("%w: archive %s: index.json: %v", ErrRefused, a.path, err)
	}
	// The image manifests, with the names the outermost descriptor
	// holding each gives.
	type cand struct {
		desc  v1.Descriptor
		names []string
	}
	var cands []cand
	var walk func(ms []v1.Descriptor, names []string, depth int) error
	walk = func(ms []v1.Descriptor, names []string, depth int) error {
		for _, m := range ms {
			ns := names
			if ns == nil {
				ns = descNames(m)
			}
			switch {
			case m.MediaType.IsImage():
				if m.Platform != nil && !s.platformMatches(m.Platform.OS, m.Platform.Architecture, m.Platform.Variant) {
					continue
				}
				cands = append(cands, cand{m, ns})
			case m.MediaType.IsIndex():
				if depth >= maxIndexDepth {
					return fmt.Errorf("%w: archive %s: indexes nested more than %d deep", ErrRefused, a.path, maxIndexDepth)
				}
				b, err := a.blob(m, maxArchiveJSON)
				if err != nil {
					return err
				}
				in, err := v1.ParseIndexManifest(bytes.NewReader(b))
				if err != nil {
					return fmt.Errorf("%w: archive %s: index %s: %v", ErrRefused, a.path, m.Digest, err)
				}
				if err := walk(in.Manifests, ns, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(idx.Manifests, nil, 0); err != nil {
		return spec{}, nil, err
	}
	var found []spec
	var foundNames [][]string
	seen := map[string]bool{}
	var lastErr error
	for _, c := range cands {
		if seen[c.desc.Digest.String()] {
			continue
		}
		seen[c.desc.Digest.String()] = true
		sp, err := s.layoutImage(a, c.desc)
		if err != nil {
			// Another platform's, named by its config only.
			lastErr = err
			continue
		}
		found = append(found, sp)
		foundNames = append(foundNames, c.names)
	}
	switch len(found) {
	case 0:
		if lastErr != nil {
			return spec{}, nil, lastErr
		}
		return spec{}, nil, fmt.Errorf("%w: archive %s holds no image for %s", ErrRefused, a.path, platformString(s.platform))
	case 1:
		return found[0], foundNames[0], nil
	}
	return spec{}, nil, fmt.Errorf("%w: archive %s holds %d images for %s; the store loads one a file", ErrRefused, a.path, len(found), platformString(s.platform))
}

// descNames are the full references a layout descriptor's annotations
// name: the ref.name annotation when it is one (not a bare tag), and
// containerd's image name.
func descNames(d v1.Descriptor) []string {
	var out []string
	if n := d.Annotations[annotRefName]; n != "" && strings.ContainsAny(n, "/:@") {
		out = append(out, n)
	}
	if n := d.Annotations[annotContainerdName]; n != "" {
		out = append(out, n)
	}
	return out
}

// layoutImage reads the image manifest d of a layout and its config.
func (s *Store) layoutImage(a *archive, d v1.Descriptor) (spec, error) {
	what := fmt.Sprintf("archive %s: image %s", a.path, d.Digest)
	raw, err := a.blob(d, maxArchiveJSON)
	if err != nil {
		return spec{}, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return spec{}, fmt.Errorf("%w: %s: the manifest: %v", ErrRefused, what, err)
	}
	cfgRaw, err := a.blob(m.Config, maxConfigBytes)
	if err != nil {
		return spec{}, err
	}
	cfg, err := s.parseConfig(what, &m, cfgRaw)
	if err != nil {
		return spec{}, err
	}
	sp := spec{digest: d.Digest.String(), manifest: &m, config: cfg}
	for i, l := range m.Layers {
		r, ok := a.open(blobPath(l.Digest))
		if !ok {
			return spec{}, fmt.Errorf("%w: %s: layer %d (%s) is not in the archive", ErrRefused, what, i+1, l.Digest)
		}
		sp.layers = append(sp.layers, layerSource{
			desc: l, diffID: cfg.RootFS.DiffIDs[i],
			open: func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(r, 0, r.Size())), nil },
		})
	}
	return sp, nil
}

// readDockerSave reads an older `docker save` archive's image, making its
// manifest (see the top of this file).
func (s *Store) readDockerSave(a *archive, dms []dockerManifest) (spec, []string, error) {
	if len(dms) != 1 {
		return spec{}, nil, fmt.Errorf("%w: archive %s holds %d images; the store loads one a file", ErrRefused, a.path, len(dms))
	}
	dm := dms[0]
	what := fmt.Sprintf("archive %s", a.path)
	cfgRaw, err := a.readAll(dm.Config, maxConfigBytes)
	if err != nil {
		return spec{}, nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config: v1.Descriptor{
			MediaType: types.OCIConfigJSON, Size: int64(len(cfgRaw)),
			Digest: v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(sha256Of(cfgRaw), "sha256:")},
		},
	}
	opens := make([]*io.SectionReader, len(dm.Layers))
	for i, name := range dm.Layers {
		r, ok := a.open(name)
		if !ok {
			return spec{}, nil, fmt.Errorf("%w: %s: layer %d (%s) is not in the archive", ErrRefused, what, i+1, name)
		}
		// One read of each layer for its digest: the manifest made here
		// names it.
		h := sha256.New()
		head := make([]byte, 4)
		n, _ := io.ReadFull(io.NewSectionReader(r, 0, r.Size()), head)
		if _, err := io.Copy(h, io.NewSectionReader(r, 0, r.Size())); err != nil {
			return spec{}, nil, fmt.Errorf("image: reading layer %d of archive %s: %w", i+1, a.path, err)
		}
		mt := types.OCIUncompressedLayer
		switch {
		case bytes.HasPrefix(head[:n], []byte{0x1f, 0x8b}):
			mt = types.OCILayer
		case bytes.HasPrefix(head[:n], []byte{0x28, 0xb5, 0x2f, 0xfd}):
			mt = types.OCILayerZStd
		}
		m.Layers = append(m.Layers, v1.Descriptor{
			MediaType: mt, Size: r.Size(),
			Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))},
		})
		opens[i] = r
	}
	raw, err := json.Marshal(&m)
	if err != nil {
		return spec{}, nil, fmt.Errorf("image: making the manifest of archive %s: %w", a.path, err)
	}
	cfg, err := s.parseConfig(what, &m, cfgRaw)
	if err != nil {
		return spec{}, nil, err
	}
	sp := spec{digest: sha256Of(raw), manifest: &m, config: cfg}
	for i, l := range m.Layers {
		r := opens[i]
		sp.layers = append(sp.layers, layerSource{
			desc: l, diffID: cfg.RootFS.DiffIDs[i],
			open: func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(r, 0, r.Size())), nil },
		})
	}
	return sp, dm.RepoTags, nil
}
