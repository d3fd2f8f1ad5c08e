package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Defaults of the bounds a Config leaves at zero.
const (
	// DefaultMaxImageBytes bounds the unpacked bytes of one image.
	DefaultMaxImageBytes = 8 << 30
	// DefaultMaxEntries bounds the tar entries of one image, all layers.
	DefaultMaxEntries = 1_000_000
)

// Config is a store's configuration.
type Config struct {
	// Dir is the store's folder (the daemon gives <data>/images). Open
	// makes it, mode 0700: the trees in it keep the owners and modes of
	// the images' files, for the jails alone.
	Dir string
	// StoreBytes bounds the unpacked bytes of all images together
	// (--image-store-bytes); 0 = no bound.
	StoreBytes int64
	// MaxImageBytes bounds the unpacked bytes of one image (a tar bomb's
	// bound); 0 = DefaultMaxImageBytes.
	MaxImageBytes int64
	// MaxEntries bounds the tar entries of one image; 0 = DefaultMaxEntries.
	MaxEntries int
	// Registries are the registries pulls may use, "host" or "host:port"
	// ("docker.io", "127.0.0.1:5000"); nil = any registry at a public
	// address. A registry named here may be at a private or loopback
	// address, and one on loopback may speak plain HTTP.
	Registries []string
	// AuthFile is a Docker-style config.json with credentials ("auths");
	// "" = anonymous pulls.
	AuthFile string
	// Platform is the platform images are pulled for, "linux/amd64" or
	// "linux/arm64/v8"; "" = linux/runtime.GOARCH.
	Platform string
	// MountPoints are made in every finished rootfs.
	MountPoints MountPoints
	Logger      hclog.Logger
	// Transport replaces the store's own guarded transport: for tests
	// only, since it drops the checks on the addresses dialed.
	Transport http.RoundTripper
}

// MountPoints are the places the jail mounts over, made in every finished
// rootfs so that a read-only tree needs no change at a jail's start:
// absolute paths inside the rootfs, e.g. Dirs {"/workspace", "/tmp",
// "/dev", "/proc", "/home/agent"}, Files {"/etc/resolv.conf",
// "/etc/hosts", "/etc/passwd", "/etc/group"}.
type MountPoints struct{ Dirs, Files []string }

// Image is a finished image of the store.
type Image struct {
	// Ref is the normalised reference the image was last pulled or loaded
	// as ("" when every reference has moved to other images); Refs are
	// all of them, sorted.
	Ref  string
	Refs []string
	// Digest is the platform manifest's digest, "sha256:...": the image's
	// identity.
	Digest string
	// Bytes is the unpacked size on disk: the files' sizes (each inode
	// once), 4 KiB a folder, a link's target length.
	Bytes int64
	// Root is the host path of the rootfs folder. It is never written
	// after it is finished; the jail binds it read-only.
	Root string
	// Env, WorkingDir and User are the image config's.
	Env              []string
	WorkingDir, User string
	// Loaded: the image came from Load and was never pulled, so there is
	// no registry to pull it from again.
	Loaded           bool
	PulledAt, UsedAt time.Time
}

// Progress is a frame of a pull's or load's progress. Phase "resolve"
// (Done and Total 0), "download" (Done of Total compressed bytes fetched)
// or "unpack" (Done of Total compressed bytes unpacked); Layers is the
// number of layers, LayersDone those downloaded or unpacked.
type Progress struct {
	Phase       string
	Done, Total int64
	Layers      int
	LayersDone  int
}

// Store is the content-addressed image store. Open one per folder; call
// Close when finished.
type Store struct {
	cfg      Config
	log      hclog.Logger
	dir      string
	roots    string // Dir/roots: <hex> rootfs folders and <hex>.json records
	tmp      string // Dir/tmp: work under way, emptied by Open
	lock     *os.File
	guard    *guard
	rt       http.RoundTripper
	platform v1.Platform

	resolves flights[resolved]
	pulls    flights[Image]

	// pending is the bytes written by unpacks under way, counted against
	// StoreBytes with the finished images'.
	pending atomic.Int64

	base   context.Context // ends at Close; the flights' work runs under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the flights' goroutines

	// mu guards the fields below it, and the records on disk: every
	// record is written under it, so that the disk and the maps agree.
	mu     sync.Mutex
	images map[string]*record // by digest
	refs   map[string]string  // normalised reference -> digest
	bytes  int64              // sum of images' Bytes
	closed bool
}

