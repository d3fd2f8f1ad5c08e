package fs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Actor is who made a request, as far as read records go: an agent run, or
// a process acting on its own. A lead run and its subagents are different
// runs, so each checks its own reads.
type Actor struct {
	// Run is the agent run; "" for a process of its own.
	Run string
	// Pid and Proc identify a process of its own: its pid, and the
	// kernel's unique number for that process (the inode number of its
	// pidfd, never given to another process while the system runs), so
	// a reused pid is a new actor. A start time would not do: it counts
	// in ticks of 10 ms, and a pid can be reused within one.
	Pid  int
	Proc uint64
}

// RunActor is the actor of run id.
func RunActor(run string) Actor { return Actor{Run: run} }

func (a Actor) none() bool { return a == Actor{} }

func (a Actor) String() string {
	switch {
	case a.Run != "":
		return "run " + a.Run
	case a.Pid != 0:
		return "process " + strconv.Itoa(a.Pid)
	}
	return "unknown"
}

// procID names one process for its whole life.
type procID struct {
	pid int
	uid uint64 // procUID
}

// pidfdThread asks pidfd_open for a descriptor of one thread rather than
// its whole process (PIDFD_THREAD, Linux 6.9).
const pidfdThread = unix.O_EXCL

// callerCacheMax bounds the callers whose actor is remembered. Each holds
// a pidfd.
const callerCacheMax = 1024

// actors turns the pid of a FUSE caller into an actor.
//
// The kernel names the caller by its thread id. Its actor is the run of
// the nearest process, from the caller's own process up through its
// ancestors, that was registered for a run (RegisterRun; the gateway does
// that for the commands it starts); or else the caller's process itself.
//
// Looking that up reads /proc a few times, so the answer is cached per
// thread id, together with a pidfd of the thread: as long as the pidfd
// says the thread lives, the id still names it and the answer holds. That
// check is one poll, well under a microsecond.
type actors struct {
	mu      sync.Mutex
	callers map[int]caller    // by thread id; guarded by mu
	runs    map[procID]string // registered processes; guarded by mu
	// jails are the inits of jails whose commands say their run
	// themselves: a process whose parent is one is a command, and
	// resolve tells its run; guarded by mu.
	jails map[procID]func(cmdPid int) (string, bool)
}

type caller struct {
	pidfd int
	actor Actor
}

func newActors() *actors {
	return &actors{callers: make(map[int]caller), runs: make(map[procID]string), jails: make(map[procID]func(int) (string, bool))}
}

// of returns the actor of the thread tid (a FUSE request's pid). A tid it
// cannot look up (0: the kernel itself; a thread gone already) is the
// zero Actor, which has no records and is never refused.
func (as *actors) of(tid uint32) Actor {
	if tid == 0 {
		return Actor{}
	}
	id := int(tid)
	as.mu.Lock()
	c, ok := as.callers[id]
	as.mu.Unlock()
	if ok {
		if alive(c.pidfd) {
			return c.actor
		}
		as.drop(id, c)
	}
	pidfd, err := unix.PidfdOpen(id, pidfdThread)
	if err != nil {
		return Actor{}
	}
	a, err := as.resolve(id)
	// The thread must outlive the lookup, or what was read may belong to
	// a thread that took its id after it.
	if err != nil || !alive(pidfd) {
		unix.Close(pidfd)
		return Actor{}
	}
	as.mu.Lock()
	if old, ok := as.callers[id]; ok {
		unix.Close(old.pidfd)
	} else if len(as.callers) >= callerCacheMax {
		as.pruneLocked()
	}
	as.callers[id] = caller{pidfd: pidfd, actor: a}
	as.mu.Unlock()
	return a
}

// drop forgets a cached caller, if it is still the one given.
func (as *actors) drop(id int, c caller) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if cur, ok := as.callers[id]; ok && cur == c {
		delete(as.callers, id)
		unix.Close(c.pidfd)
	}
}

// pruneLocked makes room in the cache: first the dead, then, if the
// cache is full of the living, all of it (they are looked up again).
// as.mu is held.
func (as *actors) pruneLocked() {
	as.dropDeadCallersLocked()
	if len(as.callers) >= callerCacheMax {
		as.clearLocked()
	}
}

func (as *actors) clearLocked() {
	for id, c := range as.callers {
		delete(as.callers, id)
		unix.Close(c.pidfd)
	}
}

