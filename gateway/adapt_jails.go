package gateway

import (
	"context"

	"warren/meta"
)

// jailsThreads is what the jails call of the threads (jails.Threads),
// until the threads are a room of their own with these methods.
type jailsThreads struct{ g *Gateway }

func (t jailsThreads) Lock(ctx context.Context, k meta.ThreadKey) (func(), error) {
	return t.g.threads.locks.lock(ctx, k)
}

func (t jailsThreads) BindLocked(ctx context.Context, k meta.ThreadKey, s *meta.Settings) (meta.Binding, error) {
	return t.g.bindLocked(ctx, k, s)
}

func (t jailsThreads) Paths(k meta.ThreadKey) (root, mountPath string, err error) {
	return t.g.threadPaths(k)
}

func (t jailsThreads) RootOf(b meta.Binding) (string, error) { return t.g.rootOf(b) }
