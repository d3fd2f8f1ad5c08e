package jail

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// The init of a jail: the binary re-executed by Start in new mount, pid,
// ipc, uts and network namespaces, as pid 1 of its pid namespace. It builds
// the jail's root, pivots into it, and then starts the commands the
// gateway sends it, each in a session of its own under the jail's uid,
// and reaps every process of the namespace.

// initFd is the descriptor of the gateway's end of the socket pair in the
// init (ExtraFiles[0]).
const initFd = 3

// IsInit reports whether this process was started as a jail's init: the
// binary's main (or a test's TestMain) calls RunInit then, before anything
// else.
func IsInit() bool {
	return len(os.Args) > 1 && os.Args[1] == InitArg
}

// RunInit runs the init and never returns.
func RunInit() {
	// no_new_privs and the capability bounding set belong to one thread,
	// and a command inherits those of the thread that forks it: the setup
	// and every fork happen on this one.
	runtime.LockOSThread()
	// Commands start with the usual umask, 022, whatever the daemon's
	// (an operator's shell under 077 made every file an agent wrote
	// readable by its owner alone); the root is built under it too.
	unix.Umask(0o022)
	// Commands start with no signal ignored, whatever the daemon started
	// with (resetIgnoredSignals).
	if err := resetIgnoredSignals(); err != nil {
		initFail("%v", err)
	}
	// The gateway's socket is the init's alone: no command inherits it.
	unix.CloseOnExec(initFd)
	// Descriptors the gateway leaked into this process (libraries open
	// some without O_CLOEXEC: a FUSE device, a folder of another thread)
	// must not reach any command: they are closed before anything else.
	if err := closeInherited(); err != nil {
		initFail("%v", err)
	}
	rc := newReceiver(initFd)
	var s setup
	setupFds, err := rc.receive(&s)
	if err != nil {
		initFail("read setup: %v", err)
	}
	// The descriptors come in this order, each only if the setup says so.
	home := -1
	trees := initTrees{ws: -1, image: -1, home: -1}
	slots := []struct {
		fd   *int
		sent bool
	}{{&home, s.Trees}, {&trees.ws, s.WorkspaceTree}, {&trees.image, s.ImageTree}, {&trees.home, s.HomeTree}}
	want := 0
	for _, slot := range slots {
		if slot.sent {
			want++
		}
	}
	if len(setupFds) != want {
		initFail("setup: %d descriptors, want %d (the cgroup's: %v, the workspace's: %v, the image's: %v, the home's: %v)",
			len(setupFds), want, s.Trees, s.WorkspaceTree, s.ImageTree, s.HomeTree)
	}
	for _, slot := range slots {
		if slot.sent {
			*slot.fd, setupFds = setupFds[0], setupFds[1:]
		}
	}
	shell, err := buildRoot(s, trees)
	if err != nil {
		initFail("%v", err)
	}
	if s.Rlimits != nil {
		if s.ImageTree {
			// Never the image's prlimit: anyone may have put a program there.
			initFail("%v", errImageRlimits)
		}
		if _, err := os.Stat(prlimitPath); err != nil {
			initFail("no cgroup for limits, and no %s to set rlimits: %v", prlimitPath, err)
		}
	}
	if s.OwnNet {
		if err := loopbackUp(); err != nil {
			initFail("%v", err)
		}
	}
	// Nothing the commands run can gain privileges (set-id bits, file
	// capabilities), whatever the mounts say.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		initFail("no_new_privs: %v", err)
	}
	if err := dropBoundingSet(); err != nil {
		initFail("%v", err)
	}
	if _, err := applyLandlock(); err != nil {
		initFail("%v", err)
	}
	// From here on, neither the init nor any command may make namespaces,
	// mount, trace or fake terminal input (seccomp_linux.go).
	if err := installFilter(); err != nil {
		initFail("%v", err)
	}
	in := &initState{setup: s, home: home, shell: shell, running: make(map[int]uint64), early: make(map[int]syscall.WaitStatus)}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go in.reap(sigs)
	if err := sendReply(initFd, reply{Ready: true, Shell: shell}); err != nil {
		os.Exit(1)
	}
	in.serve(rc)
}

