package gateway

import (
	"context"

	"warren/api"
)

// threadsAdapter gives the rooms the threads' calls they declare, until
// the threads are a room of their own.
type threadsAdapter struct{ g *Gateway }

func (a threadsAdapter) Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	return a.g.bind(ctx, tenant, thread)
}
