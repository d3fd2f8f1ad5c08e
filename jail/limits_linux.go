package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of a jail: every process in it together may use at most so much
// memory and so many processes (a memory hog is killed by the kernel, a
// fork bomb gets EAGAIN), and the gateway beside it is not harmed.
//
// They are a cgroup of the jail's own, set up before its init runs any
// command: on a unified (v2) hierarchy when its memory and pids
// controllers are there, else on the v1 memory and pids hierarchies.
//
// Where the host has the cpu controller (v2) or hierarchy (v1), the jail
// is also a cpu cgroup of its own: the scheduler weighs all its processes
// together as one against the gateway and other jails, however many a
// command forks. With Config.CPUMillis the cgroup gets a quota too
// (cpu.max, or cpu.cfs_quota_us on v1): per period of 100 ms, the jail's
// processes together run at most CPUMillis/1000 of it, then wait for the
// next. A jail asked for a CPU bound on a host that cannot give one
// (no cpu controller, or rlimits) refuses to start, as it does without
// prlimit: nothing runs unbounded that was meant to be bounded.
//
// A host with neither gets rlimits, which bound less: each command starts
// under prlimit(1) with RLIMIT_AS (the address space of each process, not
// of the jail together) and RLIMIT_NPROC (the processes of the jail's uid,
// counted over the whole host, so jails that share the uid share the
// bound). A jail whose root lacks prlimit refuses to start rather than run
// unbounded. Jail.Limits says which kind a jail got, and why.
//
// A jail on an image gets no rlimits: it refuses to start where it would
// (errImageRlimits). prlimit(1) is a program of the jail's root, which on
// a host root is the host's own; an image's may be missing or be anything
// its author made of it. Nor can the init set them some other way: Go's
// fork and exec has no step between the two where the child could set its
// own, and limits set on the init would bound it too (a Go process
// reserves far more address space than a jail's bound; a start of a
// program of the daemon's between would need its libc in the image).

// errImageRlimits is the refusal of a jail on an image where it would be
// bounded by rlimits.
var errImageRlimits = errors.New("jail: a jail on an image needs a cgroup for its limits: rlimits would take the image's prlimit to set them, which cannot be trusted with that")

// Default limits. A jail has no CPU bound unless it is given one.
const (
	DefaultMemoryBytes = 2 << 30
	DefaultMaxProcs    = 1024
)

// MinCPUMillis is the smallest CPU bound, in thousandths of a CPU: the
// kernel's smallest quota, 1 ms, per cpuPeriodMicros.
const MinCPUMillis = 10

// cpuPeriodMicros is the period of a jail's CPU quota, the kernel's
// default: short enough that a bounded jail's waits stay short,
// long enough that MinCPUMillis is a quota the kernel takes.
const cpuPeriodMicros = 100_000

// cpuLimitFiles are the files, in the order they are written, and their
// contents that bound a cgroup of kind ("v2", "v1") to millis thousandths
// of a CPU.
func cpuLimitFiles(kind string, millis int) [][2]string {
	quota := strconv.FormatInt(int64(millis)*cpuPeriodMicros/1000, 10)
	period := strconv.Itoa(cpuPeriodMicros)
	if kind == "v2" {
		return [][2]string{{"cpu.max", quota + " " + period}}
	}
	return [][2]string{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}}
}

// writeFiles writes files (name, content) into dir in order.
func writeFiles(dir string, files [][2]string) error {
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0); err != nil {
			return err
		}
	}
	return nil
}

// cgroupRoot is where the cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroup is one jail's cgroup: a folder per hierarchy.
type cgroup struct {
	// dirs are the folders: one on v2; on v1 memory's, pids' and, where
	// the host has it, cpu's.
	dirs []string
	kind string        // "v2", "v1"
	cpu  bool          // the jail is a cpu cgroup of its own
	acct string        // v1: its folder in the cpuacct hierarchy, which counts its CPU time; "" if none
	next atomic.Uint64 // names the commands' trees (tree_linux.go)

	mu     sync.Mutex
	free   []*tree // empty trees kept for the next commands; guarded by mu
	closed bool    // the jail ended: keep no tree; guarded by mu
}

