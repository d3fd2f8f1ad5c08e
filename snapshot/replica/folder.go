package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FolderStore is a Store in a folder, a shared disk's say: a key is a
// file at that path below it. A Put writes a temporary file in DIR/.tmp/,
// fsyncs it, renames it into place and fsyncs its folder, so a key holds
// all of a Put or nothing of it, even across a crash; folders are made
// as keys need them (and fsync'ed in their parents). Several processes,
// on several machines, may use one folder at once.
type FolderStore struct {
	dir string // the store's folder
	tmp string // dir/.tmp: Puts under way
}

var _ Store = (*FolderStore)(nil)

// staleTemp is the age past which a file in .tmp/ is taken for one a
// crash left: no Put takes this long to write a pack.
const staleTemp = time.Hour

// NewFolder opens the store in dir, making the folder (mode 0700) if need
// be, and removes the temporary files of .tmp/ older than an hour (those
// that crashed Puts left; another process may be writing the newer ones).
func NewFolder(dir string) (*FolderStore, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("replica: open folder store %s: %w", dir, err)
	}
	s := &FolderStore{dir: dir, tmp: filepath.Join(dir, ".tmp")}
	if err := os.MkdirAll(s.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("replica: open folder store %s: %w", dir, err)
	}
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return nil, fmt.Errorf("replica: open folder store %s: list .tmp: %w", dir, err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(s.tmp, e.Name())) // gone already, or retried at the next open
		}
	}
	return s, nil
}

// String names the store: its folder.
func (s *FolderStore) String() string { return s.dir }

// path returns the file of key, which must be valid.
func (s *FolderStore) path(key string) string { return filepath.Join(s.dir, filepath.FromSlash(key)) }

func (s *FolderStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("replica: put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	dst := s.path(key)
	if err := s.makeFolders(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(s.tmp, "put-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	_, err = io.Copy(f, &exactReader{r: ctxReader{ctx, r}, left: size})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	if err := syncFolder(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("replica: put %s: %w", key, err)
	}
	return nil
}

// makeFolders makes the folder dir below the store's and those on the way
// to it where missing, each made durable in its parent.
func (s *FolderStore) makeFolders(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("make folder %s: not below the store", dir)
	}
	cur := s.dir
	for _, e := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, e)
		err := os.Mkdir(cur, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("make folder: %w", err)
		}
		if err := syncFolder(parent); err != nil {
			return err
		}
	}
	return nil
}

// syncFolder fsyncs the folder dir, so that the names made or removed in
// it are durable.
func syncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

func (s *FolderStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("replica: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replica: get %s: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replica: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("replica: get %s: %w", key, err)
	}
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = ErrNotFound // a folder on the way to other keys
		}
		return nil, fmt.Errorf("replica: get %s: %w", key, err)
	}
	return f, nil
}

func (s *FolderStore) Stat(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, fmt.Errorf("replica: stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("replica: stat %s: %w", key, err)
	}
	info, err := os.Lstat(s.path(key))
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.Mode().IsRegular() {
		return Info{}, fmt.Errorf("replica: stat %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("replica: stat %s: %w", key, err)
	}
	// A Put renames a new file into place: its mtime is the Put's.
	return Info{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

func (s *FolderStore) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("replica: list: %w", err)
	}
	// Walk the deepest folder the prefix names whole.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	root := s.dir
	if base != "" {
		root = s.path(base)
	}
	var fnErr error // fn's own, returned as it is
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // nothing under the prefix
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != root {
			if d.IsDir() {
				return fs.SkipDir // .tmp: Puts under way
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || !validKey(key, false) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since the folder was read
		}
		if err != nil {
			return err
		}
		if fnErr = fn(Info{Key: key, Size: info.Size(), ModTime: info.ModTime()}); fnErr != nil {
			return fs.SkipAll
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("replica: list %q: %w", prefix, err)
	}
	return nil
}

func (s *FolderStore) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("replica: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replica: delete %s: %w", key, err)
	}
	p := s.path(key)
	info, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.Mode().IsRegular() {
		return nil // a folder on the way to other keys is no key
	}
	if err == nil {
		err = os.Remove(p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: delete %s: %w", key, err)
	}
	// Durable, so that a manifest deleted before its packs (by a
	// collection) does not come back after a crash, naming packs gone.
	if err := syncFolder(filepath.Dir(p)); err != nil {
		return fmt.Errorf("replica: delete %s: %w", key, err)
	}
	return nil
}

// ctxReader fails its reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// removeAborted removes the temporary files of .tmp/ last written before
// the time given: Puts that a crash cut short (a Put under way writes its
// file all along).
func (s *FolderStore) removeAborted(ctx context.Context, before time.Time) (int, error) {
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return 0, fmt.Errorf("replica: list %s: %w", s.tmp, err)
	}
	n := 0
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(before) {
			continue // gone meanwhile, or young
		}
		err = os.Remove(filepath.Join(s.tmp, e.Name()))
		if err == nil {
			n++
		} else if !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("replica: remove %s: %w", e.Name(), err)
		}
	}
	return n, nil
}
