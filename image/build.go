package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// The phases of making an image, for Pull and Load alike (Pull downloads
// the layers between 2 and 3):
//
//  1. the work folder: Dir/tmp/<random>, with rootfs/ (and blobs/ for a
//     pull); a kill anywhere before 5 leaves only it, which Open removes;
//  2. the config is checked (digest, a container image, the platform) and
//     the layers' sizes against the store's bound;
//  3. the layers are unpacked in order into rootfs/ (unpack_linux.go),
//     then the mount points are made;
//  4. the file system is synced: a power cut never leaves a record over
//     files half written;
//  5. rootfs/ is renamed to Dir/roots/<hex> and the record written; the
//     image is in the maps, and visible, only once both are done.

// spec is an image to make: its manifest, its config, where its layers
// come from.
type spec struct {
	digest   string // the manifest's
	manifest *v1.Manifest
	config   *v1.ConfigFile
	layers   []layerSource
	ref      string // normalised; the first reference it is made under
	loaded   bool
}

// parseConfig checks an image's config bytes against its manifest: the
// digest, a container image's config, for the store's platform, with a
// diff ID for each layer.
func (s *Store) parseConfig(what string, m *v1.Manifest, raw []byte) (*v1.ConfigFile, error) {
	if got := sha256Of(raw); got != m.Config.Digest.String() || int64(len(raw)) != m.Config.Size {
		return nil, fmt.Errorf("%w: %s: the config's bytes (%s, %d bytes) do not match the manifest's %s (%d bytes)", ErrRefused, what, got, len(raw), m.Config.Digest, m.Config.Size)
	}
	if !configMediaTypes[m.Config.MediaType] {
		return nil, fmt.Errorf("%w: %s: not a container image (config of media type %q)", ErrRefused, what, m.Config.MediaType)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: the config: %v", ErrRefused, what, err)
	}
	if !s.platformMatches(cfg.OS, cfg.Architecture, cfg.Variant) {
		return nil, fmt.Errorf("%w: %s: the image is for %s/%s, and this store pulls %s", ErrRefused, what, cfg.OS, cfg.Architecture, platformString(s.platform))
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%w: %s: %d layers in the manifest, %d diff IDs in the config", ErrRefused, what, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		if !layerMediaTypes[l.MediaType] {
			return nil, fmt.Errorf("%w: %s: layer %d has media type %q, which the store does not take (not a tar layer, or foreign)", ErrRefused, what, i+1, l.MediaType)
		}
		if l.Digest.Algorithm != "sha256" || cfg.RootFS.DiffIDs[i].Algorithm != "sha256" {
			return nil, fmt.Errorf("%w: %s: layer %d: only sha256 digests are taken", ErrRefused, what, i+1)
		}
		if l.Size < 0 {
			return nil, fmt.Errorf("%w: %s: layer %d: a negative size", ErrRefused, what, i+1)
		}
	}
	return &cfg, nil
}

// platformMatches reports whether an image for os/arch/variant runs on
// the store's platform; a config that names none is taken.
func (s *Store) platformMatches(os, arch, variant string) bool {
	if os == "" && arch == "" {
		return true
	}
	if os != s.platform.OS || arch != s.platform.Architecture {
		return false
	}
	want := s.platform.Variant
	if want == "" || variant == want {
		return true
	}
	// arm64's only variant is v8, often left out.
	return arch == "arm64" && (variant == "" || variant == "v8") && (want == "" || want == "v8")
}

// checkRoom refuses an image whose compressed layers alone would pass the
// store's bound: a first estimate, before anything is downloaded.
func (s *Store) checkRoom(what string, m *v1.Manifest) error {
	if s.cfg.StoreBytes <= 0 {
		return nil
	}
	var sum int64
	for _, l := range m.Layers {
		sum += l.Size
	}
	used := s.Bytes() + s.pending.Load()
	if used+sum > s.cfg.StoreBytes {
		return fmt.Errorf("%w: %s: its layers (%d bytes compressed) and the %d bytes of images in the store pass the store's bound of %d bytes (--image-store-bytes)", ErrStoreFull, what, sum, used, s.cfg.StoreBytes)
	}
	return nil
}

// finished is the image with digest if it is in the store.
func (s *Store) finished(digest string) (Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.images[digest]; r != nil {
		return s.imageLocked(r), true
	}
	return Image{}, false
}

