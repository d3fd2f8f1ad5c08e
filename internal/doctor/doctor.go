// Package doctor checks a host before `warren serve` starts on it and
// says, for each thing it lacks, what to fix: the kernel features the
// mounts and jails use, the cgroup controllers, the descriptor limit, the
// free disk space, the socket's group, and what would drop the egress
// jails' traffic (IPv4 forwarding off, another table's chain that drops
// by default). `warren doctor` prints its
// results.
//
// It reads the host through a Host, whose fields are the files and calls
// it looks at; System is the machine itself. A test points a Host at a
// folder of its own and at calls that fail, to see each check report a
// missing feature.
package doctor

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/diskimage"
)

// Status is how a check came out.
type Status int

const (
	OK   Status = iota
	Warn        // warren runs, with less (slower, or weaker limits)
	Fail        // warren cannot run as it should: fix it first
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "FAIL"
}

// Result is one check's outcome.
type Result struct {
	Name   string
	Status Status
	Detail string // what was found
	Fix    string // what to do, when Status is not OK
}

// Host is what the checks read.
type Host struct {
	// Root is prepended to every path the checks read (/dev, /proc,
	// /sys, /etc); "" for the machine itself.
	Root string
	// Euid is the effective user id warren serve would run as.
	Euid int
	// LandlockABI returns the kernel's Landlock ABI version.
	LandlockABI func() (int, error)
	// NoFile returns the open-file limit, soft and hard.
	NoFile func() (cur, max uint64, err error)
	// FreeBytes returns the space free for an unprivileged writer on the
	// filesystem of path.
	FreeBytes func(path string) (uint64, error)
	// Ready, if set, asks the daemon serving on this host for its
	// readiness (GET /readyz), for the headroom row: what is left of its
	// limits of new threads. An error that says no daemon serves (no
	// socket, or nobody listening) is no failure: the doctor runs before
	// warren serve starts too.
	Ready func() (api.Readiness, error)
	// Chains returns the base chains of the host's nftables (Chains, the
	// function); nil skips the egress firewall check.
	Chains func() ([]Chain, error)
	// EgressSubnet, if set, finds the subnet of the daemon of a data
	// folder, if it runs, for the fixes to name.
	EgressSubnet func(dataDir string) (netip.Prefix, bool)
}

// System is the machine the program runs on.
func System() Host {
	return Host{
		Euid: os.Geteuid(),
		LandlockABI: func() (int, error) {
			v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
			if errno != 0 {
				return 0, errno
			}
			return int(v), nil
		},
		NoFile: func() (uint64, uint64, error) {
			var lim unix.Rlimit
			err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
			return lim.Cur, lim.Max, err
		},
		FreeBytes: func(path string) (uint64, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(path, &st); err != nil {
				return 0, err
			}
			return st.Bavail * uint64(st.Bsize), nil
		},
		Chains:       func() ([]Chain, error) { return Chains() },
		EgressSubnet: claimedSubnet,
	}
}

// Options are what the checks hold the host to.
type Options struct {
	// DataDir is the data folder warren serve will use; its nearest
	// existing folder is checked for free space.
	DataDir string
	// SocketGroup, if set, is the group the socket will be given (so
	// its members may call the API); it must exist.
	SocketGroup string
	// MinFreeBytes is the free space the data folder's disk needs.
	MinFreeBytes uint64
	// MinNoFile is the open-file limit (hard) a server of many threads
	// needs.
	MinNoFile uint64
	// DiskImage is what warren serve's --disk-image and --workspaces
	// will be (its DataDir is DataDir): the "disk image" check says
	// whether the threads' disk is bounded, or "disk unprotected" and
	// why. A LoopControl of "" is the host's /dev/loop-control.
	DiskImage diskimage.Options
	// Networks are the jail networks warren serve will allow
	// (--allow-networks); nil means all. Without egress, the egress
	// checks have nothing to check.
	Networks []string
	// EgressSubnet is warren serve's --egress-subnet, for the fixes to
	// name; the zero value is the running daemon's, if one runs.
	EgressSubnet netip.Prefix
}

// Defaults for Options.
const (
	DefaultMinFreeBytes = 1 << 30
	DefaultMinNoFile    = 65536
)

