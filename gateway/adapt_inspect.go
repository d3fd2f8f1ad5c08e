package gateway

import (
	"context"
	"io"

	"warren/fs"
	"warren/gateway/inspect"
	"warren/meta"
)

// inspectThreads is what the inspection mounts call of the threads
// (inspect.Threads), until the threads are a room of their own.
type inspectThreads struct{ g *Gateway }

var _ inspect.Threads = inspectThreads{}

func (t inspectThreads) Lock(ctx context.Context, k meta.ThreadKey) (func(), error) {
	return t.g.threads.locks.lock(ctx, k)
}

func (t inspectThreads) BindLocked(ctx context.Context, k meta.ThreadKey, s *meta.Settings) (meta.Binding, error) {
	return t.g.bindLocked(ctx, k, s)
}

func (t inspectThreads) RootOf(b meta.Binding) (string, error) { return t.g.rootOf(b) }

func (t inspectThreads) Mount(ctx context.Context, k meta.ThreadKey, root, mountPath string, readOnly bool, target *fs.Target) (io.Closer, error) {
	return t.g.mountAt(ctx, k, root, mountPath, readOnly, target)
}
