package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// DefaultReadOnly returns the host folders a jail sees, read-only, at the same
// paths: the system's programs, libraries and configuration. Nothing of
// the server's data, and no other thread's folder, is among them.
func DefaultReadOnly() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
}

// NobodyID is the default uid and gid of a jail's commands.
const NobodyID = 65534

// Config describes one thread's jail.
type Config struct {
	// Workspace is the host folder the jail sees at /workspace: the
	// thread's mount. Required.
	Workspace string
	// ReadOnly are host folders bound read-only at the same paths; nil
	// means DefaultReadOnly(). A jail with an Image binds none of them.
	ReadOnly []string
	// Image, if set, makes the jail's root that image's filesystem,
	// read-only, in place of the host folders of ReadOnly (image.go).
	Image *Image
	// Home is the host folder the jail sees read-write at /home/agent
	// (jail.Home), the commands' HOME: the thread's own, outside its
	// workspace, so that tools' caches never land in the workspace.
	// "" gives the jail a private empty tmpfs there instead (bounded like
	// /tmp). It belongs to the jail's user (GiveWorkspace gives a folder
	// to it), and its last element must not be a link.
	Home string
	// UID and GID run the commands; 0 means NobodyID. Never the server's.
	UID, GID uint32
	// Network is "none" (the default: a network namespace of its own,
	// with only loopback), "egress" (a namespace of its own too, which
	// the gateway links to the host once the jail has started: see
	// NetNS) or "host".
	Network string
	// Nameserver, if set, is the one name server of the jail's
	// /etc/resolv.conf, in place of the host's.
	Nameserver string
	// Hostname is the jail's host name; "" means "warren".
	Hostname string
	// TmpBytes bounds the jail's private /tmp, and its /home/agent when
	// it has no Home; 0 means 512 MiB.
	TmpBytes int64
	// Binary is the program re-executed as the jail's init (it must call
	// RunInit when IsInit); "" means this very binary.
	Binary string
	// MemoryBytes and MaxProcs bound all the jail's processes together
	// (limits_linux.go); 0 means DefaultMemoryBytes and DefaultMaxProcs.
	MemoryBytes int64
	MaxProcs    int
	// CPUMillis bounds the CPU time of all the jail's processes together,
	// in thousandths of a CPU (500: half a CPU's time; 2000: two CPUs'),
	// at least MinCPUMillis; 0 means no bound. A jail that cannot be
	// given the bound refuses to start (limits_linux.go).
	CPUMillis int
	// Rlimits bounds the commands with rlimits even where a cgroup could
	// bound the jail. Hosts without cgroups get rlimits anyway; this is
	// for testing them on hosts with cgroups.
	Rlimits bool
	// Base, if set, is the mount namespace the jail is forked from
	// (base_linux.go): its start then costs the same whatever the daemon
	// has mounted. nil forks it from the daemon's own, which the kernel
	// copies whole. ReadOnly (unless the jail has an Image) and Binary
	// must be the base's.
	Base *Base
}

// Jail is a running per-thread sandbox: an init process in its own
// namespaces that starts the commands it is sent. Close ends it and every
// process in it.
type Jail struct {
	init *exec.Cmd
	conn *conn   // the gateway's end of the socket pair
	cg   *cgroup // nil if the host has no cgroup for limits
	// devNull is the input of commands given none.
	devNull *os.File
	// Limits says how the jail is bounded, or why it is not.
	Limits string
	// memoryBytes and maxProcs are its bounds (MemoryLimit, ProcLimit).
	memoryBytes int64
	maxProcs    int
	// shell runs the command lines that are not plain words (Shell);
	// noShell is the error of one in a root without a shell.
	shell   string
	noShell error
	// workDir is where a command with no Dir starts (Image.WorkDir).
	workDir string
	// image is the image the jail runs on, nil for the host's folders.
	image *Image

	sendMu sync.Mutex

	// reapMu is held for writing while Close reaps the init, and for
	// reading while its namespaces are opened by pid (NetNS): a pid read
	// under it, with reaped false, is the init's.
	reapMu sync.RWMutex
	reaped bool // guarded by reapMu

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan replyMsg // guarded by mu
	dead    error                    // set once the init is gone; guarded by mu
	done    chan struct{}            // closed when the reader ended

	// The runs of the commands, for RunOf; guarded by mu.
	runOfID  map[uint64]string // request id → run, until the command started
	idPid    map[uint64]int    // request id → pid in the jail, while it runs
	pidRun   map[int]string    // pid in the jail → run, while it runs
	starting int               // commands sent whose start is not known yet
	started  chan struct{}     // closed (and replaced) at every start
}

