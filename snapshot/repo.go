package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// ErrNotFound is matched (errors.Is) by the error for an object the
// repository does not hold.
var ErrNotFound = errors.New("snapshot: object not found")

// Repo is one repository folder. Its methods may be called from any
// number of goroutines and processes at once; see the package doc for
// the lock that Collect needs from the others. Call Close when done: it
// stops the Repo's spreading goroutine.
type Repo struct {
	dir     string // the repository folder
	objects string // dir/objects
	tmp     string // dir/tmp
	dirFd   int    // the repository folder, for syncfs; closed by Close
	tmpFd   int    // dir/tmp, to make a log's name durable; closed by Close

	skip func(name string) bool // names left out of trees; never nil

	encoders *pool[*zstd.Encoder]
	decoders *pool[*zstd.Decoder]
	buffers  *pool[[]byte] // smallMax+1 bytes each: a small file, or a big one's first part

	trees *treeCache

	// spread is the spreading goroutine (spread.go); nil without one
	// (a test's). Set by Open.
	spread *spreader
	// others caches what was read of other Repos' logs (pending.go).
	others otherLogs

	// mu guards the fields below it, and the refs of the logs.
	mu sync.Mutex
	// logs are this Repo's logs that are durable and not yet spread, in
	// the order published. The spreader removes them.
	logs []*pendingLog
	// passes counts the spreader's passes; passDone is closed at the end
	// of the current one (and replaced); passErr is the last one's error.
	passes   uint64
	passDone chan struct{}
	passErr  error

	// hook, when set (by tests), is called at the named steps of a build,
	// with the path being built: "examine" between the lstat of an entry
	// and its open.
	hook func(step, path string)
	// spreadHook, when set (by tests, at Open), is called by the spreader
	// with a log's name before it spreads it.
	spreadHook func(log string)
	// collectHook, when set (WithCollectHook), is called at the steps of
	// a Collect (collectStep).
	collectHook func(step string)

	// limits bound what one Build reads (WithLimits).
	limits Limits
}

// Option sets up a Repo at Open.
type Option func(*config)

type config struct {
	skip       func(name string) bool
	cacheBytes int
	noSpreader bool             // tests: logs are left as a crash would leave them
	spreadHook func(log string) // tests: see Repo.spreadHook
	collect    func(step string)
	limits     Limits
}

// WithCollectHook has Collect call fn at its steps: "wait" before a sweep
// asks for the exclusive lock, "sweep" once it holds it. It is for tests
// (to know that a collection is due and waiting) and tracing; fn must
// not take the lock.
func WithCollectHook(fn func(step string)) Option {
	return func(c *config) { c.collect = fn }
}

// WithLimits bounds what one Build reads (see Limits); zero fields mean
// the defaults.
func WithLimits(l Limits) Option {
	return func(c *config) { c.limits = l }
}

// WithSkip sets the rule for the names that Build leaves out of trees, in
// place of DefaultSkip. Use it when the workspace holds other temporary
// files of the daemon's; compose with DefaultSkip to keep its rule.
func WithSkip(skip func(name string) bool) Option {
	return func(c *config) { c.skip = skip }
}

// WithTreeCache bounds the cache of decoded trees to about n bytes of
// entries (default 8 MiB); 0 turns the cache off. An incremental build
// needs only the trees on its changed paths; a larger cache helps Diff
// and Collect in repositories whose workspaces hold many folders.
func WithTreeCache(n int) Option {
	return func(c *config) { c.cacheBytes = n }
}

// TempPrefix begins the names of the daemon's file API's temporary files,
// which DefaultSkip leaves out.
const TempPrefix = ".warren-write-"

