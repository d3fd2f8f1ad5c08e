// Package images is the room of the threads' images: the daemon's image
// store (package image), the pins of threads to images by digest, the
// collection of images no thread has used for a while, and the image
// calls (pull, load, list, remove).
//
// A thread names an image in its settings (meta.Settings.Image); at its
// bind the room pins it (Pin): the reference is normalised and resolved
// to the digest of its manifest, pulled first if the store lacks it, and
// the digest joins the settings, so that the thread runs on that very
// image here and on any server that takes it over. A jail's start asks
// for the pinned image's root (JailImage), which is pulled again by
// digest if this server has none.
//
// It owns the store, the figures of its use and the collector's
// goroutine; it calls no other room (the bindings come from the metadata
// store, through Bindings).
package images

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/image"
	"warren/jail"
	"warren/meta"
)

// DefaultKeep is how long an image no bound thread names is kept after
// its last use.
const DefaultKeep = 7 * 24 * time.Hour

// collectEvery is how often the collector looks for images past Keep.
const collectEvery = time.Hour

// Bindings lists the threads' bindings (the metadata store), for the
// users of each image.
type Bindings interface {
	ListBindingsPage(ctx context.Context, tenant *string, after *meta.ThreadKey, limit int) ([]meta.Binding, bool, error)
}

// Config is the images room's.
type Config struct {
	// Store configures the image store (its folder, bounds, registries).
	Store image.Config
	// Default is the image of a thread that names none (serve
	// --jail-image); "" leaves such threads on the host-folder root.
	Default string
	// Keep is how long an unused image stays; 0 means DefaultKeep.
	Keep     time.Duration
	Bindings Bindings
	Logger   hclog.Logger
}