// resetIgnoredSignals sets every ignored signal back to its default
// action. An ignored signal stays ignored across fork and exec, and some
// come so: nohup ignores SIGHUP, a script's & SIGINT and SIGQUIT, make
// signals 32 and 33. Go's runtime takes over most signals at its start,
// which exec then resets, but it leaves SIGINT, SIGHUP and the C library's
// 32 and 33 ignored when they come so; a command could not trap them, and
// an interrupt sent to it would do nothing. The init, pid 1 of its
// namespace, is not hurt by their default: the kernel does not give a
// namespace's init a signal it has no handler for from inside.
func resetIgnoredSignals() error {
	const sigIgn = 1
	// struct sigaction begins with the handler on every architecture;
	// zeroed, it is SIG_DFL with no flags and an empty mask.
	var old, dfl [4]uint64
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
		if errno != 0 {
			return fmt.Errorf("read the action of signal %d: %w", sig, errno)
		}
		if old[0] != sigIgn {
			continue
		}
		_, _, errno = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		if errno != 0 {
			return fmt.Errorf("set signal %d back to its default: %w", sig, errno)
		}
	}
	return nil
}

// dropBoundingSet empties the capability bounding set and the ambient
// set: no program a command runs can ever hold a capability, whatever its
// file says. (The init keeps its own, to start commands as another uid.)
func dropBoundingSet() error {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// closeInherited closes every descriptor above stdio and the gateway's
// socket that lacks close-on-exec: the Go runtime opens all of its own
// with it, so the others came from the parent.
func closeInherited() error {
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dirFd := int(dir.Fd())
	if err != nil {
		dir.Close()
		return fmt.Errorf("list descriptors: %w", err)
	}
	var leaked []int
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= initFd || fd == dirFd {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			leaked = append(leaked, fd)
		}
	}
	dir.Close()
	for _, fd := range leaked {
		unix.Close(fd)
	}
	return nil
}

func initFail(format string, args ...any) {
	sendReply(initFd, reply{Err: fmt.Sprintf(format, args...)})
	os.Exit(1)
}

type initState struct {
	setup setup
	home  int    // moves the forking thread back into the jail's cgroup; -1 without trees
	shell string // the root's shell for command lines, "" if none (script.go)

	mu      sync.Mutex
	running map[int]uint64             // pid → request id; guarded by mu
	early   map[int]syscall.WaitStatus // exits reaped before their start was recorded; guarded by mu
	ids     map[uint64]int             // request id → pid; guarded by mu
}

// serve starts and stops commands until the gateway goes away, then ends
// the jail (the kernel kills every process of the namespace with pid 1).
// The socket's end of file is what ties the jail to its gateway's
// process (doc.go): the gateway's end closes when its last thread exits,
// whatever way it goes.
func (in *initState) serve(rc *receiver) {
	in.ids = make(map[uint64]int)
	for {
		var req request
		fds, err := rc.receive(&req)
		if err != nil {
			os.Exit(0)
		}
		if req.Kill {
			in.kill(req.ID, syscall.Signal(req.Signal))
			closeAll(fds)
			continue
		}
		in.start(req, fds)
		closeAll(fds)
	}
}

func closeAll(fds []int) {
	for _, f := range fds {
		unix.Close(f)
	}
}

