package jail

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// How a command ended, beyond its exit code. An exit of 137 may be the
// kernel's OOM killer, a kill, or a command's own `exit 137`; only the
// kernel knows which. So a command's end carries what the kernel said:
// the signal that ended its process (the init's wait status), and the
// jail cgroup's counts of its limits being hit, read before it started
// and after it ended. The counts are the jail's (its limits bound all
// its processes together): a command that ran beside another that hit a
// limit sees the count rise too.

// Ended is how a command ended.
type Ended struct {
	// Exit is the exit code, 128 plus the signal for a signal (-1 if the
	// command never ran).
	Exit int
	// Signal is the signal that ended the command's own process (its
	// shell, for a script), 0 if it exited, by itself, with Exit.
	Signal syscall.Signal
	// OOMKills is how many processes of the jail the kernel's OOM killer
	// ended, at the jail's memory limit, while the command ran.
	OOMKills int64
	// ForkFails is how many forks the jail's process limit refused while
	// the command ran.
	ForkFails int64
}

// counts are a jail cgroup's counters of its limits being hit.
type counts struct {
	oomKills, forkFails int64
}

// counts reads the counters of the jail's cgroup, with those of the
// command's tree t (nil for none): on the v1 hierarchy a refused fork is
// counted in the cgroup the fork was made in, which is the tree; on v2,
// in the cgroup whose limit refused it and its parents, the jail's. A
// counter that cannot be read counts 0: no reason is better than a
// wrong one.
func (cg *cgroup) counts(t *tree) counts {
	var c counts
	if cg.kind == "v2" {
		c.oomKills = keyedCount(filepath.Join(cg.dirs[0], "memory.events"), "oom_kill")
		c.forkFails = keyedCount(filepath.Join(cg.dirs[0], "pids.events"), "max")
		return c
	}
	c.oomKills = keyedCount(filepath.Join(cg.dirs[0], "memory.oom_control"), "oom_kill")
	c.forkFails = keyedCount(filepath.Join(cg.dirs[1], "pids.events"), "max")
	if t != nil {
		c.forkFails += keyedCount(filepath.Join(t.dir, "pids.events"), "max")
	}
	return c
}

// keyedCount reads the number of key in a cgroup file of "key value"
// lines, 0 if there is none.
func keyedCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// MemoryLimit and ProcLimit are the bounds of the jail's processes
// together (or of each process and of its uid, with rlimits), as a
// command's end explains them.
func (j *Jail) MemoryLimit() int64 { return j.memoryBytes }
func (j *Jail) ProcLimit() int     { return j.maxProcs }