// Run runs every check, in a fixed order.
func Run(h Host, o Options) []Result {
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = DefaultMinFreeBytes
	}
	if o.MinNoFile == 0 {
		o.MinNoFile = DefaultMinNoFile
	}
	rs := []Result{
		h.root(),
		h.fuse(),
		h.passthrough(),
		h.fuseURing(),
		h.landlock(),
		h.seccomp(),
		h.userNamespaces(),
		h.cgroups(),
		h.descriptors(o.MinNoFile),
		h.disk(o.DataDir, o.MinFreeBytes),
		h.diskImage(o),
		h.socketGroup(o.SocketGroup),
		h.forwarding(o),
		h.firewall(o),
	}
	if h.Ready != nil {
		rs = append(rs, h.headroom())
	}
	return rs
}

// headroom reports the admission check of the daemon that serves here
// (its detail says what is left of each limit of new threads: threads,
// per tenant, descriptors, memory, OS threads, jails). A daemon that
// refuses new threads is a warning: the threads it serves work, new ones
// go elsewhere or wait.
func (h Host) headroom() Result {
	rd, err := h.Ready()
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED):
		return Result{Name: "headroom", Status: OK, Detail: "no daemon serves yet: nothing to measure"}
	case err != nil:
		return Result{"headroom", Warn, fmt.Sprintf("the daemon's readiness: %v", err), "see that warren serve runs, and answers on its socket"}
	}
	for _, c := range rd.Checks {
		if c.Name != "admission" {
			continue
		}
		if !c.OK {
			return Result{"headroom", Warn, c.Detail,
				"close idle threads (warren close), or raise the limit it names (--max-threads, --max-threads-per-tenant, LimitNOFILE, --memory-cap): docs/operations.md, Limits of threads and jails"}
		}
		return Result{Name: "headroom", Status: OK, Detail: c.Detail}
	}
	return Result{"headroom", Warn, "the daemon has no admission check (an older version)", "upgrade warren serve"}
}

// KernelFeatures are the checks of what the kernel offers warren (FUSE
// passthrough, FUSE over io_uring, the Landlock ABI, the cgroup version),
// as `warrend --version` and GET /v1/version report them.
func KernelFeatures(h Host) []Result {
	return []Result{h.passthrough(), h.fuseURing(), h.landlock(), h.cgroups()}
}

// Failed reports whether any result is a failure.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return r.Status == Fail })
}

func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

func (h Host) read(p string) (string, error) {
	b, err := os.ReadFile(h.path(p))
	return strings.TrimSpace(string(b)), err
}

func (h Host) root() Result {
	if h.Euid != 0 {
		return Result{"root", Fail, fmt.Sprintf("running as uid %d", h.Euid),
			"run warren serve as root: it mounts FUSE with passthrough, makes namespaces and cgroups, and drops to an unprivileged uid inside each jail"}
	}
	return Result{Name: "root", Status: OK, Detail: "running as root"}
}

func (h Host) fuse() Result {
	var st unix.Stat_t
	if err := unix.Stat(h.path("/dev/fuse"), &st); err != nil {
		return Result{"fuse", Fail, fmt.Sprintf("/dev/fuse: %v", err),
			"load the fuse module (modprobe fuse) and, in a container, pass /dev/fuse in (--device /dev/fuse)"}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return Result{"fuse", Fail, "/dev/fuse is not a character device", "recreate it: mknod /dev/fuse c 10 229"}
	}
	return Result{Name: "fuse", Status: OK, Detail: "/dev/fuse is there"}
}

// passthrough: FUSE passthrough came in Linux 6.9; without it every read
// and write of a file goes through the daemon.
func (h Host) passthrough() Result {
	rel, err := h.read("/proc/sys/kernel/osrelease")
	if err != nil {
		return Result{"passthrough", Warn, fmt.Sprintf("kernel release unknown: %v", err), "run Linux 6.9 or later for FUSE passthrough"}
	}
	major, minor := kernelVersion(rel)
	if major > 6 || major == 6 && minor >= 9 {
		return Result{Name: "passthrough", Status: OK, Detail: "Linux " + rel + " passes reads and writes through"}
	}
	return Result{"passthrough", Warn, "Linux " + rel + " has no FUSE passthrough: reads and writes go through the daemon, slower",
		"run Linux 6.9 or later"}
}