// Start builds a jail and waits until its init is ready.
//
// ctx bounds the start alone. If it ends before the init has answered,
// Start kills and reaps the init, removes its cgroup, closes what it
// opened and returns an error that wraps ctx's. Once Start has returned a
// jail, ctx no longer matters: the jail lives until Close (or until its
// init dies).
func Start(ctx context.Context, cfg Config) (*Jail, error) {
	if cfg.Workspace == "" {
		return nil, errors.New("jail: no workspace")
	}
	if cfg.UID == 0 {
		cfg.UID = NobodyID
	}
	if cfg.GID == 0 {
		cfg.GID = NobodyID
	}
	if cfg.ReadOnly == nil {
		cfg.ReadOnly = DefaultReadOnly()
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "warren"
	}
	if cfg.TmpBytes == 0 {
		cfg.TmpBytes = 512 << 20
	}
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = DefaultMemoryBytes
	}
	if cfg.MaxProcs == 0 {
		cfg.MaxProcs = DefaultMaxProcs
	}
	if cfg.CPUMillis < 0 || cfg.CPUMillis > 0 && cfg.CPUMillis < MinCPUMillis {
		return nil, fmt.Errorf("jail: a CPU bound of %d thousandths of a CPU: want 0 (none) or at least %d", cfg.CPUMillis, MinCPUMillis)
	}
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	switch cfg.Network {
	case "", "none", "egress":
		flags |= unix.CLONE_NEWNET
	case "host":
	default:
		return nil, fmt.Errorf("jail: network %q is not none, egress or host", cfg.Network)
	}
	if cfg.Nameserver != "" {
		if a, err := netip.ParseAddr(cfg.Nameserver); err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("jail: name server %q is not an address", cfg.Nameserver)
		}
	}
	if cfg.Image != nil {
		if !filepath.IsAbs(cfg.Image.Root) {
			return nil, fmt.Errorf("jail: image root %q is not an absolute path", cfg.Image.Root)
		}
		if cfg.Rlimits {
			return nil, errImageRlimits
		}
	}
	if cfg.Home != "" && !filepath.IsAbs(cfg.Home) {
		return nil, fmt.Errorf("jail: home %q is not an absolute path", cfg.Home)
	}
	bin := cfg.Binary
	if bin == "" {
		bin = "/proc/self/exe"
	}
	if cfg.Base != nil {
		if err := cfg.Base.fits(cfg); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jail: start: %w", err)
	}
	// From a base, the workspace is not there to open by path: it goes to
	// the init as a detached bind made here, in the daemon's namespace.
	// So do the image's root and the home, from a base or not: the base
	// hides the daemon's data folder, where they live, and one way for
	// both kinds of start is one way to test.
	trees := startTrees{ws: -1, image: -1, home: -1}
	defer trees.close()
	if cfg.Base != nil {
		var err error
		if trees.ws, err = cloneWorkspace(cfg.Workspace); err != nil {
			return nil, err
		}
	}
	var resolvConf string
	if cfg.Image != nil {
		var err error
		if trees.image, err = cloneImage(cfg.Image.Root); err != nil {
			return nil, err
		}
		if cfg.Nameserver == "" {
			if resolvConf, err = hostResolvConf(); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Home != "" {
		var err error
		if trees.home, err = cloneHome(cfg.Home); err != nil {
			return nil, err
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: socket pair: %w", err)
	}
	// A packet must fit the sender's buffer whole, and the default
	// (net.core.wmem_default, 208 KiB) is below maxPacket: a long command
	// would fail with EMSGSIZE. The gateway sends the requests, so its end
	// needs the room; FORCE passes over wmem_max, as root may.
	if err := setSendBuffer(pair[0], maxPacket); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("jail: socket send buffer: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "jail-init")
	ours, err := newConn(pair[0])
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("jail: socket: %w", err)
	}

	cmd := exec.Command(bin, InitArg)
	// The init starts with the jail's environment, never the server's.
	cmd.Env, _ = Env(nil, nil)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{theirs}
	// The jail dies with the gateway, whatever way it goes: the init ends
	// when the gateway's end of their socket closes. Not Pdeathsig, which
	// comes when the forking thread ends, not the process (doc.go).
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: flags,
	}
	if cfg.Base != nil {
		// The fork, on a thread in the base: the init's namespace is a
		// copy of the base's few mounts.
		err = cfg.Base.startIn(cmd.Start)
	} else {
		err = cmd.Start()
	}
	// The init holds its end now. Ours goes, so that the init's end
	// closes when the init ends, and a wait for its answer ends with it.
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("jail: start init: %w", err)
	}
	// A ctx that ends before the init answered kills the init: whatever
	// Start is doing then fails (the wait for the answer sees the socket
	// close), and Start returns ctx's error.
	killed := make(chan struct{})
	stopKill := context.AfterFunc(ctx, func() {
		cmd.Process.Kill()
		close(killed)
	})
	var devNull *os.File
	// abandon undoes the start: the init killed and reaped, its cgroup
	// (if made) removed, what was opened closed.
	abandon := func(cg *cgroup, err error) (*Jail, error) {
		if !stopKill() {
			<-killed
			err = fmt.Errorf("jail: start: %w", ctx.Err())
		}
		cmd.Process.Kill()
		cmd.Wait()
		if cg != nil {
			cg.remove()
		}
		if devNull != nil {
			devNull.Close()
		}
		ours.Close()
		return nil, err
	}
	// The init waits for its setup: it runs nothing before it is in its
	// cgroup.
	var (
		cg     *cgroup
		cgErr  = errors.New("rlimits asked for")
		limits string
		rl     *rlimits
	)
	if !cfg.Rlimits {
		cg, cgErr = newCgroup("jail-"+strconv.Itoa(cmd.Process.Pid), cfg.MemoryBytes, cfg.MaxProcs, cfg.CPUMillis)
	}
	if cgErr != nil && cfg.CPUMillis > 0 {
		// rlimits have no rate of CPU time: the jail would run unbounded.
		return abandon(nil, fmt.Errorf("jail: a CPU bound needs a cgroup: %w", cgErr))
	}
	if cgErr != nil && cfg.Image != nil {
		return abandon(nil, fmt.Errorf("%w: %w", errImageRlimits, cgErr))
	}
	if cgErr == nil {
		if err := cg.add(cmd.Process.Pid); err != nil {
			return abandon(cg, fmt.Errorf("jail: %w", err))
		}
		limits = fmt.Sprintf("cgroup %s: %d bytes of memory, %d processes", cg.kind, cfg.MemoryBytes, cfg.MaxProcs)
		switch {
		case cfg.CPUMillis > 0:
			limits += fmt.Sprintf(", %s CPUs", strconv.FormatFloat(float64(cfg.CPUMillis)/1000, 'f', -1, 64))
		case !cg.cpu:
			limits += ", no cpu cgroup"
		}
	} else {
		// Without a cgroup, each command is bounded on its own
		// (limits_linux.go says what that does not cover).
		cg = nil
		rl = &rlimits{AddressSpace: cfg.MemoryBytes, Procs: cfg.MaxProcs}
		limits = fmt.Sprintf("rlimits (no cgroup: %v): %d bytes of address space per process, %d processes of uid %d", cgErr, cfg.MemoryBytes, cfg.MaxProcs, cfg.UID)
	}
	if devNull, err = os.Open(os.DevNull); err != nil {
		return abandon(cg, fmt.Errorf("jail: %w", err))
	}
	s := setup{
		Workspace: cfg.Workspace, ReadOnly: cfg.ReadOnly,
		UID: cfg.UID, GID: cfg.GID, Hostname: cfg.Hostname, TmpBytes: cfg.TmpBytes,
		OwnNet: flags&unix.CLONE_NEWNET != 0, Rlimits: rl, Trees: cg != nil, Nameserver: cfg.Nameserver,
		WorkspaceTree: trees.ws >= 0, ImageTree: trees.image >= 0, HomeTree: trees.home >= 0,
		ResolvConf: resolvConf,
	}
	if cfg.Image != nil {
		s.ImageUser = cfg.Image.User
	}
	var fds []int
	var home *os.File
	if cg != nil {
		if home, err = cg.homeFile(); err == nil {
			fds = append(fds, int(home.Fd()))
		}
	}
	if err == nil {
		for _, fd := range []int{trees.ws, trees.image, trees.home} {
			if fd >= 0 {
				fds = append(fds, fd)
			}
		}
		err = ours.send(s, fds...)
	}
	if home != nil {
		home.Close()
	}
	rc := ours.receiver()
	var ready reply
	if err == nil {
		_, err = rc.receive(&ready)
	}
	if err == nil && !ready.Ready {
		err = errors.New(ready.Err)
	}
	if err != nil {
		return abandon(cg, fmt.Errorf("jail: set up: %w", err))
	}
	if !stopKill() {
		// ctx ended as the init answered: it is killed already.
		return abandon(cg, nil)
	}
	j := &Jail{
		cg: cg, Limits: limits, devNull: devNull, memoryBytes: cfg.MemoryBytes, maxProcs: cfg.MaxProcs,
		shell: ready.Shell, noShell: noShellError(cfg.Image != nil), workDir: cfg.Image.WorkDir(), image: cfg.Image,
		init: cmd, conn: ours, waiting: make(map[uint64]chan replyMsg), done: make(chan struct{}),
		runOfID: make(map[uint64]string), idPid: make(map[uint64]int), pidRun: make(map[int]string),
		started: make(chan struct{}),
	}
	// The reader is the jail's: it ends when the init's end of the socket
	// closes, which Close brings, and Close waits for it.
	go j.read(rc)
	return j, nil
}