var errClosed = errors.New("image: store closed")

// touchEvery bounds how often Touch writes a record: at most once a
// minute an image.
const touchEvery = time.Minute

// Open opens (or makes) the store at cfg.Dir: it takes the folder's lock
// (one process a store), removes the work a killed process left (partial
// unpacks, records half written, a rootfs whose record is missing) and
// loads the records.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("image: the store's folder %q is not an absolute path", cfg.Dir)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = DefaultMaxImageBytes
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	plat, err := parsePlatform(cfg.Platform)
	if err != nil {
		return nil, err
	}
	for _, p := range append(append([]string{}, cfg.MountPoints.Dirs...), cfg.MountPoints.Files...) {
		if _, err := mountPointPath(p); err != nil {
			return nil, err
		}
	}
	s := &Store{
		cfg: cfg, log: cfg.Logger.Named("image"), dir: filepath.Clean(cfg.Dir),
		guard: newGuard(cfg.Registries), platform: plat,
		images: map[string]*record{}, refs: map[string]string{},
	}
	if cfg.Registries != nil && len(cfg.Registries) == 0 {
		// An empty list allows nothing (not "any"): keep it non-nil.
		s.guard.named = []string{}
	}
	s.roots = filepath.Join(s.dir, "roots")
	s.tmp = filepath.Join(s.dir, "tmp")
	s.rt = cfg.Transport
	if s.rt == nil {
		s.rt = s.guard.transport()
	}
	for _, d := range []string{s.dir, s.roots, s.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image: making the store's folder: %w", err)
		}
		// A folder made before with a wider mode is narrowed: the trees
		// keep their files' owners and modes, set-id bits aside.
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("image: mode of the store's folder: %w", err)
		}
	}
	if s.lock, err = lockDir(s.dir); err != nil {
		return nil, err
	}
	if err := s.load(ctx); err != nil {
		s.lock.Close()
		return nil, err
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.log.Info("image store open", "dir", s.dir, "images", len(s.images), "bytes", s.bytes, "platform", platformString(s.platform))
	return s, nil
}

// lockDir takes the store's lock: two processes unpacking into one store
// would remove each other's work at Open. The kernel drops it when the
// process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: opening the store's lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("image: the store at %s is in use by another process", dir)
		}
		return nil, fmt.Errorf("image: locking the store: %w", err)
	}
	return f, nil
}

// load empties tmp and reads the records; s.mu is not needed (Open has
// not returned).
func (s *Store) load(ctx context.Context) error {
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return fmt.Errorf("image: reading the store's work folder: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(s.tmp, e.Name())); err != nil {
			return fmt.Errorf("image: removing work a former run left: %w", err)
		}
		s.log.Info("removed work a former run left", "name", e.Name())
	}
	ents, err = os.ReadDir(s.roots)
	if err != nil {
		return fmt.Errorf("image: reading the store's roots: %w", err)
	}
	dirs := map[string]bool{}
	var recs []*record
	for _, e := range ents {
		n := e.Name()
		switch {
		case e.IsDir() && isHex64(n):
			dirs[n] = true
		case strings.HasSuffix(n, ".json") && isHex64(strings.TrimSuffix(n, ".json")):
			r, err := readRecord(filepath.Join(s.roots, n))
			if err != nil {
				// A record is written whole (rename) or not at all: one
				// that does not parse was damaged on the disk. Its image
				// is dropped (its tree goes below, as one without a
				// record), and pulled again when a thread needs it,
				// rather than keep the daemon from starting.
				s.log.Error("dropping an image record that does not parse; the image will be pulled again", "record", n, "error", err)
				if err := os.Remove(filepath.Join(s.roots, n)); err != nil {
					return fmt.Errorf("image: removing a damaged record: %w", err)
				}
				continue
			}
			recs = append(recs, r)
		default:
			s.log.Warn("a file the store did not make is in its roots folder", "name", n)
		}
	}
	for _, r := range recs {
		h := r.hex()
		if !dirs[h] {
			// Removed while the record's unlink was under way.
			s.log.Warn("dropping a record without its rootfs", "digest", r.Digest)
			if err := os.Remove(filepath.Join(s.roots, h+".json")); err != nil {
				return fmt.Errorf("image: removing a record without rootfs: %w", err)
			}
			continue
		}
		delete(dirs, h)
		s.images[r.Digest] = r
		s.bytes += r.Bytes
	}
	for h := range dirs {
		// Renamed into place but the record never written: not finished.
		s.log.Warn("removing a rootfs without record", "hex", h)
		if err := os.RemoveAll(filepath.Join(s.roots, h)); err != nil {
			return fmt.Errorf("image: removing a rootfs without record: %w", err)
		}
	}
	// A reference moved between two images is written to the new one
	// first: after a kill between the two writes both claim it, and the
	// later claim wins.
	for _, r := range s.images {
		for ref, at := range r.RefTimes {
			if d, ok := s.refs[ref]; ok && s.images[d].RefTimes[ref].After(at) {
				continue
			}
			s.refs[ref] = r.Digest
		}
	}
	for _, r := range s.images {
		changed := false
		for ref := range r.RefTimes {
			if s.refs[ref] != r.Digest {
				delete(r.RefTimes, ref)
				changed = true
			}
		}
		if changed {
			if err := s.writeRecordLocked(r); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// workContext starts the work of a flight under the store: its context
// ends at Close, which waits for it. false once the store is closed.
func (s *Store) workContext() (context.Context, context.CancelFunc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, false
	}
	s.wg.Add(1)
	ctx, cancel := context.WithCancel(s.base)
	return ctx, cancel, true
}

// Close ends the pulls under way (their partial work is removed) and
// waits for them, and drops the store's lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	closeIdle(s.rt)
	return s.lock.Close()
}