// fuseURing: FUSE over io_uring (Linux 6.14) serves a request with one
// submission instead of a read and a write of /dev/fuse; the fuse module
// offers it only once root turns on its enable_uring parameter, and warren
// takes it with --fuse-transport uring or auto.
func (h Host) fuseURing() Result {
	const param = "/sys/module/fuse/parameters/enable_uring"
	v, err := h.read(param)
	switch {
	case err != nil:
		return Result{"fuse io_uring", Warn, "this kernel has no FUSE over io_uring (" + param + " is missing)",
			"run Linux 6.14 or later built with CONFIG_FUSE_IO_URING to serve mounts over io_uring (optional)"}
	case v != "Y":
		return Result{"fuse io_uring", Warn, "FUSE over io_uring is off (" + param + " = " + v + "): --fuse-transport uring fails, auto serves the classic way",
			"as root: echo Y > " + param + " (optional; see docs/operations.md, FUSE transport)"}
	}
	return Result{Name: "fuse io_uring", Status: OK, Detail: "FUSE over io_uring is on: --fuse-transport uring or auto serves the mounts over it"}
}

// kernelVersion reads "6.18.0-1-amd64" as 6, 18; 0, 0 if it cannot.
func kernelVersion(rel string) (int, int) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	minor, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return major, minor
}

func (h Host) landlock() Result {
	abi, err := h.LandlockABI()
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			return Result{"landlock", Warn, "the kernel has no Landlock (or it is not enabled): jails lose a second wall around their files",
				"boot with lsm=...,landlock (CONFIG_SECURITY_LANDLOCK=y)"}
		}
		return Result{"landlock", Warn, fmt.Sprintf("Landlock version: %v", err), "boot with lsm=...,landlock"}
	}
	return Result{Name: "landlock", Status: OK, Detail: fmt.Sprintf("Landlock ABI %d", abi)}
}

func (h Host) seccomp() Result {
	actions, err := h.read("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		return Result{"seccomp", Fail, "the kernel has no seccomp filters", "run a kernel built with CONFIG_SECCOMP_FILTER=y"}
	}
	if !slices.Contains(strings.Fields(actions), "errno") {
		return Result{"seccomp", Fail, "seccomp cannot return errors (" + actions + ")", "run a kernel built with CONFIG_SECCOMP_FILTER=y"}
	}
	return Result{Name: "seccomp", Status: OK, Detail: "seccomp filters available"}
}

// userNamespaces: the jails' own namespaces (mount, pid, ipc, uts, net)
// need root only, but their seccomp filter refuses new user namespaces,
// and the tests and bwrap comparisons use them; a host that forbids them
// is worth knowing about, not fatal.
func (h Host) userNamespaces() Result {
	n, err := h.read("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return Result{"namespaces", Fail, "the kernel has no namespaces", "run a kernel built with CONFIG_NAMESPACES=y"}
	}
	if n == "0" {
		return Result{"namespaces", Warn, "user namespaces are off (user.max_user_namespaces = 0)", "sysctl user.max_user_namespaces=15000"}
	}
	return Result{Name: "namespaces", Status: OK, Detail: "user.max_user_namespaces = " + n}
}