// Images is the room. Start makes it; Close stops its collector and
// closes the store.
type Images struct {
	cfg   Config
	log   hclog.Logger
	store *image.Store
	def   string // Default, normalised

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start opens the image store (removing what a pull cut short left) and
// starts the collector.
func Start(ctx context.Context, cfg Config) (*Images, error) {
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Store.Logger = cfg.Logger.Named("images")
	im := &Images{cfg: cfg, log: cfg.Store.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Default != "" {
		r, err := image.ParseRef(cfg.Default)
		if err != nil {
			return nil, fmt.Errorf("the jails' default image: %w", err)
		}
		im.def = r.String()
	}
	if cfg.Store.MountPoints.Dirs == nil {
		dirs, files := jail.ImageMountPoints()
		im.cfg.Store.MountPoints = image.MountPoints{Dirs: dirs, Files: files}
	}
	s, err := image.Open(ctx, im.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("open the image store: %w", err)
	}
	im.store = s
	go im.collector()
	return im, nil
}

// Close stops the collector and closes the store.
func (im *Images) Close() error {
	var err error
	im.once.Do(func() {
		close(im.stop)
		<-im.done
		err = im.store.Close()
	})
	return err
}

// Bytes is the store's size on disk, for the metrics.
func (im *Images) Bytes() int64 { return im.store.Bytes() }

// Size is the unpacked size of the image of digest, if the store holds
// it.
func (im *Images) Size(digest string) (int64, bool) {
	img, ok := im.store.Lookup(digest)
	return img.Bytes, ok
}

// Default is the normalised default image, "" for none.
func (im *Images) Default() string { return im.def }

// Normalise returns ref as the store names it ("node:22" is
// "docker.io/library/node:22"); "" stays "".
func Normalise(ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	r, err := image.ParseRef(ref)
	if err != nil {
		return "", fmt.Errorf("%w: image %s: %v", api.ErrInvalid, call.Quote(ref), err)
	}
	return r.String(), nil
}

// Pin resolves the image settings s names to a digest and makes sure the
// store holds it, pulling it if need be; old are the settings the thread
// had, whose pin stays while the reference is the same (a thread keeps
// its image until its settings name another). A thread naming no image
// gets the default image, pinned the same way. It returns s with Image
// normalised and ImageDigest set (both "" for the host-folder root).
func (im *Images) Pin(ctx context.Context, s meta.Settings, old *meta.Settings) (meta.Settings, error) {
	ref, err := Normalise(s.Image)
	if err != nil {
		return s, err
	}
	if ref == "" {
		ref = im.def
	}
	if ref == "" {
		if s.ImageDigest != "" {
			return s, fmt.Errorf("%w: settings: imageDigest without an image", api.ErrInvalid)
		}
		s.Image = ""
		return s, nil
	}
	s.Image = ref
	r, _ := image.ParseRef(ref)
	switch {
	case r.Digest() != "":
		// A reference by digest pins itself.
		if s.ImageDigest != "" && s.ImageDigest != r.Digest() {
			return s, fmt.Errorf("%w: settings: image %s and imageDigest %s disagree", api.ErrInvalid, ref, s.ImageDigest)
		}
		s.ImageDigest = r.Digest()
	case s.ImageDigest != "" && old != nil && old.ImageDigest == s.ImageDigest && old.Image != ref:
		// The old image's pin, carried over by a client that changed
		// only the reference (it sent the settings it read back): the
		// new reference is pinned afresh.
		s.ImageDigest = ""
		if img, ok := im.store.Lookup(ref); ok {
			s.ImageDigest = img.Digest
		}
	case s.ImageDigest != "":
		// Given by the client, or kept from the binding.
	case old != nil && old.Image == ref && old.ImageDigest != "":
		s.ImageDigest = old.ImageDigest
	}
	img, err := im.ensure(ctx, ref, s.ImageDigest)
	if err != nil {
		return s, err
	}
	s.ImageDigest = img.Digest
	return s, nil
}

// ensure returns the image ref names, pinned to digest if set, from the
// store or pulled into it.
func (im *Images) ensure(ctx context.Context, ref, digest string) (image.Image, error) {
	if digest != "" {
		if img, ok := im.store.Lookup(digest); ok {
			return img, nil
		}
		pinned, err := byDigest(ref, digest)
		if err != nil {
			return image.Image{}, err
		}
		img, err := im.store.Pull(ctx, pinned, progressOf(ctx))
		if err != nil {
			return image.Image{}, fmt.Errorf("%w (an image loaded with `warren image load` on another server is in no registry: load it on this server too)", pullError(pinned, err))
		}
		return img, nil
	}
	if img, ok := im.store.Lookup(ref); ok {
		return img, nil
	}
	img, err := im.store.Pull(ctx, ref, progressOf(ctx))
	if err != nil {
		return image.Image{}, pullError(ref, err)
	}
	return img, nil
}

// byDigest is ref pinned to digest: its repository at that digest.
func byDigest(ref, digest string) (string, error) {
	repo := ref
	if at := strings.LastIndexByte(repo, '@'); at >= 0 {
		repo = repo[:at]
	}
	// A tag goes: a colon after the last slash is the tag's (a port's
	// colon comes before it).
	if c := strings.LastIndexByte(repo, ':'); c > strings.LastIndexByte(repo, '/') {
		repo = repo[:c]
	}
	r, err := image.ParseRef(repo + "@" + digest)
	if err != nil {
		return "", fmt.Errorf("%w: image %s at digest %s: %v", api.ErrInvalid, ref, call.Quote(digest), err)
	}
	return r.String(), nil
}

// JailImage is the root a jail of a thread pinned to ref at digest runs
// on, pulled again if this server's store has lost it (or never had
// it: the thread moved here).
func (im *Images) JailImage(ctx context.Context, ref, digest string) (*jail.Image, error) {
	img, err := im.ensure(ctx, ref, digest)
	if err != nil {
		return nil, err
	}
	im.store.Touch(img.Digest)
	return &jail.Image{Root: img.Root, Env: img.Env, WorkingDir: img.WorkingDir, User: img.User}, nil
}

// pullError says what went wrong with a pull, as the API classes it: a
// full store is a 507, a registry the server does not allow a 403, a
// refused image (a hostile layer, a digest that does not match, another
// platform) a 400, an image the registry does not have a 404.
func pullError(ref string, err error) error {
	var class error
	switch {
	case errors.Is(err, image.ErrStoreFull):
		class = api.ErrNoSpace
	case errors.Is(err, image.ErrNotAllowed):
		class = api.ErrForbidden
	case errors.Is(err, image.ErrRefused):
		class = api.ErrInvalid
	case errors.Is(err, image.ErrNotFound):
		class = api.ErrNotFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pull image %s: %w", ref, err)
	default:
		class = api.ErrUnavailable
	}
	return fmt.Errorf("%w: pull image %s: %v", class, ref, err)
}

// users maps each image digest to the bound threads that are pinned to
// it, read from the metadata store page by page.
func (im *Images) users(ctx context.Context) (map[string][]string, error) {
	out := make(map[string][]string)
	var after *meta.ThreadKey
	for {
		page, more, err := im.cfg.Bindings.ListBindingsPage(ctx, nil, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("list the threads' bindings: %w", err)
		}
		for _, b := range page {
			if b.Settings.ImageDigest != "" && b.State == meta.StateBound {
				out[b.Settings.ImageDigest] = append(out[b.Settings.ImageDigest], call.KeyName(b.ThreadKey))
			}
		}
		if !more || len(page) == 0 {
			return out, nil
		}
		k := page[len(page)-1].ThreadKey
		after = &k
	}
}

// collector removes, every collectEvery, the images that no bound thread
// names and that none has used for Keep.
func (im *Images) collector() {
	defer close(im.done)
	t := time.NewTicker(collectEvery)
	defer t.Stop()
	for {
		im.collect()
		select {
		case <-im.stop:
			return
		case <-t.C:
		}
	}
}

func (im *Images) collect() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-im.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := im.Collect(ctx, time.Now().Add(-im.cfg.Keep)); err != nil && ctx.Err() == nil {
		im.log.Warn("collect unused images", "error", err)
	}
}

// Collect removes the images no bound thread names and none has used
// since before.
func (im *Images) Collect(ctx context.Context, before time.Time) error {
	users, err := im.users(ctx)
	if err != nil {
		return err
	}
	gone, err := im.store.Collect(ctx, before, func(digest string) bool { return len(users[digest]) > 0 })
	for _, img := range gone {
		im.log.Info("unused image removed", "ref", img.Ref, "digest", img.Digest, "bytes", img.Bytes, "used_at", img.UsedAt)
	}
	return err
}

// List is the store's images, each with its users.
func (im *Images) List(ctx context.Context) (api.ImagesResponse, error) {
	users, err := im.users(ctx)
	if err != nil {
		return api.ImagesResponse{}, err
	}
	resp := api.ImagesResponse{Images: []api.Image{}, StoreBytes: im.store.Bytes(), LimitBytes: im.cfg.Store.StoreBytes}
	for _, img := range im.store.List() {
		a := apiImage(img)
		a.Threads = users[img.Digest]
		sort.Strings(a.Threads)
		resp.Images = append(resp.Images, a)
	}
	return resp, nil
}

func apiImage(img image.Image) api.Image {
	a := api.Image{Ref: img.Ref, Digest: img.Digest, Bytes: img.Bytes, Loaded: img.Loaded, PulledAt: img.PulledAt, UsedAt: img.UsedAt}
	if len(img.Refs) > 1 {
		a.Refs = img.Refs
	}
	return a
}

// Pull fetches ref into the store (a no-op if it holds it already).
func (im *Images) Pull(ctx context.Context, ref string) (api.Image, error) {
	n, err := Normalise(ref)
	if err != nil {
		return api.Image{}, err
	}
	if n == "" {
		return api.Image{}, fmt.Errorf("%w: no image named", api.ErrInvalid)
	}
	img, err := im.store.Pull(ctx, n, progressOf(ctx))
	if err != nil {
		return api.Image{}, pullError(n, err)
	}
	return apiImage(img), nil
}

// Load adds the image of an archive on the server's disk to the store.
func (im *Images) Load(ctx context.Context, path, name string) (api.Image, error) {
	if path == "" || !strings.HasPrefix(path, "/") {
		return api.Image{}, fmt.Errorf("%w: load: the archive's path %s is not absolute (it is read on the server)", api.ErrInvalid, call.Quote(path))
	}
	if name != "" {
		if _, err := Normalise(name); err != nil {
			return api.Image{}, err
		}
	}
	img, err := im.store.Load(ctx, path, name, progressOf(ctx))
	if err != nil {
		if errors.Is(err, image.ErrNotFound) {
			return api.Image{}, fmt.Errorf("%w: load %s: %v", api.ErrNotFound, path, err)
		}
		return api.Image{}, pullError(path, err)
	}
	return apiImage(img), nil
}

// Remove takes ref (or a digest) out of the store, refused while a bound
// thread is pinned to its image.
func (im *Images) Remove(ctx context.Context, ref string) (string, error) {
	key := ref
	if !strings.HasPrefix(ref, "sha256:") {
		n, err := Normalise(ref)
		if err != nil {
			return "", err
		}
		key = n
	}
	img, ok := im.store.Lookup(key)
	if !ok {
		return "", fmt.Errorf("%w: no image %s in this server's store", api.ErrNotFound, call.Quote(ref))
	}
	users, err := im.users(ctx)
	if err != nil {
		return "", err
	}
	if u := users[img.Digest]; len(u) > 0 && (len(img.Refs) <= 1 || strings.HasPrefix(key, "sha256:")) {
		sort.Strings(u)
		more := ""
		if len(u) > 5 {
			more = fmt.Sprintf(" and %d more", len(u)-5)
			u = u[:5]
		}
		return "", fmt.Errorf("%w: image %s is the image of the bound threads %s%s: close or delete them first", api.ErrConflict, img.Ref, strings.Join(u, ", "), more)
	}
	if err := im.store.Remove(ctx, key); err != nil {
		if errors.Is(err, image.ErrNotFound) {
			return "", fmt.Errorf("%w: no image %s in this server's store", api.ErrNotFound, call.Quote(ref))
		}
		return "", fmt.Errorf("remove image %s: %w", ref, err)
	}
	return key, nil
}