// read hands the init's replies to the commands waiting for them.
func (j *Jail) read(rc *receiver) {
	defer close(j.done)
	for {
		var r reply
		fds, err := rc.receive(&r)
		if err != nil {
			j.mu.Lock()
			j.dead = fmt.Errorf("%w: %w", ErrInitGone, err)
			for id, ch := range j.waiting {
				close(ch)
				delete(j.waiting, id)
			}
			j.mu.Unlock()
			return
		}
		j.mu.Lock()
		ch := j.waiting[r.ID]
		if r.Done {
			delete(j.waiting, r.ID)
		}
		j.noteStart(r)
		j.mu.Unlock()
		if ch == nil {
			closeAll(fds)
			continue
		}
		ch <- replyMsg{r, fds} // the receiver owns the descriptors now
		if r.Done {
			close(ch)
		}
	}
}

// replyMsg is a reply with the descriptors that came with it.
type replyMsg struct {
	reply
	fds []int
}

// Winsize is a terminal's size.
type Winsize struct{ Rows, Cols uint16 }

// noteStart keeps the run of a command from its start to its end, for
// RunOf. j.mu is held.
func (j *Jail) noteStart(r reply) {
	run, sent := j.runOfID[r.ID]
	switch {
	case r.Started:
		if sent {
			delete(j.runOfID, r.ID)
			j.starting--
			j.idPid[r.ID] = r.Pid
			j.pidRun[r.Pid] = run
			close(j.started)
			j.started = make(chan struct{})
		}
	case r.Done:
		if sent { // it never started
			delete(j.runOfID, r.ID)
			j.starting--
		}
		if pid, ok := j.idPid[r.ID]; ok {
			delete(j.idPid, r.ID)
			delete(j.pidRun, pid)
		}
	}
}