// resolve finds the actor of thread tid, uncached.
func (as *actors) resolve(tid int) (Actor, error) {
	pid, err := threadGroup(tid)
	if err != nil {
		return Actor{}, err
	}
	self, err := procUID(pid)
	if err != nil {
		return Actor{}, err
	}
	as.mu.Lock()
	noRuns := len(as.runs) == 0 && len(as.jails) == 0
	as.mu.Unlock()
	if !noRuns {
		// Walk up the ancestors; a chain is short, and this runs once per
		// thread.
		p := procID{pid, self}
		for depth := 0; depth < 256 && p.pid > 1; depth++ {
			as.mu.Lock()
			run, ok := as.runs[p]
			as.mu.Unlock()
			if ok {
				return RunActor(run), nil
			}
			st, err := readProcStat(p.pid)
			if err != nil {
				break
			}
			parent, err := procUID(st.ppid)
			if err != nil {
				break
			}
			as.mu.Lock()
			runOf := as.jails[procID{st.ppid, parent}]
			as.mu.Unlock()
			if runOf != nil {
				// p is a command of a jail (or a process orphaned into
				// it, which runOf does not know).
				if run, ok := runOf(p.pid); ok {
					return RunActor(run), nil
				}
				break
			}
			p = procID{st.ppid, parent}
		}
	}
	return Actor{Pid: pid, Proc: self}, nil
}

// registerJail makes the children of the process initPid (a jail's init)
// act as the run that runOf names for each.
func (as *actors) registerJail(initPid int, runOf func(cmdPid int) (string, bool)) (func(), error) {
	uid, err := procUID(initPid)
	if err != nil {
		return nil, fmt.Errorf("look up process %d: %w", initPid, err)
	}
	id := procID{initPid, uid}
	as.mu.Lock()
	as.jails[id] = runOf
	as.clearLocked()
	as.mu.Unlock()
	return func() {
		as.mu.Lock()
		delete(as.jails, id)
		as.mu.Unlock()
	}, nil
}

// register makes pid and its descendants act as run. Callers cached
// before may have become descendants of pid; they are looked up again.
func (as *actors) register(pid int, run string) error {
	if run == "" {
		return errors.New("empty run id")
	}
	uid, err := procUID(pid)
	if err != nil {
		return fmt.Errorf("look up process %d: %w", pid, err)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	as.runs[procID{pid, uid}] = run
	as.clearLocked()
	return nil
}

// endRun forgets the processes registered for run.
func (as *actors) endRun(run string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	for p, r := range as.runs {
		if r == run {
			delete(as.runs, p)
		}
	}
	as.clearLocked()
}

// sweep forgets registrations and cached callers whose process is gone.
func (as *actors) sweep() {
	as.mu.Lock()
	defer as.mu.Unlock()
	for p := range as.runs {
		if !procAlive(p) {
			delete(as.runs, p)
		}
	}
	for p := range as.jails {
		if !procAlive(p) {
			delete(as.jails, p)
		}
	}
	as.dropDeadCallersLocked()
}

// dropDeadCallersLocked forgets the cached callers whose thread ended.
// as.mu is held.
func (as *actors) dropDeadCallersLocked() {
	for id, c := range as.callers {
		if !alive(c.pidfd) {
			delete(as.callers, id)
			unix.Close(c.pidfd)
		}
	}
}

// gone reports whether an actor can no longer make a request: a process
// actor whose process ended. A run is gone only when it is ended
// (Hub.EndRun).
func (as *actors) gone(a Actor) bool {
	return a.Run == "" && !procAlive(procID{a.Pid, a.Proc})
}

func (as *actors) close() {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.clearLocked()
}

// alive reports whether the process or thread of pidfd still runs. A
// pidfd becomes readable when it exits.
func alive(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 0
	}
}

// procAlive reports whether the process p has not been reaped yet.
func procAlive(p procID) bool {
	uid, err := procUID(p.pid)
	return err == nil && uid == p.uid
}

// procUID returns the kernel's unique number for the process pid now: the
// inode number of a pidfd of it (pidfs, Linux 6.9).
func procUID(pid int) (uint64, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// procStat is what /proc/<pid>/stat tells about a process.
type procStat struct {
	pid, ppid int
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	var buf [1024]byte
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold anything, spaces and
	// parentheses included: the fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := bytes.Fields(b[i+2:])
	// f[0] is field 3 (state), f[1] field 4 (ppid).
	if len(f) < 2 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return procStat{pid: pid, ppid: ppid}, nil
}

// threadGroup returns the process (thread group) of thread tid.
func threadGroup(tid int) (int, error) {
	var buf [4096]byte
	b, err := readSmall("/proc/"+strconv.Itoa(tid)+"/status", buf[:])
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			return strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no Tgid", tid)
}

// readSmall reads a small file into buf in one go.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}