// start forks and execs one command with the given stdin, stdout and
// stderr, in a new session, as the jail's uid.
func (in *initState) start(req request, fds []int) {
	treeFd := -1
	if req.Tree {
		if len(fds) == 0 || in.home < 0 {
			sendReply(initFd, reply{ID: req.ID, Done: true, Exit: -1, Err: "a command's tree needs its cgroup's descriptor"})
			return
		}
		treeFd, fds = fds[len(fds)-1], fds[:len(fds)-1]
	}
	var master *os.File
	if req.Tty && len(fds) == 0 && len(req.Argv) > 0 {
		// A terminal of the jail's own devpts: the command's stdin,
		// stdout and stderr, and its controlling terminal.
		m, tty, err := pty.Open()
		if err != nil {
			sendReply(initFd, reply{ID: req.ID, Done: true, Exit: -1, Err: fmt.Sprintf("open a terminal: %v", err)})
			return
		}
		defer m.Close()
		defer tty.Close()
		if req.Rows > 0 && req.Cols > 0 {
			pty.Setsize(m, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
		}
		master = m
		t := int(tty.Fd())
		fds = []int{t, t, t}
	}
	if len(fds) != 3 || len(req.Argv) == 0 {
		sendReply(initFd, reply{ID: req.ID, Done: true, Exit: -1, Err: "a command needs argv and three descriptors, or a terminal"})
		return
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Dir,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: in.setup.UID, Gid: in.setup.GID, Groups: []uint32{}},
		},
	}
	if master != nil {
		attr.Sys.Setctty, attr.Sys.Ctty = true, 0
	}
	if req.Script != "" && in.setup.Rlimits != nil && in.shell != "" {
		// prlimit would start the program after the fork, too late to
		// fall back on bash.
		req.Argv, req.Script = shellArgv(in.shell, req.Script), ""
	}
	in.mu.Lock()
	if treeFd >= 0 {
		// Born in its tree (tree_linux.go): this thread goes in for the
		// fork and comes back after it.
		if _, err := unix.Write(treeFd, []byte("0")); err != nil {
			in.mu.Unlock()
			sendReply(initFd, reply{ID: req.ID, Done: true, Exit: -1, Err: fmt.Sprintf("enter the command's cgroup: %v", err)})
			return
		}
	}
	pid, err := in.forkExec(req, attr)
	if err != nil && req.Script != "" && in.shell != "" {
		// Not a program found, or not one the kernel runs as it is (a
		// script without a #! line, a file the jail's user may not
		// execute): bash -c does what bash does with it, and says what
		// is wrong in its own words. (Without a shell, the jail's own
		// words are all there is.)
		req.Argv, req.Script = shellArgv(in.shell, req.Script), ""
		pid, err = in.forkExec(req, attr)
	}
	if treeFd >= 0 {
		if _, err := unix.Write(in.home, []byte("0")); err != nil {
			// Left in a command's cgroup, the init's next commands
			// would be born there too: the jail cannot go on.
			initFail("leave a command's cgroup: %v", err)
		}
	}
	if err != nil {
		in.mu.Unlock()
		code := 126
		if errors.Is(err, errNotFound) {
			code = 127
		}
		sendReply(initFd, reply{ID: req.ID, Done: true, Exit: code, Err: err.Error()})
		return
	}
	if master != nil {
		sendReply(initFd, reply{ID: req.ID, Started: true, Pid: pid}, int(master.Fd()))
	} else {
		sendReply(initFd, reply{ID: req.ID, Started: true, Pid: pid})
	}
	if ws, ok := in.early[pid]; ok {
		delete(in.early, pid)
		in.mu.Unlock()
		sendReply(initFd, reply{ID: req.ID, Done: true, Exit: exitCode(ws), Signal: endSignal(ws)})
		return
	}
	in.running[pid] = req.ID
	in.ids[req.ID] = pid
	in.mu.Unlock()
}

// errNotFound means a command's program is not in its PATH.
var errNotFound = errors.New("command not found")

// forkExec starts req's program with attr: under prlimit when the jail is
// bounded by rlimits, and, for the plain words of a script, with the
// variables bash would have added.
func (in *initState) forkExec(req request, attr *syscall.ProcAttr) (int, error) {
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return 0, err
	}
	attr.Env = req.Env
	if req.Script != "" {
		attr.Env = asBashWould(req.Env, req.Dir, path)
	}
	argv := req.Argv
	if rl := in.setup.Rlimits; rl != nil {
		// prlimit sets soft and hard limits alike: a command cannot
		// raise them again.
		argv = append([]string{prlimitPath,
			"--as=" + strconv.FormatInt(rl.AddressSpace, 10),
			"--nproc=" + strconv.Itoa(rl.Procs), "--", path}, req.Argv[1:]...)
		path = prlimitPath
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", req.Argv[0], err)
	}
	return pid, nil
}

// kill signals a command's process group: its session, as far as a jail
// without trees can tell its processes (see tree_linux.go).
func (in *initState) kill(id uint64, sig syscall.Signal) {
	if sig == 0 {
		sig = unix.SIGKILL
	}
	in.mu.Lock()
	pid, ok := in.ids[id]
	in.mu.Unlock()
	if ok {
		unix.Kill(-pid, sig)
	}
}

// reap waits for every child of the namespace: the commands, whose exits
// it reports, and orphans reparented to pid 1, which it just buries.
func (in *initState) reap(sigs <-chan os.Signal) {
	for range sigs {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			in.mu.Lock()
			id, ok := in.running[pid]
			if ok {
				delete(in.running, pid)
				delete(in.ids, id)
			} else {
				in.early[pid] = ws
			}
			in.mu.Unlock()
			if ok {
				// A command's session may live on in its children; they
				// die with it, as its process group.
				unix.Kill(-pid, unix.SIGKILL)
				sendReply(initFd, reply{ID: id, Done: true, Exit: exitCode(ws), Signal: endSignal(ws)})
			}
		}
	}
}