// Err returns nil while the jail serves commands, and an error that
// wraps ErrInitGone once its init has ended: then no command can start in
// it, and its owner closes it and starts another.
func (j *Jail) Err() error {
	j.mu.Lock()
	dead := j.dead
	j.mu.Unlock()
	if dead != nil {
		return dead
	}
	// The reader may not have seen the socket close yet. An init that is
	// waitable (a zombie: WNOWAIT leaves it for Close to reap) closed its
	// end before it got there.
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, j.init.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err == nil && info.Signo == int32(unix.SIGCHLD) {
		return fmt.Errorf("%w: it exited", ErrInitGone)
	}
	return nil
}

// Shell is the shell that runs the jail's command lines (Cmd.Script):
// "/bin/bash" where the jail's root has bash, else "/bin/sh", else "",
// and then a line that is not plain words is refused (ErrNoShell).
func (j *Jail) Shell() string { return j.shell }

// Image is the image the jail runs on, nil for the host's folders: its
// variables join every command's (EnvFor). Not to be changed.
func (j *Jail) Image() *Image { return j.image }

// InitPid is the host's pid of the jail's init: every command is its
// child.
func (j *Jail) InitPid() int { return j.init.Process.Pid }

// maxStartWait bounds how long RunOf waits for a command being started.
const maxStartWait = 2 * time.Second

