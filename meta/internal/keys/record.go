package keys

import (
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
