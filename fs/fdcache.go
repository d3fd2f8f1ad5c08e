package fs

import (
	"container/list"
	"sync"

	"golang.org/x/sys/unix"
)

// A node keeps an O_PATH descriptor of its backing inode, so that every
// operation acts on that very inode and never resolves a path. The kernel
// may know far more inodes than a process may hold descriptors (a big
// node_modules has hundreds of thousands; a container may cap a process at
// twenty thousand), so the descriptors are a cache with a budget shared by
// every mount of the hub: the least recently used idle ones are closed, and
// reopened on demand with open_by_handle_at, which names the same inode
// exactly (a handle is not a path: no link is followed, no name can be
// swapped in). A handle of an inode that is gone opens as ESTALE.

// fdCache bounds the open node descriptors.
type fdCache struct {
	budget int // immutable

	mu   sync.Mutex
	idle list.List // *pathFd with an open descriptor and no user, most recent first; guarded by mu
	open int       // open descriptors counted against budget; guarded by mu
}

func newFDCache(budget int) *fdCache {
	return &fdCache{budget: budget}
}

// pathFd is the descriptor of one node, open or closed.
//
// Lock order: pathFd.mu before fdCache.mu.
type pathFd struct {
	cache   *fdCache // nil: pinned, never evicted (the root)
	mountFd int      // any descriptor on the backing filesystem, for open_by_handle_at

	mu      sync.Mutex
	fd      int              // -1 while closed; guarded by mu
	users   int              // operations using fd now; guarded by mu
	handle  *unix.FileHandle // taken before the first eviction; guarded by mu
	noEvict bool             // no handle could be had: keep fd open; guarded by mu
	gone    bool             // closed for good; guarded by mu
	elem    *list.Element    // place in cache.idle; guarded by cache.mu
}

func (c *fdCache) newPathFd(fd, mountFd int) *pathFd {
	p := &pathFd{cache: c, mountFd: mountFd, fd: fd}
	if c != nil {
		c.mu.Lock()
		c.open++
		c.mu.Unlock()
	}
	return p
}

// acquire returns the open descriptor, reopening it by handle if it was
// evicted. Every successful acquire must be followed by release.
func (p *pathFd) acquire() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return -1, unix.ESTALE
	}
	if p.fd < 0 {
		fd, err := unix.OpenByHandleAt(p.mountFd, *p.handle, unix.O_PATH|unix.O_CLOEXEC)
		if err != nil {
			return -1, err
		}
		p.fd = fd
		if p.cache != nil {
			p.cache.mu.Lock()
			p.cache.open++
			p.cache.mu.Unlock()
		}
	}
	p.users++
	if p.users == 1 && p.cache != nil {
		p.cache.mu.Lock()
		if p.elem != nil {
			p.cache.idle.Remove(p.elem)
			p.elem = nil
		}
		p.cache.mu.Unlock()
	}
	return p.fd, nil
}

// release ends a use begun by acquire, and trims the cache to its budget.
func (p *pathFd) release() {
	p.mu.Lock()
	p.users--
	if p.gone && p.users == 0 && p.fd >= 0 {
		// Forgotten while in use: close now that the last use ended.
		unix.Close(p.fd)
		p.fd = -1
	}
	idle := p.users == 0 && !p.gone && p.cache != nil
	if idle {
		p.cache.mu.Lock()
		p.elem = p.cache.idle.PushFront(p)
		p.cache.mu.Unlock()
	}
	p.mu.Unlock()
	if idle {
		p.cache.trim()
	}
}

// get returns the descriptor of a pinned pathFd (the root), which is never
// evicted.
func (p *pathFd) get() int { return p.fd }

// close closes the descriptor for good (the kernel forgot the node).
func (p *pathFd) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	p.gone = true
	if p.cache != nil {
		p.cache.mu.Lock()
		if p.elem != nil {
			p.cache.idle.Remove(p.elem)
			p.elem = nil
		}
		if p.fd >= 0 {
			p.cache.open--
		}
		p.cache.mu.Unlock()
	}
	if p.fd >= 0 && p.users == 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// trim closes idle descriptors, least recently used first, until the cache
// is within its budget.
func (c *fdCache) trim() {
	for {
		c.mu.Lock()
		if c.open <= c.budget || c.idle.Len() == 0 {
			c.mu.Unlock()
			return
		}
		victim := c.idle.Remove(c.idle.Back()).(*pathFd)
		victim.elem = nil
		c.mu.Unlock()
		victim.evict()
	}
}

// evict closes p's descriptor if nobody uses it, taking its handle first.
func (p *pathFd) evict() {
	if !p.mu.TryLock() {
		return // in use right now: it will be idle again later
	}
	defer p.mu.Unlock()
	if p.users > 0 || p.fd < 0 || p.gone || p.noEvict {
		return
	}
	if p.handle == nil {
		h, _, err := unix.NameToHandleAt(p.fd, "", unix.AT_EMPTY_PATH)
		if err != nil {
			// The backing filesystem gives no handles: this one stays
			// open and is no longer offered for eviction.
			p.noEvict = true
			return
		}
		p.handle = &h
	}
	unix.Close(p.fd)
	p.fd = -1
	p.cache.mu.Lock()
	p.cache.open--
	p.cache.mu.Unlock()
}