// RunOf returns the run of the command whose host pid is hostPid (a child
// of the init), if it has one. A command may act before the init said it
// started it: while a start is pending, RunOf waits for it.
func (j *Jail) RunOf(hostPid int) (string, bool) {
	nsPid, err := innerPid(hostPid)
	if err != nil {
		return "", false
	}
	deadline := time.NewTimer(maxStartWait)
	defer deadline.Stop()
	for {
		j.mu.Lock()
		run, ok := j.pidRun[nsPid]
		pending, started := j.starting > 0, j.started
		j.mu.Unlock()
		if ok || !pending {
			return run, ok && run != ""
		}
		select {
		case <-started:
		case <-deadline.C:
			return "", false
		}
	}
}

// innerPid reads the pid of hostPid in its innermost pid namespace.
func innerPid(hostPid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.Atoi(f[len(f)-1])
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no NSpid", hostPid)
}

// outputPipeBytes is the size of a command's output pipes.
const outputPipeBytes = 1 << 20

// Cmd is one command to run in a jail.
type Cmd struct {
	// Run is the agent run the command acts as in the workspace's
	// filesystem (see RunOf); "" means none.
	Run  string
	Args []string // argv; Args[0] is looked up in the jail's PATH
	// Script, when Args is empty, is a command line run as the jail's
	// shell (Shell) -c Script does (script.go).
	Script string
	Env    []string  // the whole environment (see EnvFor)
	Dir    string    // inside the jail; "" means the image's WorkDir, or /workspace
	Stdin  io.Reader // nil means empty
	Stdout io.Writer // nil means discarded
	Stderr io.Writer // nil means discarded (a terminal has none); Stdout itself means one stream
	// Tty runs the command on a terminal of its own, of Size: its output
	// comes as one stream on Stdout, and Resize changes its size while it
	// runs.
	Tty    bool
	Size   Winsize
	Resize <-chan Winsize
	// Signals sends signals to the command's whole process tree while it
	// runs (SIGTERM to ask a job to stop, say).
	Signals <-chan syscall.Signal
	// Started, if set, is called once the command runs, with its pid in
	// the jail and the cgroup that holds its tree ("" without one).
	Started func(pid int, cgroup string)
	// Watch, if set, is given the read ends of the command's stdout and
	// stderr pipes before the command starts, when it has two (no
	// terminal, and Stdout and Stderr are different writers): a caller
	// that reads both in the order they were written must watch them
	// before their first byte. Run copies each to its writer all the same
	// (a writer's ReadFrom may read them both), and closes them only once
	// both copies returned. It is not called when Run fails before.
	Watch func(stdout, stderr *os.File)
}

// ErrInitGone is the error of a command whose jail's init ended while it
// ran (Close, or the init killed): the kernel ended the command with
// every other process of the jail, and Run returns 128+SIGKILL (137)
// with it, or -1 if the command had not started. The jail serves no
// command after that.
var ErrInitGone = errors.New("jail: init gone")

// Run runs c in the jail and returns its exit code (128+n for a signal).
// When ctx ends, the command's whole session is killed.
func (j *Jail) Run(ctx context.Context, c Cmd) (exit int, err error) {
	end, err := j.RunEnded(ctx, c)
	return end.Exit, err
}