// DefaultSkip is the default rule for the names Build leaves out: the
// daemon's temporary files (TempPrefix).
func DefaultSkip(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// poolSize is how many encoders, decoders and buffers a Repo keeps for
// reuse; more are made while more goroutines need them, and dropped after.
const poolSize = 2

// staleTemp is the age past which a file in tmp/ other than a log is
// taken for one left by a crash: no spreader keeps one open for this
// long. (Logs are told by their lock, never by their age.)
const staleTemp = time.Hour

// Open opens the repository in dir, making it (mode 0700) if need be,
// spreads the logs of tmp/ that a crashed process left (those no live
// process holds; see the package doc), removes other files of tmp/ older
// than an hour, and starts the Repo's spreading goroutine. Call Close
// when done.
func Open(dir string, opts ...Option) (*Repo, error) {
	cfg := config{skip: DefaultSkip, cacheBytes: 8 << 20}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.skip == nil {
		cfg.skip = func(string) bool { return false }
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	r := &Repo{
		dir:      dir,
		objects:  filepath.Join(dir, "objects"),
		tmp:      filepath.Join(dir, "tmp"),
		dirFd:    -1,
		tmpFd:    -1,
		skip:     cfg.skip,
		trees:    newTreeCache(cfg.cacheBytes),
		passDone: make(chan struct{}),

		spreadHook:  cfg.spreadHook,
		collectHook: cfg.collect,
		limits:      cfg.limits.WithDefaults(),
	}
	if err := r.layout(); err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	r.dirFd = fd
	if r.tmpFd, err = unix.Open(r.tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		r.Close()
		return nil, fmt.Errorf("snapshot: open %s: %w", r.tmp, err)
	}
	// Encoders and decoders are synchronous (concurrency 1: no goroutines
	// of their own) and small: a 1 MiB window and zstd's lower-memory
	// modes keep an encoder near 3 MiB and a decoder near 1.5 MiB once
	// used, against 17 and 5 MiB with the defaults. Each pool keeps
	// poolSize of them, so an idle Repo that has worked holds about 11 MiB
	// with its buffers, and its tree cache.
	r.encoders = newPool(poolSize, func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	}, func(e *zstd.Encoder) { e.Close() })
	r.decoders = newPool(poolSize, func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(maxDecoded))
	}, func(d *zstd.Decoder) { d.Close() })
	r.buffers = newPool(poolSize, func() ([]byte, error) { return make([]byte, smallMax+1), nil }, nil)
	if _, err := r.recoverLogs(); err != nil {
		r.Close()
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	if _, err := r.removeStaleTemps(); err != nil {
		r.Close()
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	if !cfg.noSpreader {
		r.startSpreader()
	}
	return r, nil
}

// layout makes the repository's folders and lock files where missing.
func (r *Repo) layout() error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("make folder: %w", err)
	}
	if err := os.MkdirAll(r.tmp, 0o700); err != nil {
		return fmt.Errorf("make tmp: %w", err)
	}
	// The fan-out folders: made once, so that writing an object never
	// has to make one (and fsync its parent).
	// They are made durable before any object goes in: an object's fsync
	// and its folder's make only the object durable.
	if _, err := os.Stat(filepath.Join(r.objects, "ff")); err != nil {
		for i := 0; i < 256; i++ {
			if err := os.MkdirAll(filepath.Join(r.objects, fmt.Sprintf("%02x", i)), 0o700); err != nil {
				return fmt.Errorf("make objects: %w", err)
			}
		}
		for _, p := range []string{r.objects, r.dir, filepath.Dir(r.dir)} {
			if err := fsyncPath(p); err != nil {
				return fmt.Errorf("make objects: %w", err)
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(r.dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("make %s: %w", lockName, err)
	}
	f.Close()
	return nil
}

// Close spreads the logs of this Repo not yet spread and stops its
// spreading goroutine, waiting for it; then releases the encoders and
// decoders the repository keeps and its folders' descriptors. A log it
// fails to spread stays in tmp/, durable, for the next Open; Close then
// returns the error. The Repo must not be used after, nor Close called
// while a method of it runs.
func (r *Repo) Close() error {
	err := r.stopSpreader()
	r.mu.Lock()
	logs := r.logs
	r.logs = nil
	r.mu.Unlock()
	for _, pl := range logs {
		r.release(pl) // its lock goes: the log is left as a crash leaves one
	}
	r.encoders.close()
	r.decoders.close()
	r.buffers.close()
	r.trees.clear()
	for _, fd := range []*int{&r.tmpFd, &r.dirFd} {
		if *fd >= 0 {
			if cerr := unix.Close(*fd); cerr != nil && err == nil {
				err = fmt.Errorf("snapshot: close %s: %w", r.dir, cerr)
			}
			*fd = -1
		}
	}
	return err
}

// Dir returns the repository folder.
func (r *Repo) Dir() string { return r.dir }

// objectPath is where the object h is kept.
func (r *Repo) objectPath(h Hash) string {
	s := h.String()
	return r.objects + "/" + s[:2] + "/" + s[2:]
}

// removeStaleTemps removes the files of tmp/ older than staleTemp, but
// logs, and returns how many it removed. Another process may be writing
// the others.
func (r *Repo) removeStaleTemps() (int, error) {
	ents, err := os.ReadDir(r.tmp)
	if err != nil {
		return 0, fmt.Errorf("list tmp: %w", err)
	}
	n := 0
	for _, e := range ents {
		if isLogName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone already
		}
		if time.Since(info.ModTime()) < staleTemp {
			continue
		}
		if err := os.Remove(filepath.Join(r.tmp, e.Name())); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("remove stale %s: %w", e.Name(), err)
		}
	}
	return n, nil
}

// pool keeps up to a fixed number of costly values (zstd encoders and
// decoders, big buffers) for reuse. Unlike a sync.Pool it keeps them
// across garbage collections, and close releases them.
type pool[T any] struct {
	free    chan T
	make    func() (T, error)
	release func(T) // nil: nothing to release
}

func newPool[T any](n int, mk func() (T, error), release func(T)) *pool[T] {
	return &pool[T]{free: make(chan T, n), make: mk, release: release}
}

func (p *pool[T]) get() (T, error) {
	select {
	case v := <-p.free:
		return v, nil
	default:
		return p.make()
	}
}

func (p *pool[T]) put(v T) {
	select {
	case p.free <- v:
	default:
		if p.release != nil {
			p.release(v)
		}
	}
}

func (p *pool[T]) close() {
	for {
		select {
		case v := <-p.free:
			if p.release != nil {
				p.release(v)
			}
		default:
			return
		}
	}
}
