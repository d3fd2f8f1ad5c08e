package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Pending is what a server would lose of a workspace if it died now: the
// paths changed since the workspace's last checkpoint (Base). A server
// that takes the workspace over restores a checkpoint from the store, and
// can tell what changed after it on the former server when Base is that
// checkpoint. Name is the workspace's (the caller's naming); the store
// keeps one Pending per name, the last put.
type Pending struct {
	Name string `json:"name"`
	// Host is the server that put it, At when.
	Host string    `json:"host"`
	At   time.Time `json:"at"`
	// Base is the checkpoint the paths changed since; Complete is false
	// when the server lost track of some (Paths is then empty).
	Base     string `json:"base"`
	Complete bool   `json:"complete"`
	// Paths are the paths changed, sorted, at most MaxPendingPaths of
	// them; More counts those left out.
	Paths []string `json:"paths"`
	More  int      `json:"more,omitempty"`
}

// MaxPendingPaths bounds the paths a Pending carries: enough to tell a
// person what to look at, small enough to put every few seconds.
const MaxPendingPaths = 200

// maxPendingBytes bounds what GetPending reads.
const maxPendingBytes = 1 << 20

// pendingKey is where name's Pending is: a hash, since names need not
// follow the key rule (and say nothing in a listing of the store).
func pendingKey(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "pending/" + hex.EncodeToString(sum[:])
}

// PutPending puts p in the store, in place of the one before.
func PutPending(ctx context.Context, store Store, p Pending) error {
	if len(p.Paths) > MaxPendingPaths {
		p.More += len(p.Paths) - MaxPendingPaths
		p.Paths = p.Paths[:MaxPendingPaths]
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("replica: put the pending changes of %q: %w", p.Name, err)
	}
	if err := store.Put(ctx, pendingKey(p.Name), bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("replica: put the pending changes of %q: %w", p.Name, err)
	}
	return nil
}

// GetPending returns name's Pending; an error matching ErrNotFound if the
// store has none, ErrCorrupt if what it has is not one of name's.
func GetPending(ctx context.Context, store Store, name string) (Pending, error) {
	rc, err := store.Get(ctx, pendingKey(name))
	if err != nil {
		return Pending{}, fmt.Errorf("replica: get the pending changes of %q: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxPendingBytes+1))
	if err != nil {
		return Pending{}, fmt.Errorf("replica: get the pending changes of %q: %w", name, err)
	}
	var p Pending
	if len(b) > maxPendingBytes || json.Unmarshal(b, &p) != nil || p.Name != name || len(p.Paths) > MaxPendingPaths {
		return Pending{}, fmt.Errorf("%w: the pending changes of %q", ErrCorrupt, name)
	}
	return p, nil
}

// DeletePending removes name's Pending, if any.
func DeletePending(ctx context.Context, store Store, name string) error {
	if err := store.Delete(ctx, pendingKey(name)); err != nil {
		return fmt.Errorf("replica: delete the pending changes of %q: %w", name, err)
	}
	return nil
}

// SweepPending deletes the Pending of every name that live does not
// list, put before olderThan (a thread deleted; a Pending put after may
// be of a thread made since the names were listed). It returns how many
// it deleted.
func SweepPending(ctx context.Context, store Store, live []string, olderThan time.Time) (int, error) {
	keep := make(map[string]bool, len(live))
	for _, n := range live {
		keep[pendingKey(n)] = true
	}
	var gone []string
	err := store.List(ctx, "pending/", func(in Info) error {
		if !keep[in.Key] && in.ModTime.Before(olderThan) {
			gone = append(gone, in.Key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("replica: list the pending changes: %w", err)
	}
	for i, key := range gone {
		if err := store.Delete(ctx, key); err != nil {
			return i, fmt.Errorf("replica: delete the pending changes %s: %w", key, err)
		}
	}
	return len(gone), nil
}