// RunEnded is Run, and says how the command ended besides its exit code
// (events_linux.go).
func (j *Jail) RunEnded(ctx context.Context, c Cmd) (end Ended, err error) {
	end.Exit = -1
	dir := c.Dir
	if dir == "" {
		dir = j.workDir
	}
	req := request{Argv: c.Args, Env: c.Env, Dir: dir, Tty: c.Tty, Rows: c.Size.Rows, Cols: c.Size.Cols}
	if len(c.Args) == 0 && c.Script != "" {
		// The plain words of a line run in bash's place only where bash
		// is the shell, or where there is none to run them otherwise
		// (script.go).
		words, plain := plainWords(c.Script)
		switch {
		case plain && j.shell != shShell:
			req.Argv, req.Script = words, c.Script
		case j.shell == "":
			return end, j.noShell
		default:
			req.Argv = shellArgv(j.shell, c.Script)
		}
	}
	if len(req.Argv) == 0 {
		return end, errors.New("jail: no command")
	}
	var copies sync.WaitGroup
	copyOut := func(dst io.Writer, src *os.File) {
		defer copies.Done()
		if dst == nil {
			dst = io.Discard
		}
		io.Copy(dst, src)
	}
	feed := func(dst *os.File, closeAfter bool) {
		if c.Stdin != nil {
			io.Copy(dst, c.Stdin)
		}
		if closeAfter {
			dst.Close()
		}
	}

	var theirs []int
	var pipes [3][2]*os.File // [i][0] the command's end, [i][1] ours
	defer func() {
		for _, p := range pipes {
			for _, f := range p {
				if f != nil {
					f.Close()
				}
			}
		}
	}()
	// One writer for both streams gets one pipe, as a terminal would: the
	// output keeps the order it was written in.
	combined := c.Stdout != nil && c.Stdout == c.Stderr
	if !c.Tty {
		for i := range pipes {
			if i == 2 && combined {
				theirs = append(theirs, theirs[1])
				break
			}
			if i == 0 && c.Stdin == nil {
				// No input: /dev/null, and no pipe or goroutine to feed.
				theirs = append(theirs, int(j.devNull.Fd()))
				continue
			}
			r, w, err := os.Pipe()
			if err != nil {
				return end, fmt.Errorf("jail: pipe: %w", err)
			}
			if i == 0 {
				pipes[i] = [2]*os.File{r, w}
			} else {
				// A roomier pipe lets a command that writes much run on
				// while its output is being read: fewer switches, and
				// several times the throughput of the default 64 KiB.
				// Best effort: the system's bound may be lower.
				unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, outputPipeBytes)
				pipes[i] = [2]*os.File{w, r}
			}
			theirs = append(theirs, int(pipes[i][0].Fd()))
		}
	}
	// The command's tree: every process it starts, to signal and to end
	// with it (tree_linux.go).
	var tr *tree
	if j.cg != nil {
		t, treeErr := j.cg.newTree()
		if treeErr != nil {
			return end, fmt.Errorf("jail: %w", treeErr)
		}
		defer func() {
			if rmErr := j.cg.release(t); rmErr != nil && err == nil {
				err = fmt.Errorf("jail: end the command's processes: %w", rmErr)
			}
		}()
		tr, req.Tree = t, true
		theirs = append(theirs, int(t.move.Fd()))
	}
	if c.Watch != nil && !c.Tty && !combined {
		c.Watch(pipes[1][1], pipes[2][1])
	}
	// The counters before the command: its end reads them again.
	var before counts
	if j.cg != nil {
		before = j.cg.counts(tr)
	}
	id, ch, err := j.submit(req, c.Run, theirs)
	if err != nil {
		return end, err
	}
	if !c.Tty {
		for i := range pipes {
			if pipes[i][0] != nil {
				pipes[i][0].Close()
				pipes[i][0] = nil
			}
		}
		copies.Add(1)
		go copyOut(c.Stdout, pipes[1][1])
		if !combined {
			copies.Add(1)
			go copyOut(c.Stderr, pipes[2][1])
		}
		if stdin := pipes[0][1]; stdin != nil {
			pipes[0][1] = nil
			go feed(stdin, true)
		}
	}

	var master *os.File
	ttyDone := make(chan struct{})
	var resizing sync.WaitGroup // the resizer must be done with master before it closes
	// The init enters a command's tree for the moment of its fork, and
	// says Started or Done only once it is back in its own cgroup
	// (tree_linux.go). Until then a signal to the tree would hit the init
	// itself, and with it every process of the jail: a hang-up, a timeout
	// or a stop that comes that early waits for the answer (the init's
	// kill of the command's session goes out at once, and the init reads
	// it only after the fork).
	answered, started := false, false
	var early syscall.Signal // the signal due to the tree once it may be sent
	toTree := func(sig syscall.Signal) {
		switch {
		case answered:
			tr.signal(sig, j.InitPid())
		case early != unix.SIGKILL:
			early = sig
		}
	}
	for waiting := true; waiting; {
		select {
		case m, ok := <-ch:
			if ok && (m.Started || m.Done) {
				answered = true
				started = started || m.Started
				if tr != nil && early != 0 {
					tr.signal(early, j.InitPid())
					early = 0
				}
			}
			if ok && m.Started && c.Started != nil {
				cg := ""
				if tr != nil {
					cg = tr.dir
				}
				c.Started(m.Pid, cg)
			}
			switch {
			case !ok:
				err, waiting = ErrInitGone, false
				if started {
					// The kernel kills every process of a pid namespace
					// whose init ends: the command got SIGKILL.
					end.Exit, end.Signal = 128+int(unix.SIGKILL), unix.SIGKILL
				}
			case m.Started && c.Tty && len(m.fds) > 0 && master == nil:
				// The terminal's master: the command's output, input
				// and size.
				master = os.NewFile(uintptr(m.fds[0]), "pty")
				closeAll(m.fds[1:])
				copies.Add(1)
				go copyOut(c.Stdout, master)
				go feed(master, false)
				resizing.Add(1)
				go func() {
					defer resizing.Done()
					for {
						select {
						case ws, ok := <-c.Resize:
							if !ok {
								return
							}
							pty.Setsize(master, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols})
						case <-ttyDone:
							return
						}
					}
				}()
			case m.Done:
				closeAll(m.fds)
				end.Exit, end.Signal, waiting = m.Exit, syscall.Signal(m.Signal), false
				if m.Err != "" {
					err = errors.New(m.Err)
				}
			default:
				closeAll(m.fds)
			}
		case sig := <-c.Signals:
			if tr != nil {
				toTree(sig)
			} else {
				j.sendMu.Lock()
				j.conn.send(request{ID: id, Kill: true, Signal: int(sig)})
				j.sendMu.Unlock()
			}
		case <-ctx.Done():
			if tr != nil {
				toTree(unix.SIGKILL)
			}
			j.sendMu.Lock()
			j.conn.send(request{ID: id, Kill: true})
			j.sendMu.Unlock()
			ctx = context.Background() // wait for its end now
		}
	}
	close(ttyDone)
	resizing.Wait()
	if master != nil {
		// The output ends when the terminal's last other end closes,
		// which the end of the command's session brings.
		waitTimeout(&copies, 2*time.Second)
		master.Close()
	}
	copies.Wait()
	if j.cg != nil {
		after := j.cg.counts(tr)
		end.OOMKills, end.ForkFails = after.oomKills-before.oomKills, after.forkFails-before.forkFails
	}
	return end, err
}

