package threadlimit

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what the default limits are derived from.
type Machine struct {
	// MemoryBytes is the physical memory, or the memory.max of the
	// daemon's cgroup (or of one above it) where that is lower.
	MemoryBytes int64
	// NoFile is the soft open-file limit the daemon runs with.
	NoFile int
	// MountMax is the kernel's bound of mounts in one mount namespace
	// (fs.mount-max).
	MountMax int
	// OSThreadLimit is the Go runtime's bound of OS threads
	// (debug.SetMaxThreads) the daemon runs under.
	OSThreadLimit int
}

// What one thread is planned to cost: the filesystem keeps an idle bound
// thread to about 100 KiB and one descriptor (docs/operations.md).
const (
	ThreadBytes = 100 << 10
	ThreadFDs   = 1
	// JailBytes is what a live jail costs the machine while nothing
	// runs in it: its init process, its namespaces and cgroup, and the
	// daemon's side of it (measured, with room: docs/operations.md).
	JailBytes = 16 << 20
	// MaxJailsCap bounds the default number of live jails whatever the
	// memory: each live jail is processes, a cgroup and a few
	// descriptors of the daemon's.
	MaxJailsCap = 4096
)

// ReadMachine reads this machine, for a daemon whose Go runtime allows
// osThreadLimit OS threads.
func ReadMachine(osThreadLimit int) (Machine, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return Machine{}, fmt.Errorf("read the machine's memory: %w", err)
	}
	m := Machine{MemoryBytes: int64(si.Totalram) * int64(si.Unit), OSThreadLimit: osThreadLimit, MountMax: 100000}
	if c := cgroupMemoryMax(); c > 0 && c < m.MemoryBytes {
		m.MemoryBytes = c
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return Machine{}, fmt.Errorf("read the open-file limit: %w", err)
	}
	m.NoFile = int(min(lim.Cur, uint64(1<<31-1)))
	// The kernel's own default is 100,000 where the file is missing.
	if b, err := os.ReadFile("/proc/sys/fs/mount-max"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			m.MountMax = n
		}
	}
	return m, nil
}

// cgroupMemoryMax is the lowest memory.max of this process's cgroup (v2)
// and those above it, 0 if none is set or it cannot be read.
func cgroupMemoryMax() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	var rel string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return 0
	}
	var low int64
	for dir := path.Clean("/" + rel); ; dir = path.Dir(dir) {
		if b, err := os.ReadFile(path.Join("/sys/fs/cgroup", dir, "memory.max")); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (low == 0 || n < low) {
				low = n
			}
		}
		if dir == "/" {
			return low
		}
	}
}

// MemoryCap is the daemon's resident memory at which new threads are
// refused: half the machine's, the rest left to the jails and the page
// cache.
func (m Machine) MemoryCap() int64 { return m.MemoryBytes / 2 }

// FDReserve is the descriptors kept free of new threads: a fifth of the
// open-file limit, for API connections, uploads, jails and the store.
func (m Machine) FDReserve() int { return min(max(m.NoFile/5, 256), m.NoFile/2) }

// OSThreadReserve is the OS threads kept free of new threads below the
// runtime's limit: a tenth of it, at least 500, for bursts of blocking
// system calls (the runtime dies past the limit).
func (m Machine) OSThreadReserve() int { return min(max(m.OSThreadLimit/10, 500), m.OSThreadLimit/2) }

// MaxThreads is the default of --max-threads: as many threads as the
// memory cap holds at ThreadBytes each, as the descriptors outside the
// reserve hold at ThreadFDs each, and half the mounts a namespace may
// have (a thread is a mount or two); at least 1.
func (m Machine) MaxThreads() int {
	n := min(m.MemoryCap()/ThreadBytes, int64((m.NoFile-m.FDReserve())/ThreadFDs), int64(m.MountMax/2))
	return int(max(n, 1))
}

// MaxJails is the default of --max-jails: a quarter of the memory at
// JailBytes each, between 8 and MaxJailsCap.
func (m Machine) MaxJails() int {
	return int(min(max(m.MemoryBytes/4/JailBytes, 8), MaxJailsCap))
}

// Config is the admission config of the machine's defaults, with
// maxThreads and perTenant where not zero.
func (m Machine) Config(maxThreads, perTenant int) Config {
	if maxThreads == 0 {
		maxThreads = m.MaxThreads()
	}
	if perTenant == 0 {
		perTenant = maxThreads
	}
	return Config{
		MaxThreads: maxThreads, MaxThreadsPerTenant: perTenant,
		FDReserve: m.FDReserve(), MemoryCap: m.MemoryCap(),
		OSThreadLimit: m.OSThreadLimit, OSThreadReserve: m.OSThreadReserve(),
	}
}
