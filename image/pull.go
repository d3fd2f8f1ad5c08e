package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// maxConfigBytes bounds an image config: real ones are kilobytes, with a
// long history a few hundred.
const maxConfigBytes = 32 << 20

// downloadJobs is how many layers of one image download at once.
const downloadJobs = 3

// maxIndexDepth bounds indexes within indexes.
const maxIndexDepth = 3

// resolved is a reference resolved to the manifest for the store's
// platform.
type resolved struct {
	digest   string
	manifest []byte
}

// Pull makes the image ref names available: from the store when its
// platform manifest is there already (the reference is added, nothing
// downloaded), otherwise downloaded and unpacked. Concurrent pulls of one
// reference resolve it once, and of one image unpack it once. progress
// (may be nil) gets frames until Pull returns; it must not block.
func (s *Store) Pull(ctx context.Context, ref string, progress func(Progress)) (Image, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Image{}, err
	}
	if !s.guard.allowed(r.Registry()) {
		return Image{}, fmt.Errorf("%w: registry %s is not one of the allowed registries (pulling %s)", ErrNotAllowed, r.Registry(), r)
	}
	if progress != nil {
		progress(Progress{Phase: "resolve"})
	}
	if _, ok := s.finished(r.Digest()); ok {
		// A digest the store has names that image: no network.
		return s.addRef(r, r.Digest(), true)
	}
	res, err := s.resolves.do(ctx, s, r.String(), nil, func(ctx context.Context, _ func(Progress, bool)) (resolved, error) {
		return s.resolve(ctx, r)
	})
	if err != nil {
		return Image{}, err
	}
	img, err := s.pulls.do(ctx, s, res.digest, progress, func(ctx context.Context, report func(Progress, bool)) (Image, error) {
		if img, ok := s.finished(res.digest); ok {
			return img, nil
		}
		return s.fetch(ctx, r, res, report)
	})
	if err != nil {
		return Image{}, err
	}
	return s.addRef(r, img.Digest, true)
}

// addRef names the finished image digest r, and returns it.
func (s *Store) addRef(r Ref, digest string, pulled bool) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.images[digest]
	if rec == nil {
		return Image{}, fmt.Errorf("%w: %s was removed meanwhile", ErrNotFound, r)
	}
	if err := s.addRefLocked(rec, r.String(), pulled); err != nil {
		return Image{}, err
	}
	return s.imageLocked(rec), nil
}

// options are go-containerregistry's for a pull of r.
func (s *Store) options(ctx context.Context) ([]remote.Option, error) {
	kc, err := readAuthFile(s.cfg.AuthFile)
	if err != nil {
		return nil, err
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(s.rt),
		remote.WithAuthFromKeychain(kc),
		remote.WithPlatform(s.platform),
		remote.WithUserAgent("warren"),
	}, nil
}

// resolve finds the digest of the manifest for the store's platform: the
// reference's own, or the one an index picks.
func (s *Store) resolve(ctx context.Context, r Ref) (resolved, error) {
	opts, err := s.options(ctx)
	if err != nil {
		return resolved{}, err
	}
	p, err := remote.NewPuller(opts...)
	if err != nil {
		return resolved{}, fmt.Errorf("image: pulling %s: %w", r, err)
	}
	nref, err := r.name(s.guard.insecureOK(r.Registry()))
	if err != nil {
		return resolved{}, err
	}
	for depth := 0; ; depth++ {
		desc, err := p.Get(ctx, nref)
		if err != nil {
			return resolved{}, s.remoteErr(fmt.Sprintf("resolving %s", nref), err)
		}
		got := sha256Of(desc.Manifest)
		if d, ok := nref.(name.Digest); ok && d.DigestStr() != got {
			return resolved{}, fmt.Errorf("%w: %s: the manifest's bytes have digest %s", ErrRefused, nref, got)
		}
		mt := manifestType(desc.MediaType, desc.Manifest)
		switch {
		case mt.IsImage():
			return resolved{digest: got, manifest: desc.Manifest}, nil
		case mt.IsIndex():
			if depth >= maxIndexDepth {
				return resolved{}, fmt.Errorf("%w: %s: indexes nested more than %d deep", ErrRefused, r, maxIndexDepth)
			}
			idx, err := v1.ParseIndexManifest(strings.NewReader(string(desc.Manifest)))
			if err != nil {
				return resolved{}, fmt.Errorf("%w: %s: the index: %v", ErrRefused, r, err)
			}
			child, err := s.pick(r.String(), idx.Manifests)
			if err != nil {
				return resolved{}, err
			}
			nref = nref.Context().Digest(child.Digest.String())
		case mt.IsSchema1():
			return resolved{}, fmt.Errorf("%w: %s: a schema 1 manifest, which the store does not take", ErrRefused, r)
		default:
			return resolved{}, fmt.Errorf("%w: %s: not a container image (manifest of media type %q)", ErrRefused, r, mt)
		}
	}
}