// submit registers and sends one request with its descriptors.
func (j *Jail) submit(req request, run string, fds []int) (uint64, chan replyMsg, error) {
	ch := make(chan replyMsg, 4)
	j.mu.Lock()
	if j.dead != nil {
		j.mu.Unlock()
		return 0, nil, j.dead
	}
	j.nextID++
	id := j.nextID
	req.ID = id
	j.waiting[id] = ch
	j.runOfID[id] = run
	j.starting++
	j.mu.Unlock()

	j.sendMu.Lock()
	err := j.conn.send(req, fds...)
	j.sendMu.Unlock()
	if err != nil {
		j.mu.Lock()
		delete(j.waiting, id)
		if _, ok := j.runOfID[id]; ok {
			delete(j.runOfID, id)
			j.starting--
		}
		j.mu.Unlock()
		return 0, nil, fmt.Errorf("jail: send command: %w", err)
	}
	return id, ch, nil
}

// waitTimeout waits for wg, at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Close ends the jail: its init and, with it, every process in it (the
// kernel kills a pid namespace whose init ends).
func (j *Jail) Close() error {
	j.stop()
	<-j.done // the init's end of the socket closed with it
	err := errors.Join(j.conn.Close(), j.devNull.Close())
	if j.cg != nil {
		err = errors.Join(err, j.cg.remove())
	}
	return err
}

func (j *Jail) stop() {
	j.init.Process.Kill()
	j.reapMu.Lock()
	defer j.reapMu.Unlock()
	j.init.Wait()
	j.reaped = true
}
