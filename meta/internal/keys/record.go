package keys

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"warren/meta"
)

// MountRecord is an InspectionMount as both backends store it. JSON
// strings cannot carry ids that are not UTF-8, so the thread key also
// travels in this package's encoding, which is what is read back; the path
// is read back from the key.
type MountRecord struct {
	meta.InspectionMount
	RawThreadKey []byte `json:"rawThreadKey"`
}

// CheckText refuses string fields that JSON would silently rewrite (bytes
// that are not UTF-8 become U+FFFD): a root or mount path read back must be
// the one that was written. Tenant and thread need no check, the key
// carries them.
func CheckText(b meta.Binding) error {
	for _, f := range []struct{ name, val string }{
		{"host id", b.HostID},
		{"root", b.Root},
		{"mount path", b.MountPath},
	} {
		if !utf8.ValidString(f.val) {
			return fmt.Errorf("%s %q is not valid UTF-8", f.name, f.val)
		}
	}
	return nil
}

// CheckHistoryText is CheckText for a history: every string it holds
// (ids, labels, hashes, host ids) must be read back as written. Tenant
// and thread need no check, the key carries them.
func CheckHistoryText(h meta.History) error {
	check := func(where string, vals ...string) error {
		for _, v := range vals {
			if !utf8.ValidString(v) {
				return fmt.Errorf("%s: %q is not valid UTF-8", where, v)
			}
		}
		return nil
	}
	if err := check("head", h.Head); err != nil {
		return err
	}
	if err := check("redo", h.Redo...); err != nil {
		return err
	}
	for _, c := range h.Checkpoints {
		if err := check("checkpoint", c.ID, c.Label, c.Run, c.Tree, c.Parent, c.HostID); err != nil {
			return err
		}
	}
	for _, r := range []*meta.Restore{h.Restoring, h.FailedRestore} {
		if r == nil {
			continue
		}
		if err := check("restoring", r.Op, r.To, r.Tree, r.Head, r.HostID, r.From, r.Failed); err != nil {
			return err
		}
		if err := check("restoring's redo", r.Redo...); err != nil {
			return err
		}
	}
	return nil
}

// EncodeHistory returns h's JSON with Revision zero, the form that
// meta.MaxHistoryBytes bounds (and the one etcd stores), after CheckHistoryText;
// a larger one is meta.ErrTooLarge.
func EncodeHistory(h meta.History) ([]byte, error) {
	if err := CheckHistoryText(h); err != nil {
		return nil, err
	}
	h.Revision = 0
	val, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if len(val) > meta.MaxHistoryBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, over meta.MaxHistoryBytes (%d)", meta.ErrTooLarge, len(val), meta.MaxHistoryBytes)
	}
	return val, nil
}

// HostRecord is a host's lease as stored, by both backends.
type HostRecord struct {
	Lease    meta.LeaseID  `json:"lease"`
	LastBeat time.Time     `json:"lastBeat"`
	TTL      time.Duration `json:"ttl"`
}

// Alive says whether the lease holds at now, on the clock of the one
// process that keeps it (Badger; etcd keeps its leases itself).
func (h HostRecord) Alive(now time.Time) bool {
	return h.Lease != 0 && now.Before(h.LastBeat.Add(h.TTL))
}