// manifestType is a manifest's media type: the registry's Content-Type,
// or the manifest's own mediaType when that says nothing known.
func manifestType(ct types.MediaType, raw []byte) types.MediaType {
	if ct.IsImage() || ct.IsIndex() || ct.IsSchema1() {
		return ct
	}
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(raw, &m) == nil && m.MediaType != "" {
		return m.MediaType
	}
	return ct
}

// pick chooses, among an index's manifests, the one for the store's
// platform: the exact variant when the store names one, else one without
// a variant first.
func (s *Store) pick(what string, ms []v1.Descriptor) (v1.Descriptor, error) {
	var best *v1.Descriptor
	var served []string
	for i, m := range ms {
		if !m.MediaType.IsImage() && !m.MediaType.IsIndex() {
			continue
		}
		if m.Platform == nil {
			if len(ms) == 1 {
				// The only one: its config says its platform.
				return m, nil
			}
			continue
		}
		served = append(served, platformString(*m.Platform))
		if !s.platformMatches(m.Platform.OS, m.Platform.Architecture, m.Platform.Variant) {
			continue
		}
		if best == nil || (best.Platform.Variant != "" && m.Platform.Variant == "") {
			best = &ms[i]
		}
	}
	if best == nil {
		return v1.Descriptor{}, fmt.Errorf("%w: %s: no manifest for %s (the index serves %s)", ErrRefused, what, platformString(s.platform), strings.Join(served, ", "))
	}
	return *best, nil
}

// remoteErr is a registry's failure as the store's error.
func (s *Store) remoteErr(doing string, err error) error {
	if errors.Is(err, ErrNotAllowed) || errors.Is(err, ErrRefused) {
		return fmt.Errorf("image: %s: %w", doing, err)
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s: %v", ErrNotFound, doing, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w: %s: the registry refused access (no such repository, or it needs credentials): %v", ErrNotFound, doing, err)
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("%w: %s: %v", ErrNotFound, doing, err)
			}
		}
	}
	return fmt.Errorf("image: %s: %w", doing, err)
}

// fetch downloads and unpacks the image res names (in a flight of its
// digest).
func (s *Store) fetch(ctx context.Context, r Ref, res resolved, report func(Progress, bool)) (Image, error) {
	what := r.String()
	var m v1.Manifest
	if err := json.Unmarshal(res.manifest, &m); err != nil {
		return Image{}, fmt.Errorf("%w: %s: the manifest: %v", ErrRefused, what, err)
	}
	if m.Config.Digest.Algorithm != "sha256" || m.Config.Size < 0 || m.Config.Size > maxConfigBytes {
		return Image{}, fmt.Errorf("%w: %s: a config of %d bytes (%s); the store takes sha256 configs up to %d bytes", ErrRefused, what, m.Config.Size, m.Config.Digest, maxConfigBytes)
	}
	opts, err := s.options(ctx)
	if err != nil {
		return Image{}, err
	}
	p, err := remote.NewPuller(opts...)
	if err != nil {
		return Image{}, fmt.Errorf("image: pulling %s: %w", r, err)
	}
	nref, err := r.name(s.guard.insecureOK(r.Registry()))
	if err != nil {
		return Image{}, err
	}
	repo := nref.Context()
	work, err := s.newWork()
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(work)
	blobs := filepath.Join(work, "blobs")
	if err := os.Mkdir(blobs, 0o700); err != nil {
		return Image{}, fmt.Errorf("image: making a work folder: %w", err)
	}
	cfgPath := filepath.Join(blobs, "config")
	if err := s.fetchBlob(ctx, p, repo, m.Config, cfgPath, what+", config", nil); err != nil {
		return Image{}, err
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return Image{}, fmt.Errorf("image: reading the config of %s: %w", what, err)
	}
	cfg, err := s.parseConfig(what, &m, raw)
	if err != nil {
		return Image{}, err
	}
	if err := s.checkRoom(what, &m); err != nil {
		return Image{}, err
	}
	paths, err := s.download(ctx, p, repo, what, m.Layers, blobs, report)
	if err != nil {
		return Image{}, err
	}
	sp := spec{digest: res.digest, manifest: &m, config: cfg, ref: what}
	for i, l := range m.Layers {
		path := paths[l.Digest.String()]
		sp.layers = append(sp.layers, layerSource{
			desc: l, diffID: cfg.RootFS.DiffIDs[i],
			open: func() (io.ReadCloser, error) { return os.Open(path) },
		})
	}
	return s.build(ctx, work, sp, report)
}