// Bytes is the unpacked size of the finished images together.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Lookup finds a finished image by normalised reference (any form
// ParseRef takes) or by digest ("sha256:..."), without the network.
func (s *Store) Lookup(refOrDigest string) (Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.findLocked(refOrDigest)
	if r == nil {
		return Image{}, false
	}
	return s.imageLocked(r), true
}

// findLocked is the record refOrDigest names, or nil. s.mu is held.
func (s *Store) findLocked(refOrDigest string) *record {
	if strings.HasPrefix(refOrDigest, "sha256:") {
		return s.images[refOrDigest]
	}
	ref, err := ParseRef(refOrDigest)
	if err != nil {
		return nil
	}
	return s.images[s.refs[ref.String()]]
}

// List is every finished image, sorted by Ref (then Digest).
func (s *Store) List() []Image {
	s.mu.Lock()
	out := make([]Image, 0, len(s.images))
	for _, r := range s.images {
		out = append(out, s.imageLocked(r))
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ref != out[j].Ref {
			return out[i].Ref < out[j].Ref
		}
		return out[i].Digest < out[j].Digest
	})
	return out
}

// Touch marks the image with digest as used now. The record is written at
// most once a minute: a daemon killed loses at most a minute of it.
func (s *Store) Touch(digest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.images[digest]
	if r == nil || s.closed {
		return
	}
	now := time.Now()
	old := r.UsedAt
	r.UsedAt = now
	if now.Sub(r.savedUse) < touchEvery && !old.IsZero() {
		return
	}
	r.savedUse = now
	if err := s.writeRecordLocked(r); err != nil {
		s.log.Warn("writing an image's last use", "digest", digest, "error", err)
	}
}

// Remove removes a reference, or with a digest the image and all its
// references. The rootfs goes when no reference is left; the caller
// checks first that no thread uses it.
func (s *Store) Remove(ctx context.Context, refOrDigest string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	r := s.findLocked(refOrDigest)
	if r == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: no image %s in the store", ErrNotFound, refOrDigest)
	}
	if !strings.HasPrefix(refOrDigest, "sha256:") {
		ref, _ := ParseRef(refOrDigest)
		delete(s.refs, ref.String())
		delete(r.RefTimes, ref.String())
		if len(r.RefTimes) > 0 {
			err := s.writeRecordLocked(r)
			s.mu.Unlock()
			return err
		}
	}
	s.dropLocked(r)
	s.mu.Unlock()
	return s.removeTree(ctx, r)
}