// cgroups: a jail's memory and process limits are a cgroup of its own
// (v2, or the v1 memory and pids hierarchies); without, rlimits bound
// less, and no CPU bound can be given.
func (h Host) cgroups() Result {
	if ctl, err := h.read("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		have := strings.Fields(ctl)
		var missing []string
		for _, c := range []string{"memory", "pids", "cpu"} {
			if !slices.Contains(have, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 {
			return Result{Name: "cgroups", Status: OK, Detail: "cgroup v2 with memory, pids and cpu"}
		}
		return Result{"cgroups", Warn, "cgroup v2 without " + strings.Join(missing, ", "),
			"delegate the controllers to warren's cgroup (systemd: Delegate=yes, see docs/deploy)"}
	}
	var have, missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Stat(h.path("/sys/fs/cgroup/" + c)); err == nil {
			have = append(have, c)
		} else {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) == 0:
		return Result{Name: "cgroups", Status: OK, Detail: "cgroup v1 with memory, pids and cpu"}
	case len(have) == 0:
		return Result{"cgroups", Warn, "no cgroup controllers: jails get rlimits, which bound each process rather than the jail, and no CPU bound",
			"mount cgroup2 at /sys/fs/cgroup with memory, pids and cpu"}
	}
	return Result{"cgroups", Warn, "cgroup v1 without " + strings.Join(missing, ", "), "mount the missing hierarchies, or move to cgroup v2"}
}

func (h Host) descriptors(min uint64) Result {
	cur, max, err := h.NoFile()
	if err != nil {
		return Result{"descriptors", Warn, fmt.Sprintf("open-file limit: %v", err), "set LimitNOFILE=1048576"}
	}
	if max < min {
		return Result{"descriptors", Warn, fmt.Sprintf("open-file limit %d (hard %d), below %d: a server of many threads runs out", cur, max, min),
			"set LimitNOFILE=1048576 in the unit (docs/deploy), or raise the hard limit"}
	}
	return Result{Name: "descriptors", Status: OK, Detail: fmt.Sprintf("open-file limit %d (hard %d)", cur, max)}
}

func (h Host) disk(dataDir string, min uint64) Result {
	dir := dataDir
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			break
		}
		dir = filepath.Dir(dir)
	}
	free, err := h.FreeBytes(dir)
	if err != nil {
		return Result{"disk", Fail, fmt.Sprintf("statfs %s: %v", dir, err), "make the data folder's disk reachable"}
	}
	if free < min {
		return Result{"disk", Fail, fmt.Sprintf("%s has %d MiB free, below %d MiB", dir, free>>20, min>>20),
			"free space on the data folder's disk, or pass --data on a bigger one"}
	}
	return Result{Name: "disk", Status: OK, Detail: fmt.Sprintf("%s has %d MiB free", dir, free>>20)}
}

// diskImage says whether warren serve will bound the threads' disk (on
// its disk image, or by btrfs quotas), or "disk unprotected" and why: a
// warning, since warren works without, but one thread can then fill the
// disk for all.
func (h Host) diskImage(o Options) Result {
	const name = "disk image"
	io := o.DiskImage
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return Result{name, Fail, fmt.Sprintf("data folder %s: %v", o.DataDir, err), "pass --data an absolute folder"}
	}
	io.DataDir = dir
	if io.LoopControl == "" {
		io.LoopControl = h.path(diskimage.DefaultLoopControl)
	}
	p, err := diskimage.Decide(io)
	switch {
	case err != nil:
		return Result{name, Fail, err.Error(), "see docs/operations.md, \"The disk image\""}
	case p.Use && p.Exists:
		return Result{Name: name, Status: OK, Detail: fmt.Sprintf("workspaces and snapshots on the disk image %s (%d MiB)", p.Image, p.Size>>20)}
	case p.Use:
		return Result{Name: name, Status: OK, Detail: fmt.Sprintf("warren serve will make the disk image %s of %d MiB for the workspaces and snapshots", p.Image, p.Size>>20)}
	case p.Native:
		return Result{name, Warn, "disk unprotected unless warren serve gets --disk-reserve: " + p.Reason,
			"pass warren serve --disk-reserve (and --disk-quota) so that one thread cannot fill the disk"}
	}
	return Result{name, Warn, "disk unprotected: " + p.Reason,
		"give warren serve loop devices (modprobe loop) and mkfs.btrfs and a new data folder of its own, or workspaces on btrfs with --disk-reserve; see docs/operations.md, \"The disk image\""}
}

func (h Host) socketGroup(group string) Result {
	if group == "" {
		return Result{Name: "socket group", Status: OK, Detail: "none asked: only root and --allow-uid users may call the API"}
	}
	if gid, err := strconv.Atoi(group); err == nil && gid >= 0 {
		return Result{Name: "socket group", Status: OK, Detail: fmt.Sprintf("gid %d", gid)}
	}
	groups, err := h.read("/etc/group")
	if err != nil {
		return Result{"socket group", Fail, fmt.Sprintf("/etc/group: %v", err), "make /etc/group readable"}
	}
	for _, line := range strings.Split(groups, "\n") {
		if name, rest, ok := strings.Cut(line, ":"); ok && name == group {
			_, rest, _ = strings.Cut(rest, ":")
			gid, _, _ := strings.Cut(rest, ":")
			return Result{Name: "socket group", Status: OK, Detail: fmt.Sprintf("group %s is gid %s", group, gid)}
		}
	}
	return Result{"socket group", Fail, "no group " + group, "groupadd " + group + ", and add the users who may call the API"}
}