// download fetches the layers into dir, each blob once, a few at a time,
// and returns the file of each digest.
func (s *Store) download(ctx context.Context, p *remote.Puller, repo name.Repository, what string, layers []v1.Descriptor, dir string, report func(Progress, bool)) (map[string]string, error) {
	paths := map[string]string{}
	var uniq []v1.Descriptor
	var total int64
	for _, l := range layers {
		d := l.Digest.String()
		if _, ok := paths[d]; ok {
			continue
		}
		paths[d] = filepath.Join(dir, strconv.Itoa(len(uniq)))
		uniq = append(uniq, l)
		total += l.Size
	}
	var mu sync.Mutex // serialises frames, whose fields the goroutines share
	var done atomic.Int64
	layersDone := 0
	frame := func(last bool) {
		mu.Lock()
		defer mu.Unlock()
		report(Progress{Phase: "download", Done: done.Load(), Total: total, Layers: len(uniq), LayersDone: layersDone}, last)
	}
	frame(true)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(downloadJobs)
	for i, l := range uniq {
		g.Go(func() error {
			err := s.fetchBlob(gctx, p, repo, l, paths[l.Digest.String()], fmt.Sprintf("%s, layer %d", what, i+1), func(n int64) {
				done.Add(n)
				frame(false)
			})
			if err != nil {
				return err
			}
			mu.Lock()
			layersDone++
			mu.Unlock()
			frame(false)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	frame(true)
	return paths, nil
}

// fetchBlob downloads the blob d (what, for messages: "REF, layer 2")
// into path, checking its size and digest. count (may be nil) gets the
// bytes as they come.
func (s *Store) fetchBlob(ctx context.Context, p *remote.Puller, repo name.Repository, d v1.Descriptor, path, what string, count func(int64)) error {
	what = fmt.Sprintf("%s (%s)", what, d.Digest)
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("%w: %s: only sha256 digests are taken", ErrRefused, what)
	}
	l, err := p.Layer(ctx, repo.Digest(d.Digest.String()))
	if err != nil {
		return s.remoteErr("fetching "+what, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return s.remoteErr("fetching "+what, err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("image: writing the download of %s: %w", what, err)
	}
	defer f.Close()
	h := sha256.New()
	cr := &countingReader{r: io.LimitReader(rc, d.Size+1), count: count}
	n, err := io.Copy(io.MultiWriter(f, h), cr)
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	switch {
	case n > d.Size:
		return fmt.Errorf("%w: %s: more bytes than the %d the manifest says", ErrRefused, what, d.Size)
	case n == d.Size && got != d.Digest.String():
		// go-containerregistry's check fails at the end of the body too;
		// either way the bytes are not the digest's.
		return fmt.Errorf("%w: %s: its %d bytes have digest %s: not the blob the manifest names", ErrRefused, what, n, got)
	case err != nil:
		return s.remoteErr("fetching "+what, err)
	case n < d.Size:
		return fmt.Errorf("%w: %s: %d bytes where the manifest says %d", ErrRefused, what, n, d.Size)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image: writing the download of %s: %w", what, err)
	}
	return nil
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
