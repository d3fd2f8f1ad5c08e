package gateway

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"warren/meta"
)

// memStore is an in-memory meta.Store for tests, until the Badger store is
// in the tree. It keeps the interface's compare-and-set promises.
type memStore struct {
	mu       sync.Mutex
	rev      uint64
	bindings map[meta.ThreadKey]meta.Binding
	mounts   map[string]meta.InspectionMount
	closed   bool
}

var _ meta.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{bindings: make(map[meta.ThreadKey]meta.Binding), mounts: make(map[string]meta.InspectionMount)}
}

func (s *memStore) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.Binding{}, meta.ErrClosed
	}
	if _, ok := s.bindings[b.ThreadKey]; ok {
		return meta.Binding{}, meta.ErrExists
	}
	s.rev++
	b.Revision = s.rev
	s.bindings[b.ThreadKey] = b
	return b, nil
}

func (s *memStore) UpdateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.Binding{}, meta.ErrClosed
	}
	old, ok := s.bindings[b.ThreadKey]
	if !ok {
		return meta.Binding{}, meta.ErrNotFound
	}
	if old.Revision != b.Revision {
		return meta.Binding{}, meta.ErrConflict
	}
	s.rev++
	b.Revision = s.rev
	s.bindings[b.ThreadKey] = b
	return b, nil
}

func (s *memStore) GetBinding(ctx context.Context, k meta.ThreadKey) (meta.Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.Binding{}, meta.ErrClosed
	}
	b, ok := s.bindings[k]
	if !ok {
		return meta.Binding{}, meta.ErrNotFound
	}
	return b, nil
}

func (s *memStore) ListBindings(ctx context.Context) ([]meta.Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, meta.ErrClosed
	}
	var out []meta.Binding
	for _, b := range s.bindings {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b meta.Binding) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Thread, b.Thread))
	})
	return out, nil
}

func (s *memStore) DeleteBinding(ctx context.Context, k meta.ThreadKey, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.ErrClosed
	}
	old, ok := s.bindings[k]
	if !ok {
		return meta.ErrNotFound
	}
	if old.Revision != rev {
		return meta.ErrConflict
	}
	delete(s.bindings, k)
	return nil
}

func (s *memStore) PutInspectionMount(ctx context.Context, m meta.InspectionMount) (meta.InspectionMount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.InspectionMount{}, meta.ErrClosed
	}
	s.rev++
	m.Revision = s.rev
	s.mounts[m.Path] = m
	return m, nil
}

func (s *memStore) ListInspectionMounts(ctx context.Context) ([]meta.InspectionMount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, meta.ErrClosed
	}
	var out []meta.InspectionMount
	for _, m := range s.mounts {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b meta.InspectionMount) int { return cmp.Compare(a.Path, b.Path) })
	return out, nil
}

func (s *memStore) DeleteInspectionMount(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.ErrClosed
	}
	delete(s.mounts, path)
	return nil
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