// newCgroup makes the cgroup of a jail named name and sets its limits:
// cpuMillis 0 means no CPU bound.
func newCgroup(name string, memory int64, procs, cpuMillis int) (*cgroup, error) {
	ctl, _ := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if controllers := strings.Fields(string(ctl)); slices.Contains(controllers, "memory") && slices.Contains(controllers, "pids") {
		dir := filepath.Join(cgroupRoot, "warren", name)
		// The parent hands the controllers down to its children.
		parent := filepath.Dir(dir)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			return nil, fmt.Errorf("enable memory and pids controllers: %w", err)
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			return nil, fmt.Errorf("enable memory and pids controllers: %w", err)
		}
		// The cpu controller on its own: the kernel refuses it on some
		// hosts (a realtime process outside the root cgroup), and only a
		// jail with a CPU bound needs it.
		cpuErr := errors.New("no cpu controller")
		if slices.Contains(controllers, "cpu") {
			cpuErr = errors.Join(
				os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0),
				os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0),
			)
		}
		if cpuErr != nil && cpuMillis > 0 {
			return nil, fmt.Errorf("enable the cpu controller for a CPU bound: %w", cpuErr)
		}
		cg := &cgroup{dirs: []string{dir}, kind: "v2", cpu: cpuErr == nil}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		err := errors.Join(
			os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(memory, 10)), 0),
			os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0),
			os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(procs)), 0),
		)
		if cpuMillis > 0 {
			err = errors.Join(err, writeFiles(dir, cpuLimitFiles(cg.kind, cpuMillis)))
		}
		if err != nil {
			cg.remove()
			return nil, fmt.Errorf("set limits: %w", err)
		}
		return cg, nil
	}
	mem, pids, cpu := filepath.Join(cgroupRoot, "memory"), filepath.Join(cgroupRoot, "pids"), filepath.Join(cgroupRoot, "cpu")
	if isDir(mem) && isDir(pids) {
		cg := &cgroup{kind: "v1", cpu: isDir(cpu)}
		if !cg.cpu && cpuMillis > 0 {
			return nil, fmt.Errorf("no cpu hierarchy at %s for a CPU bound", cpu)
		}
		dirs := []string{filepath.Join(mem, "warren", name), filepath.Join(pids, "warren", name)}
		if cg.cpu {
			dirs = append(dirs, filepath.Join(cpu, "warren", name))
		}
		// CPU time is counted by cpuacct, which may be a hierarchy of its
		// own (or mounted with cpu: then cpu's folder counts it).
		if acct := filepath.Join(cgroupRoot, "cpuacct"); isDir(acct) && !sameDir(acct, cpu) {
			cg.acct = filepath.Join(acct, "warren", name)
			dirs = append(dirs, cg.acct)
		} else if cg.cpu {
			cg.acct = filepath.Join(cpu, "warren", name)
		}
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				cg.remove()
				return nil, err
			}
			cg.dirs = append(cg.dirs, d)
		}
		err := errors.Join(
			os.WriteFile(filepath.Join(cg.dirs[0], "memory.limit_in_bytes"), []byte(strconv.FormatInt(memory, 10)), 0),
			os.WriteFile(filepath.Join(cg.dirs[1], "pids.max"), []byte(strconv.Itoa(procs)), 0),
		)
		if cpuMillis > 0 {
			err = errors.Join(err, writeFiles(cg.dirs[2], cpuLimitFiles(cg.kind, cpuMillis)))
		}
		// Swap may be off (no memsw files); a limit on it is best effort.
		os.WriteFile(filepath.Join(cg.dirs[0], "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(memory, 10)), 0)
		if err != nil {
			cg.remove()
			return nil, fmt.Errorf("set limits: %w", err)
		}
		return cg, nil
	}
	return nil, errors.New("no cgroup hierarchy with memory and pids controllers")
}

