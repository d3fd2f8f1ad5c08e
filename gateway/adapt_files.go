package gateway

import (
	"context"

	"warren/api"
	"warren/gateway/files"
	"warren/meta"
)

// filesThreads is what the file API calls of the threads (files.Threads),
// until the threads are a room of their own.
type filesThreads struct{ g *Gateway }

func (t filesThreads) Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	return t.g.bind(ctx, tenant, thread)
}

func (t filesThreads) Paths(k meta.ThreadKey) (root, mountPath string, err error) {
	return t.g.threadPaths(k)
}

func (t filesThreads) RootOf(b meta.Binding) (string, error) { return t.g.rootOf(b) }

// validRun forwards to files.ValidRun, for exec and the checkpoints.
func validRun(run string) error { return files.ValidRun(run) }