// exitCode is a shell's view of a wait status: the exit code, or 128 plus
// the signal.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// endSignal is the signal that ended a process, 0 if it exited: the
// gateway tells a command killed by a signal from one that exited with
// 128 plus it by itself.
func endSignal(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return int(ws.Signal())
	}
	return 0
}

// asBashWould adds to env what bash -c adds when it execs a lone command
// in its own place: the working folder, the shell level it had (0 when
// unset) and the program's path.
func asBashWould(env []string, dir, path string) []string {
	out := make([]string, 0, len(env)+3)
	out = append(out, "PWD="+dir)
	level := "0"
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "PWD="), strings.HasPrefix(kv, "_="):
			continue
		case strings.HasPrefix(kv, "SHLVL="):
			level = kv[len("SHLVL="):]
			continue
		}
		out = append(out, kv)
	}
	return append(out, "SHLVL="+level, "_="+path)
}

// prlimitPath runs a command under rlimits when the jail has no cgroup.
const prlimitPath = "/usr/bin/prlimit"

// lookPath finds a command in the PATH of its environment.
func lookPath(name string, env []string) (string, error) {
	if filepath.IsAbs(name) || filepath.Base(name) != name {
		return name, nil
	}
	path := Path
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, errNotFound)
}

// initTrees are the detached mounts the setup message carried (see
// startTrees), -1 for each it did not.
type initTrees struct{ ws, image, home int }

// buildRoot makes the jail's filesystem and pivots into it, and returns
// the shell the root has for command lines ("" if none). The root is a
// tmpfs holding read-only binds of the system folders, or the image's
// root (image_linux.go); then come the workspace, a private /tmp, the
// home, a minimal /dev with its own devpts, and a /proc of the jail's pid
// namespace. Nothing else of the host is reachable afterwards.
//
// t.ws, if not -1, is the workspace as a detached mount (a jail forked
// from a Base, where s.Workspace is not mounted); t.image the image's
// root, t.home the home's folder. Each is attached, and closed.
func buildRoot(s setup, t initTrees) (string, error) {
	// Mounts made here must not propagate back to the host. (From a Base
	// every mount is private already.)
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return "", fmt.Errorf("make / a slave: %w", err)
	}
	wsFd := t.ws
	if wsFd < 0 {
		// The workspace is held open before the new root goes over /tmp,
		// where it may live.
		var err error
		wsFd, err = unix.Open(s.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open the workspace %s: %w", s.Workspace, err)
		}
	}
	defer unix.Close(wsFd)
	for _, fd := range []int{t.image, t.home} {
		if fd >= 0 {
			defer unix.Close(fd)
		}
	}
	// The new root, or the stage it is built on: a tmpfs over /tmp of
	// this namespace (a mount point, as pivot_root wants).
	stage, root := "/tmp", "/tmp"
	var shell string
	if t.image < 0 {
		if err := unix.Mount("jail", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
			return "", fmt.Errorf("mount the root tmpfs: %w", err)
		}
		for _, dir := range s.ReadOnly {
			if err := bindReadOnly(root, dir); err != nil {
				return "", err
			}
		}
		if s.Nameserver != "" {
			if err := bindResolvConf(root, s.Nameserver); err != nil {
				return "", err
			}
		}
		for _, dir := range []string{Workspace, Tmp, Home} {
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				return "", err
			}
		}
		rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open the jail's root: %w", err)
		}
		shell = findShell(rootFd)
		unix.Close(rootFd)
	} else {
		// The stage holds the image's root and the files made for it:
		// room for the image's passwd and group and the jail's lines.
		size := strconv.Itoa(2*maxImageFile + 1<<20)
		if err := unix.Mount("jail", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size="+size); err != nil {
			return "", fmt.Errorf("mount the stage tmpfs: %w", err)
		}
		root = filepath.Join(stage, "root")
		var err error
		if shell, err = stageImage(s, t.image, stage, root); err != nil {
			return "", err
		}
	}
	ws := filepath.Join(root, Workspace)
	if t.ws >= 0 {
		// The bind was made by the gateway (cloneWorkspace): it only
		// needs a place.
		if err := unix.MoveMount(t.ws, "", unix.AT_FDCWD, ws, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return "", fmt.Errorf("attach the workspace: %w", err)
		}
	} else if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(wsFd), ws, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind the workspace: %w", err)
	}
	// The bind copied the host mount's flags, nosymfollow among them
	// (fs/hostview.go). This remount sets the flags anew, without it:
	// links are followed inside the jail (node_modules/.bin, git, build
	// tools), where above /workspace there is only the jail's own root.
	if err := unix.Mount("", ws, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return "", fmt.Errorf("remount the workspace nosuid: %w", err)
	}
	if err := unix.Mount("tmp", filepath.Join(root, Tmp), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+strconv.FormatInt(s.TmpBytes, 10)); err != nil {
		return "", fmt.Errorf("mount /tmp: %w", err)
	}
	if err := mountHome(s, t.home, filepath.Join(root, Home)); err != nil {
		return "", err
	}
	if err := buildDev(filepath.Join(root, "dev")); err != nil {
		return "", err
	}
	proc := filepath.Join(root, "proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return "", err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", fmt.Errorf("mount /proc: %w", err)
	}
	if t.image >= 0 {
		// The image's root is read-only already, and has no folder for
		// the old root.
		if err := pivotInPlace(root); err != nil {
			return "", err
		}
	} else if err := pivotTmpfs(root); err != nil {
		return "", err
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return "", fmt.Errorf("set hostname: %w", err)
		}
	}
	return shell, nil
}