// Collect removes the images unused since olderThan (their last use, or
// their pull when never used) for which inUse is false; inUse is called
// without the store's lock held. It returns the images removed.
func (s *Store) Collect(ctx context.Context, olderThan time.Time, inUse func(digest string) bool) ([]Image, error) {
	s.mu.Lock()
	var cands []string
	for d, r := range s.images {
		if r.lastUse().Before(olderThan) {
			cands = append(cands, d)
		}
	}
	s.mu.Unlock()
	sort.Strings(cands)
	var out []Image
	var errs []error
	for _, d := range cands {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("image: collecting: %w", err)
		}
		if inUse != nil && inUse(d) {
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return out, errClosed
		}
		r := s.images[d]
		if r == nil || !r.lastUse().Before(olderThan) {
			// Removed, or used, meanwhile.
			s.mu.Unlock()
			continue
		}
		img := s.imageLocked(r)
		s.dropLocked(r)
		s.mu.Unlock()
		if err := s.removeTree(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Info("image collected", "ref", img.Ref, "digest", d, "bytes", img.Bytes)
		out = append(out, img)
	}
	return out, errors.Join(errs...)
}

// dropLocked takes r out of the maps. s.mu is held.
func (s *Store) dropLocked(r *record) {
	delete(s.images, r.Digest)
	for ref := range r.RefTimes {
		if s.refs[ref] == r.Digest {
			delete(s.refs, ref)
		}
	}
	s.bytes -= r.Bytes
}

// removeTree removes a dropped image from disk: the rootfs is first
// renamed into tmp (one step: a kill leaves either the image whole, or a
// record without rootfs that Open drops), then the record goes, then the
// tree.
func (s *Store) removeTree(ctx context.Context, r *record) error {
	h := r.hex()
	gone := filepath.Join(s.tmp, "rm-"+h+"-"+randomHex())
	if err := os.Rename(filepath.Join(s.roots, h), gone); err != nil {
		return fmt.Errorf("image: removing %s: %w", r.Digest, err)
	}
	if err := os.Remove(filepath.Join(s.roots, h+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("image: removing the record of %s: %w", r.Digest, err)
	}
	syncDir(s.roots)
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("image: removing the tree of %s: %w", r.Digest, err)
	}
	s.log.Info("image removed", "digest", r.Digest)
	return nil
}

// imageLocked is r as the API gives it. s.mu is held.
func (s *Store) imageLocked(r *record) Image {
	img := Image{
		Digest: r.Digest, Bytes: r.Bytes, Root: filepath.Join(s.roots, r.hex()),
		Env: append([]string(nil), r.Env...), WorkingDir: r.WorkingDir, User: r.User,
		Loaded: r.Loaded && !r.Pulled, PulledAt: r.PulledAt, UsedAt: r.UsedAt,
	}
	var latest time.Time
	for ref, at := range r.RefTimes {
		img.Refs = append(img.Refs, ref)
		if img.Ref == "" || at.After(latest) || (at.Equal(latest) && ref < img.Ref) {
			img.Ref, latest = ref, at
		}
	}
	sort.Strings(img.Refs)
	return img
}

// addRefLocked points ref at r (moving it from another image, which keeps
// its rootfs: a thread may run on it; Collect takes it once unused), and
// writes the records. s.mu is held.
func (s *Store) addRefLocked(r *record, ref string, pulled bool) error {
	// Written when the reference is new to r, or not its latest yet
	// (Image.Ref is the latest).
	changed := s.refs[ref] != r.Digest || s.imageLocked(r).Ref != ref
	if pulled && !r.Pulled {
		r.Pulled, changed = true, true
	}
	if !changed {
		return nil
	}
	r.RefTimes[ref] = time.Now()
	// The new holder first: see load.
	if err := s.writeRecordLocked(r); err != nil {
		return err
	}
	if old := s.images[s.refs[ref]]; old != nil && old != r {
		delete(old.RefTimes, ref)
		if err := s.writeRecordLocked(old); err != nil {
			return err
		}
		s.log.Info("reference moved", "ref", ref, "from", old.Digest, "to", r.Digest)
	}
	s.refs[ref] = r.Digest
	return nil
}

// parsePlatform parses Config.Platform.
func parsePlatform(p string) (v1.Platform, error) {
	if p == "" {
		return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, nil
	}
	plat, err := v1.ParsePlatform(p)
	if err != nil || plat.OS == "" || plat.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("image: platform %q is not os/arch[/variant]", p)
	}
	return *plat, nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// syncDir makes a rename in dir durable; a failure only weakens that.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