// newWork makes a work folder in Dir/tmp with an empty rootfs/ in it.
func (s *Store) newWork() (string, error) {
	work, err := os.MkdirTemp(s.tmp, "work-")
	if err != nil {
		return "", fmt.Errorf("image: making a work folder: %w", err)
	}
	if err := os.Mkdir(filepath.Join(work, "rootfs"), 0o755); err != nil {
		os.RemoveAll(work)
		return "", fmt.Errorf("image: making a work folder: %w", err)
	}
	// The umask may have narrowed it; the jail's users walk it.
	if err := os.Chmod(filepath.Join(work, "rootfs"), 0o755); err != nil {
		os.RemoveAll(work)
		return "", fmt.Errorf("image: making a work folder: %w", err)
	}
	return work, nil
}

// build unpacks sp's layers into work/rootfs and makes the image finished
// (phases 3 to 5 above). report gets the unpack's progress.
func (s *Store) build(ctx context.Context, work string, sp spec, report func(Progress, bool)) (Image, error) {
	var total int64
	for _, l := range sp.layers {
		total += l.desc.Size
	}
	// What this image has counted against the store's bound so far.
	var reserved atomic.Int64
	defer func() { s.pending.Add(-reserved.Load()) }()
	reserve := func(n int64) error {
		if s.cfg.StoreBytes <= 0 {
			return nil
		}
		reserved.Add(n)
		p := s.pending.Add(n)
		if b := s.Bytes(); b+p > s.cfg.StoreBytes {
			return fmt.Errorf("%w: unpacking %s: the images in the store (%d bytes) and those being unpacked (%d bytes) pass the store's bound of %d bytes (--image-store-bytes)", ErrStoreFull, sp.ref, b, p, s.cfg.StoreBytes)
		}
		return nil
	}
	rootfs := filepath.Join(work, "rootfs")
	u, err := newUnpacker(rootfs, s.cfg.MaxImageBytes, int64(s.cfg.MaxEntries), reserve, s.log)
	if err != nil {
		return Image{}, err
	}
	defer u.close()
	var done int64
	frame := Progress{Phase: "unpack", Total: total, Layers: len(sp.layers)}
	report(frame, true)
	for i, l := range sp.layers {
		err := unpackLayer(ctx, u, sp.ref, i, len(sp.layers), l, func(n int64) {
			done += n
			frame.Done = done
			report(frame, false)
		})
		if err != nil {
			return Image{}, err
		}
		frame.LayersDone = i + 1
		report(frame, i+1 == len(sp.layers))
	}
	if len(sp.layers) == 0 {
		report(frame, true)
	}
	if err := u.mountPoints(s.cfg.MountPoints); err != nil {
		return Image{}, fmt.Errorf("%w (%s)", err, sp.ref)
	}
	if err := unix.Syncfs(u.root); err != nil {
		return Image{}, fmt.Errorf("image: syncing the unpacked %s: %w", sp.ref, err)
	}
	if err := ctx.Err(); err != nil {
		return Image{}, fmt.Errorf("image: %s: %w", sp.ref, err)
	}
	return s.finish(rootfs, sp, u.live)
}

// finish renames rootfs into Dir/roots and writes the record (phase 5).
func (s *Store) finish(rootfs string, sp spec, bytes int64) (Image, error) {
	now := time.Now()
	r := &record{
		Digest: sp.digest, RefTimes: map[string]time.Time{}, Bytes: bytes,
		Env: sp.config.Config.Env, WorkingDir: sp.config.Config.WorkingDir, User: sp.config.Config.User,
		Config: sp.manifest.Config.Digest.String(), Loaded: sp.loaded, Pulled: !sp.loaded,
		PulledAt: now,
	}
	for _, l := range sp.layers {
		r.Layers = append(r.Layers, l.desc.Digest.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Image{}, errClosed
	}
	if s.images[sp.digest] != nil {
		// Cannot happen: one flight per digest, which looks first.
		return Image{}, fmt.Errorf("image: %s is already in the store", sp.digest)
	}
	root := filepath.Join(s.roots, r.hex())
	if err := os.Rename(rootfs, root); err != nil {
		return Image{}, fmt.Errorf("image: moving the unpacked %s into place: %w", sp.ref, err)
	}
	syncDir(s.roots)
	s.images[r.Digest] = r
	s.bytes += r.Bytes
	if err := s.addRefLocked(r, sp.ref, !sp.loaded); err != nil {
		s.dropLocked(r)
		// Back into the work folder, which goes with the rest.
		if rerr := os.Rename(root, rootfs); rerr != nil {
			err = errors.Join(err, rerr)
		}
		os.Remove(filepath.Join(s.roots, r.hex()+".json"))
		return Image{}, err
	}
	s.log.Info("image ready", "ref", sp.ref, "digest", r.Digest, "bytes", r.Bytes, "layers", len(r.Layers), "loaded", sp.loaded)
	return s.imageLocked(r), nil
}
