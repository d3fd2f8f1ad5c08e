package jail

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A command's process tree. A process group does not hold a command's
// tree: a daemon that calls setsid leaves it, and would outlive a stopped
// job or a timed-out command. So each command of a jail with a cgroup
// runs in a child cgroup of its own (a "tree"), which every process it
// starts stays in, whatever sessions it makes, and which the gateway can
// list and kill from the host.
//
// The command must be in its tree before it runs an instruction, or a
// quick fork could slip out. The init does it without any race: it moves
// the thread that forks into the tree (through a descriptor of the tree's
// file the gateway hands it; the jail has no /sys), forks, and moves the
// thread back to the jail's own cgroup. The child is born in the tree.
// On the v1 hierarchy only that thread moves (tasks); on v2 the whole
// init does (cgroup.procs), for the moment of the fork.
//
// Trees are made only in the pids hierarchy (v1) or below the jail's
// cgroup without controllers of their own (v2): the jail's limits keep
// bounding everything, and a tree costs a folder, not an accounting
// level. Jails bounded by rlimits have no cgroup and so no trees: their
// commands' trees are their process groups.

// tree is the cgroup of one command's processes.
type tree struct {
	dir  string
	v2   bool
	move *os.File // moves the init's forking thread into it
}

// maxFreeTrees bounds the empty trees a jail keeps for its next commands:
// making and removing a cgroup costs a command about a tenth of a
// millisecond, which a tree used again saves.
const maxFreeTrees = 8

// trees returns where the jail's trees go and the file that moves a
// thread (v1) or a process (v2) into a cgroup.
func (cg *cgroup) trees() (parent, moveFile string) {
	if cg.kind == "v2" {
		return cg.dirs[0], "cgroup.procs"
	}
	return cg.dirs[1], "tasks" // the pids hierarchy
}

// homeFile opens the file that moves the init's forking thread back into
// the jail's own cgroup.
func (cg *cgroup) homeFile() (*os.File, error) {
	parent, move := cg.trees()
	f, err := os.OpenFile(filepath.Join(parent, move), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the jail's cgroup: %w", err)
	}
	return f, nil
}

// newTree returns an empty tree for the next command: one a former
// command left empty, or a new one.
func (cg *cgroup) newTree() (*tree, error) {
	cg.mu.Lock()
	if n := len(cg.free); n > 0 {
		t := cg.free[n-1]
		cg.free = cg.free[:n-1]
		cg.mu.Unlock()
		return t, nil
	}
	cg.mu.Unlock()
	parent, move := cg.trees()
	t := &tree{dir: filepath.Join(parent, "cmd-"+strconv.FormatUint(cg.next.Add(1), 10)), v2: cg.kind == "v2"}
	if err := os.Mkdir(t.dir, 0o755); err != nil {
		return nil, fmt.Errorf("make a command's cgroup: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(t.dir, move), os.O_WRONLY, 0)
	if err != nil {
		os.Remove(t.dir)
		return nil, fmt.Errorf("open a command's cgroup: %w", err)
	}
	t.move = f
	return t, nil
}

// release ends what is left of a command's tree and keeps the empty tree
// for a later command, or removes it.
func (cg *cgroup) release(t *tree) error {
	if err := t.kill(); err != nil {
		return errors.Join(err, t.remove())
	}
	cg.mu.Lock()
	if len(cg.free) < maxFreeTrees && !cg.closed {
		cg.free = append(cg.free, t)
		cg.mu.Unlock()
		return nil
	}
	cg.mu.Unlock()
	return t.remove()
}

// removeTrees removes the kept empty trees, before the jail's own cgroup
// goes.
func (cg *cgroup) removeTrees() error {
	cg.mu.Lock()
	free := cg.free
	cg.free, cg.closed = nil, true
	cg.mu.Unlock()
	var errs []error
	for _, t := range free {
		errs = append(errs, t.remove())
	}
	return errors.Join(errs...)
}

// procs lists the host pids of the tree's processes.
func (t *tree) procs() []int {
	b, err := os.ReadFile(filepath.Join(t.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		if p, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// signal sends sig to every process of the tree but init, the host pid
// of the jail's init. The gateway signals a tree only once the init has
// left it (Jail.Run), and the init is never one of a command's processes;
// it is skipped all the same, since on the v1 hierarchy its pid is listed
// while its forking thread is in the tree.
func (t *tree) signal(sig syscall.Signal, init int) {
	for _, p := range t.procs() {
		if p != init {
			unix.Kill(p, sig)
		}
	}
}

// kill ends every process of the tree and waits until it is empty (at
// most a few seconds: a tree forking as fast as it can is bounded by the
// jail's process limit, and each round kills all it finds).
func (t *tree) kill() error {
	if t.v2 {
		// The kernel kills them all at once, forks in flight included;
		// kernels before 5.14 have no cgroup.kill, and the loop does it.
		os.WriteFile(filepath.Join(t.dir, "cgroup.kill"), []byte("1"), 0)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := t.procs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes left in %s", len(pids), t.dir)
		}
		for _, p := range pids {
			unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// remove kills what is left of the tree and deletes its cgroup.
func (t *tree) remove() error {
	if t.move != nil {
		t.move.Close()
	}
	err := t.kill()
	for i := 0; i < 100; i++ {
		rmErr := os.Remove(t.dir)
		if rmErr == nil || errors.Is(rmErr, os.ErrNotExist) {
			return err
		}
		if !errors.Is(rmErr, syscall.EBUSY) {
			return errors.Join(err, rmErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.Join(err, fmt.Errorf("remove %s: still busy", t.dir))
}

// StopTree ends every process of the command tree whose cgroup is dir, as
// a job's record names it: a gateway that took a thread over from another
// on this machine stops the jobs it left. A missing cgroup means the tree
// ended already. dir must be a command's cgroup of a jail of warren's;
// anything else is refused.
func StopTree(dir string) error {
	dir = filepath.Clean(dir)
	jailDir := filepath.Dir(dir)
	ok := strings.HasPrefix(filepath.Base(dir), "cmd-") && strings.HasPrefix(filepath.Base(jailDir), "jail-") &&
		filepath.Base(filepath.Dir(jailDir)) == "warren" && strings.HasPrefix(dir, cgroupRoot+"/")
	if !ok {
		return fmt.Errorf("jail: %q is not the cgroup of a command", dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return (&tree{dir: dir, v2: filepath.Dir(filepath.Dir(jailDir)) == cgroupRoot}).remove()
}
