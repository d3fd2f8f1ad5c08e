package gateway

import (
	"context"

	"warren/meta"
)

// jobsThreads is what the jobs call of the threads (jobs.Threads), until
// the threads are a room of their own with this method.
type jobsThreads struct{ g *Gateway }

func (t jobsThreads) TakeDown(ctx context.Context, k meta.ThreadKey, still func(context.Context) bool) (bool, error) {
	return t.g.takeDown(ctx, k, still)
}
