package snapshot

import (
	"container/list"
	"sync"
)

// treeObj is a decoded tree and the counts of its header. Values in the
// cache are shared: nobody changes them.
type treeObj struct {
	entries Tree
	sum     counts
}

// treeCache keeps the most recently used decoded trees, up to about max
// bytes of entries: a build reads the same trees again and again (its
// base, the folders on changed paths), and Diff and Collect do too.
type treeCache struct {
	max int // bytes; 0 keeps nothing

	mu    sync.Mutex
	bytes int                    // the sizes of the trees in lru
	lru   *list.List             // of *cached, most recent first
	byKey map[Hash]*list.Element // into lru
}

type cached struct {
	h    Hash
	obj  *treeObj
	size int
}

func newTreeCache(max int) *treeCache {
	return &treeCache{max: max, lru: list.New(), byKey: make(map[Hash]*list.Element)}
}

// treeSize estimates the memory a decoded tree takes.
func treeSize(t Tree) int {
	n := 64
	for _, e := range t {
		n += len(e.Name) + 80
	}
	return n
}

func (c *treeCache) get(h Hash) (*treeObj, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[h]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached).obj, true
}

func (c *treeCache) add(h Hash, obj *treeObj) {
	size := treeSize(obj.entries)
	if size > c.max/4 {
		return // one tree must not empty the cache
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[h]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.byKey[h] = c.lru.PushFront(&cached{h: h, obj: obj, size: size})
	c.bytes += size
	for c.bytes > c.max {
		c.removeLocked(c.lru.Back())
	}
}

// drop forgets h (its object was removed).
func (c *treeCache) drop(h Hash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[h]; ok {
		c.removeLocked(el)
	}
}

func (c *treeCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	clear(c.byKey)
	c.bytes = 0
}

// removeLocked removes el. c.mu must be held.
func (c *treeCache) removeLocked(el *list.Element) {
	ce := c.lru.Remove(el).(*cached)
	delete(c.byKey, ce.h)
	c.bytes -= ce.size
}