// add moves the process pid (and so its future children) into the cgroup.
func (cg *cgroup) add(pid int) error {
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move process %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// remove deletes the cgroup once its processes are gone (they may take a
// moment to leave after being killed).
func (cg *cgroup) remove() error {
	errs := []error{cg.removeTrees()}
	for _, d := range cg.dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.Remove(d); err == nil || os.IsNotExist(err) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// RemoveStaleCgroups removes the cgroups of jails whose init is gone (a
// gateway killed with SIGKILL cannot remove them), with their commands'
// trees. A live jail's cgroup is never touched: its name holds its init's
// pid, and a cgroup with a process in it is kept whatever its name says.
func RemoveStaleCgroups() error {
	var errs []error
	for _, parent := range []string{
		filepath.Join(cgroupRoot, "warren"),
		filepath.Join(cgroupRoot, "memory", "warren"),
		filepath.Join(cgroupRoot, "pids", "warren"),
		filepath.Join(cgroupRoot, "cpu", "warren"),
		filepath.Join(cgroupRoot, "cpuacct", "warren"),
	} {
		jails, _ := filepath.Glob(filepath.Join(parent, "jail-*"))
		for _, dir := range jails {
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "jail-"))
			if err != nil || processRuns(pid) {
				continue
			}
			trees, _ := filepath.Glob(filepath.Join(dir, "cmd-*"))
			for _, t := range append(trees, dir) {
				if b, _ := os.ReadFile(filepath.Join(t, "cgroup.procs")); len(strings.TrimSpace(string(b))) > 0 {
					continue // a process lives there: not stale after all
				}
				if err := os.Remove(t); err != nil && !os.IsNotExist(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// processRuns says whether a process with this pid runs: a zombie (an
// init that died and whose new parent has not reaped it yet) does not.
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which ends with the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z' && b[i+2] != 'X'
}

// sameDir reports whether a and b are one folder (cpu and cpuacct are
// often one hierarchy, named by links).
func sameDir(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// Usage is what a jail's processes use, all together.
type Usage struct {
	// Measured is false for a jail without a cgroup (rlimits): nothing
	// below is known then.
	Measured bool
	// CPU is the CPU time its processes used since the jail started,
	// those that ended too (zero on a v1 host without cpuacct).
	CPU time.Duration
	// MemoryBytes is the memory it holds now (page cache included, as
	// its limit counts it); MemoryPeakBytes the most it held.
	MemoryBytes, MemoryPeakBytes int64
	// Processes is how many processes and threads it has now, its init
	// included.
	Processes int
}

// Usage reads what the jail's processes use from its cgroup.
func (j *Jail) Usage() (Usage, error) {
	if j.cg == nil {
		return Usage{}, nil
	}
	return j.cg.usage()
}

func (cg *cgroup) usage() (Usage, error) {
	u := Usage{Measured: true}
	var err error
	if cg.kind == "v2" {
		dir := cg.dirs[0]
		if u.CPU, err = cpuStatUsage(filepath.Join(dir, "cpu.stat")); err != nil {
			return u, err
		}
		if u.MemoryBytes, err = readInt(filepath.Join(dir, "memory.current")); err != nil {
			return u, err
		}
		// memory.peak came with Linux 5.19.
		if u.MemoryPeakBytes, err = readInt(filepath.Join(dir, "memory.peak")); err != nil {
			u.MemoryPeakBytes = u.MemoryBytes
		}
		n, err := readInt(filepath.Join(dir, "pids.current"))
		u.Processes = int(n)
		return u, err
	}
	if u.MemoryBytes, err = readInt(filepath.Join(cg.dirs[0], "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	if u.MemoryPeakBytes, err = readInt(filepath.Join(cg.dirs[0], "memory.max_usage_in_bytes")); err != nil {
		return u, err
	}
	n, err := readInt(filepath.Join(cg.dirs[1], "pids.current"))
	if err != nil {
		return u, err
	}
	u.Processes = int(n)
	if cg.acct != "" {
		ns, err := readInt(filepath.Join(cg.acct, "cpuacct.usage"))
		if err != nil {
			return u, err
		}
		u.CPU = time.Duration(ns)
	}
	return u, nil
}

// readInt reads a cgroup file that holds one number.
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// cpuStatUsage reads usage_usec of a v2 cpu.stat.
func cpuStatUsage(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", path, err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("%s: no usage_usec", path)
}
