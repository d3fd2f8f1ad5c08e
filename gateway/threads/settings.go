package threads

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/quota"
	"warren/image"
	"warren/jail"
	"warren/meta"
	"warren/network/policy"
)

// A thread's settings (meta.Settings) are given when it is bound and kept
// in its binding, so a daemon that binds it again, here or on another
// host, sets it up the same way. A zero field means the daemon's default. The socket is the trust boundary: only the server's own
// processes reach it, so they may give a thread the host's network.

// Bounds of settings. Below them a jail cannot run its own init and a
// shell pipeline; above MaxJobsLimit a thread is not bounded at all.
const (
	MinMemoryBytes = 32 << 20
	MinMaxProcs    = 16
	MaxMaxProcs    = 1 << 22
	// MaxCPUMillis is the largest CPU bound, in thousandths of a CPU: 1000
	// CPUs, more than any host has. The least is jail.MinCPUMillis, the
	// kernel's least quota.
	MaxCPUMillis = 1_000_000
	MaxMaxJobs   = 1024
	// An egress jail's rate bound, each way: below 8 KiB/s a package
	// manager cannot finish a handshake in its timeout; 0 is no bound.
	MinEgressBytesPerSecond = 8 << 10
	MaxEgressBytesPerSecond = 1 << 40
	// MaxMaxConnections bounds a jail's bound of open connections: one
	// thread cannot hold the host's conntrack table.
	MaxMaxConnections = 65536
)

// checkSettings refuses settings a jail could not run with, or that ask
// for more checkpoints than a history holds.
func (t *Threads) checkSettings(s meta.Settings) error {
	switch s.Network {
	case "", "none", "egress", "host":
	default:
		return fmt.Errorf("%w: settings: network %s is not none, egress or host", api.ErrInvalid, call.Quote(s.Network))
	}
	if s.Network != "" && t.cfg.AllowNetworks != nil && !slices.Contains(t.cfg.AllowNetworks, s.Network) {
		return fmt.Errorf("%w: settings: network %s is not allowed on this server (it allows %s)", api.ErrInvalid, s.Network, strings.Join(t.cfg.AllowNetworks, ", "))
	}
	if s.Image != "" {
		if _, err := image.ParseRef(s.Image); err != nil {
			return fmt.Errorf("%w: settings: image %s: %v", api.ErrInvalid, call.Quote(s.Image), err)
		}
	}
	if s.ImageDigest != "" && !isDigest(s.ImageDigest) {
		return fmt.Errorf("%w: settings: imageDigest %s is not sha256: and 64 hexadecimal digits", api.ErrInvalid, call.Quote(s.ImageDigest))
	}
	if s.Egress != nil {
		if _, err := policy.Parse(policy.Egress(*s.Egress)); err != nil {
			return fmt.Errorf("%w: settings: %v", api.ErrInvalid, err)
		}
	}
	if s.EgressBytesPerSecond != 0 && (s.EgressBytesPerSecond < MinEgressBytesPerSecond || s.EgressBytesPerSecond > MaxEgressBytesPerSecond) {
		return fmt.Errorf("%w: settings: egressBytesPerSecond %d is not between %d and %d", api.ErrInvalid, s.EgressBytesPerSecond, MinEgressBytesPerSecond, int64(MaxEgressBytesPerSecond))
	}
	if s.MaxConnections != 0 && (s.MaxConnections < 1 || s.MaxConnections > MaxMaxConnections) {
		return fmt.Errorf("%w: settings: maxConnections %d is not between 1 and %d", api.ErrInvalid, s.MaxConnections, MaxMaxConnections)
	}
	if s.MemoryBytes != 0 && s.MemoryBytes < MinMemoryBytes {
		return fmt.Errorf("%w: settings: memoryBytes %d is below %d", api.ErrInvalid, s.MemoryBytes, MinMemoryBytes)
	}
	if s.MemoryBytes < 0 {
		return fmt.Errorf("%w: settings: memoryBytes is negative", api.ErrInvalid)
	}
	if s.MaxProcs != 0 && (s.MaxProcs < MinMaxProcs || s.MaxProcs > MaxMaxProcs) {
		return fmt.Errorf("%w: settings: maxProcs %d is not between %d and %d", api.ErrInvalid, s.MaxProcs, MinMaxProcs, MaxMaxProcs)
	}
	if err := CheckCPUMillis(s.CPUMillis); err != nil {
		return fmt.Errorf("%w: settings: cpuMillis %w", api.ErrInvalid, err)
	}
	if s.MaxJobs != 0 && (s.MaxJobs < 1 || s.MaxJobs > MaxMaxJobs) {
		return fmt.Errorf("%w: settings: maxJobs %d is not between 1 and %d", api.ErrInvalid, s.MaxJobs, MaxMaxJobs)
	}
	if s.DiskBytes != 0 && s.DiskBytes < quota.MinDiskBytes {
		return fmt.Errorf("%w: settings: diskBytes %d is below %d", api.ErrInvalid, s.DiskBytes, quota.MinDiskBytes)
	}
	if s.SnapshotBytes < 0 {
		return fmt.Errorf("%w: settings: snapshotBytes is negative", api.ErrInvalid)
	}
	if s.Checkpoints < 0 || s.Checkpoints > t.cfg.MaxCheckpoints {
		return fmt.Errorf("%w: settings: checkpoints %d is not between 1 and %d", api.ErrInvalid, s.Checkpoints, t.cfg.MaxCheckpoints)
	}
	if s.JailIdleSeconds < -1 || s.CloseIdleSeconds < -1 {
		return fmt.Errorf("%w: settings: jailIdleSeconds and closeIdleSeconds are -1 (never), 0 (the default) or a number of seconds", api.ErrInvalid)
	}
	if err := call.CheckEnvSize("settings: env", s.Env); err != nil {
		return err
	}
	if _, err := jail.Env(s.Env, nil); err != nil {
		return fmt.Errorf("%w: settings: %v", api.ErrInvalid, err)
	}
	return nil
}

// CheckCPUMillis refuses a CPU bound a jail cannot have; 0 is none.
func CheckCPUMillis(m int) error {
	if m != 0 && (m < jail.MinCPUMillis || m > MaxCPUMillis) {
		return fmt.Errorf("%d is not between %d and %d", m, jail.MinCPUMillis, MaxCPUMillis)
	}
	return nil
}

// CloneSettings copies s, so a running jail's copy never shares its map
// with a request. No variables is always a nil map, so that settings
// compare equal however a client wrote them.
func CloneSettings(s meta.Settings) meta.Settings {
	if len(s.Env) == 0 {
		s.Env = nil
	}
	s.Env = maps.Clone(s.Env)
	if s.Egress != nil {
		e := *s.Egress
		e.Allow, e.Deny = slices.Clone(e.Allow), slices.Clone(e.Deny)
		s.Egress = &e
	}
	return s
}

// isDigest says whether d is a sha256 digest as a manifest's is written.
func isDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