// mountHome mounts the jail's home at dir: the home's folder (tree, a
// detached mount) with the workspace's flags, or without one a tmpfs of
// the jail's user, bounded as /tmp is.
func mountHome(s setup, tree int, dir string) error {
	if tree < 0 {
		opts := fmt.Sprintf("mode=0755,uid=%d,gid=%d,size=%d", s.UID, s.GID, s.TmpBytes)
		if err := unix.Mount("home", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount %s: %w", Home, err)
		}
		return nil
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the home: %w", err)
	}
	// As the workspace's: no set-id or device files, and links followed.
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount the home nosuid: %w", err)
	}
	return nil
}

// pivotTmpfs makes the tmpfs root the calling process's root, with the
// host's root detached, and makes it read-only: only the mounts on it
// are written.
func pivotTmpfs(root string) error {
	old := filepath.Join(root, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// bindResolvConf puts a resolv.conf naming only the given server over
// the jail's /etc/resolv.conf (the host's, bound read-only). Where that is
// a link, it is followed inside the jail's root, as the jail's programs
// will: the file they read is the one covered.
func bindResolvConf(root, server string) error {
	src := filepath.Join(root, ".resolv.conf")
	if err := os.WriteFile(src, []byte(nameserverResolvConf(server)), 0o644); err != nil {
		return fmt.Errorf("write the jail's resolv.conf: %w", err)
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the jail's root: %w", err)
	}
	defer unix.Close(rootFd)
	target, err := unix.Openat2(rootFd, "etc/resolv.conf", &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("the jail's /etc/resolv.conf (it must lead to a file in the jail's root): %w", err)
	}
	defer unix.Close(target)
	if err := unix.Mount(src, "/proc/self/fd/"+strconv.Itoa(target), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the jail's resolv.conf: %w", err)
	}
	// The remount needs the path to the new mount's root: the descriptor
	// leads to the file under it.
	at, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(target))
	if err != nil {
		return fmt.Errorf("the jail's resolv.conf: %w", err)
	}
	if err := unix.Mount("", at, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount the jail's resolv.conf read-only: %w", err)
	}
	return nil
}

// nameserverResolvConf is a resolv.conf naming only server.
func nameserverResolvConf(server string) string {
	return "# warren: the daemon answers this jail's name queries\nnameserver " + server + "\noptions edns0\n"
}

// loopbackUp brings up lo, the only interface of the jail's own network
// namespace: programs that talk to themselves over 127.0.0.1 (test
// servers, language servers) work, and nothing leaves the jail.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// bindReadOnly makes the host folder dir appear read-only at the same path
// under root. A symlink (/bin -> usr/bin on a merged /usr) is copied as a
// symlink; a missing folder is skipped.
func bindReadOnly(root, dir string) error {
	st, err := os.Lstat(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	dst := filepath.Join(root, dir)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(dir)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dir, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", dir, err)
	}
	return nil
}

// buildDev makes a minimal /dev: the harmless character devices bound
// from the host, a devpts of the jail's own, and the usual links.
func buildDev(dev string) error {
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("dev", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, name)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+name, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.MkdirAll(pts, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.MkdirAll(shm, 0o1777); err != nil {
		return err
	}
	return unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=16m")
}
