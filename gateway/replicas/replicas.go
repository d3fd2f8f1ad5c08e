package replicas

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"warren/snapshot/replica"
)

// Config is what the room needs of the daemon.
type Config struct {
	// URL names the store (replica.NewS3's form).
	URL    string
	Logger hclog.Logger
}

// Replicas is the room. Start makes one; call Close when the daemon
// stops.
type Replicas struct {
	cfg   Config // never changed
	log   hclog.Logger
	store replica.Store // never changed
}

// Start opens the store: a server out of reach, a missing bucket or
// refused credentials are an error here, so that a daemon told to
// replicate does not start without a store to replicate to.
func Start(ctx context.Context, cfg Config) (*Replicas, error) {
	s, err := replica.NewS3(ctx, cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot store: %w", err)
	}
	return &Replicas{cfg: cfg, log: cfg.Logger, store: s}, nil
}

// Close stops the room; nil (no store) is fine.
func (r *Replicas) Close() {
	if r == nil {
		return
	}
}
