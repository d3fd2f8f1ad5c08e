package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// record is what the store keeps of a finished image, in
// Dir/roots/<hex>.json beside the rootfs Dir/roots/<hex>. It is written
// whole or not at all (a file in Dir/tmp, synced, renamed over the old
// one), and only after the rootfs is in place: a record always names a
// whole tree.
type record struct {
	Version int    `json:"version"`
	Digest  string `json:"digest"`
	// RefTimes are the references that name the image, with when each
	// was last given to it.
	RefTimes   map[string]time.Time `json:"refs"`
	Bytes      int64                `json:"bytes"`
	Env        []string             `json:"env,omitempty"`
	WorkingDir string               `json:"workingDir,omitempty"`
	User       string               `json:"user,omitempty"`
	Config     string               `json:"config"`
	Layers     []string             `json:"layers"`
	// Loaded: it came from Load; Pulled: from a registry (both can be
	// true: the same image loaded and pulled).
	Loaded   bool      `json:"loaded,omitempty"`
	Pulled   bool      `json:"pulled,omitempty"`
	PulledAt time.Time `json:"pulledAt"`
	UsedAt   time.Time `json:"usedAt,omitempty"`

	// savedUse is when UsedAt was last written (Touch writes at most once
	// a minute). Guarded by Store.mu like the rest.
	savedUse time.Time
}

const recordVersion = 1

func (r *record) hex() string { return strings.TrimPrefix(r.Digest, "sha256:") }

// lastUse is what Collect judges by: the last use, or the pull.
func (r *record) lastUse() time.Time {
	if r.UsedAt.After(r.PulledAt) {
		return r.UsedAt
	}
	return r.PulledAt
}

func readRecord(path string) (*record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image: reading a record: %w", err)
	}
	r := &record{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("image: record %s: %w", path, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("image: record %s: version %d, this store reads %d", path, r.Version, recordVersion)
	}
	if want := strings.TrimSuffix(filepath.Base(path), ".json"); r.hex() != want {
		return nil, fmt.Errorf("image: record %s names digest %s", path, r.Digest)
	}
	if r.RefTimes == nil {
		r.RefTimes = map[string]time.Time{}
	}
	r.savedUse = r.UsedAt
	return r, nil
}

// writeRecordLocked writes r atomically. s.mu is held (or Open has not
// returned).
func (s *Store) writeRecordLocked(r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("image: encoding the record of %s: %w", r.Digest, err)
	}
	f, err := os.CreateTemp(s.tmp, "record-*.json")
	if err != nil {
		return fmt.Errorf("image: writing the record of %s: %w", r.Digest, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.roots, r.hex()+".json"))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("image: writing the record of %s: %w", r.Digest, err)
	}
	syncDir(s.roots)
	return nil
}
