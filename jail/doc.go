// Package jail is the per-thread sandbox in which warren runs an agent's
// commands: new mount, pid, ipc and uts namespaces, an unprivileged uid,
// no capabilities, seccomp, Landlock and limits, with the thread's mount
// at /workspace and its home at /home/agent as the only writable trees
// that outlive the jail. Its root is the host's system folders, read-only,
// or an image's root filesystem, read-only (Config.Image).
//
// Where each part lives:
//
//   - jail.go, init_linux.go, protocol.go: Start re-executes the binary
//     (which calls RunInit when IsInit) in new mount, pid, ipc, uts and (by
//     default) network namespaces. The init builds a root of its own
//     (read-only binds of DefaultReadOnly on a tmpfs, or an image's root;
//     the thread's mount at /workspace, bound without the host mount's
//     nosymfollow so links are followed inside, a private /tmp, the home
//     at /home/agent (Config.Home, or a tmpfs), a minimal /dev with its own
//     devpts, a /proc of the jail's pid namespace), pivots into it, finds
//     its shell (/bin/bash, else /bin/sh) and says which, sets
//     no_new_privs, empties the capability bounding set, applies Landlock
//     and the seccomp filter, and then starts each command it is sent over
//     a SOCK_SEQPACKET socket pair (stdin, stdout and stderr come as
//     descriptors, or it opens a terminal of the jail's devpts) in a
//     session of its own, as the jail's uid.
//   - base_linux.go: the mount namespace jails are forked from (Base), so
//     that a jail's start copies a few mounts, not one per thread the
//     daemon serves; the workspace then goes to the init as a detached
//     bind (open_tree), attached with move_mount. Config.Base nil forks
//     from the daemon's own namespace.
//   - image.go, image_linux.go: a root that is an image's filesystem. Its
//     folder, like the home's, goes to the init as a detached bind made in
//     the daemon's namespace, from a Base or not (the base hides the data
//     folder they live in): read-only, private, attached in a staging
//     tmpfs, its mount points checked, the jail's /etc/passwd, group,
//     hosts and resolv.conf bound over the image's, then pivot_root(".",
//     ".").
//   - env.go: the whole environment a command gets (an image's variables
//     below warren's).
//   - script.go: the shell of command lines, and a command line of plain
//     words started the way bash -c would start it, without starting bash
//     first.
//   - limits_linux.go: memory, process and CPU limits, a cgroup per jail
//     (v2 or v1), rlimits through prlimit(1) where there is no cgroup (no
//     CPU bound there: a jail asked for one refuses to start, and so does
//     a jail on an image).
//   - tree_linux.go: each command's processes in a cgroup of their own,
//     entered at the fork, so a command's whole tree is signalled and
//     ended as one, daemons that left its session too. The init itself
//     is in a command's tree for the moment of its fork: Run signals a
//     tree only once the init has answered Started or Done for it, or a
//     hang-up that early would kill the init and the whole jail.
//   - seccomp_linux.go, landlock_linux.go: the filters.
//   - netns_linux.go: the daemon's way into a jail's network (NetNS,
//     InNetNS, Dial): a socket made on a thread that entered the jail's
//     network namespace for the call, used from any thread after, in
//     every network mode (the jail's own loopback in "none").
//
// A jail dies with its gateway's process, whatever way that ends (kill -9
// too): the init ends when its socket to the gateway reaches its end of
// file (serve). The gateway's end is close-on-exec from its creation and
// never handed to a child, so no other process holds it past an exec, and
// the kernel closes it when the gateway's last thread exits. An end of
// file is a state, not an event: a gateway gone before the init's first
// read is seen there too. Not Pdeathsig: Linux sends the parent-death
// signal when the thread that forked the child exits, not its process, and
// the Go runtime ends a thread whenever a goroutine returns locked to it
// (the poll hack of fs/pollhack_linux.go does, on purpose): a jail forked
// on that thread was killed, with its jobs, under a live gateway.
//
// A jail whose init ended (Close, or killed) serves no more commands:
// Run returns ErrInitGone (exit 137 for a command that had started: the
// kernel killed it with the rest of the pid namespace), and Err says so
// at once, for the owner to start another jail.
//
// # Goroutines
//
// Each goroutine has an owner that ends it and waits for it, or, where
// it waits on the caller's reader, says so:
//
//   - The jail's reader (Jail.read) hands the init's replies to the
//     commands. Start starts it once the init is ready; it ends when the
//     init's end of the socket closes, which Close brings about by
//     killing the init, and Close waits for it.
//   - NewBase and a Start from a Base run their namespace work on a
//     goroutine locked to a thread it never unlocks, so the runtime ends
//     that thread with it (onDiscardedThread; never the main thread).
//   - Start itself leaves nothing running when it fails: a ctx that ends
//     before the init answered kills the init (context.AfterFunc), and
//     Start reaps it and removes its cgroup before it returns. ctx bounds
//     only the start: the jail Start returns lives until Close.
//   - Run's, for one command: the copies of its output (stdout, stderr,
//     a terminal's master) and the terminal's resizer, which Run waits
//     for before it returns (waitTimeout's helper ends with the copies);
//     and the feeder of its input, which copies Cmd.Stdin into the
//     command's stdin pipe or terminal. Run does not wait for the feeder,
//     as a Read cannot be interrupted: it ends at Stdin's end or error,
//     or at its first write after the command ended. A caller that must
//     see it end ends what its Stdin reads from.
//   - The init process's reaper (initState.reap) runs in the init for the
//     jail's whole life, and ends with it.
//
// # Locks
//
// Every lock of the package is a leaf: none is held while another is
// taken, nor while a caller's code runs (Cmd.Started, Cmd.Watch, the
// writers of the output):
//
//   - Jail.sendMu keeps the requests to the init whole and in order on
//     the socket;
//   - Jail.mu guards the commands waiting for replies, the runs of the
//     commands (RunOf) and whether the init is gone; the reader hands a
//     reply to its command only after it released it;
//   - Base.mu is held for reading while a thread enters the base (setns),
//     and for writing by Close;
//   - Jail.reapMu is held for writing while Close reaps the init, and for
//     reading while NetNS opens the init's namespace by its pid, so that
//     the pid is never another process's;
//   - cgroup.mu (limits_linux.go) guards the empty command trees kept for
//     reuse;
//   - in the init's own process, initState.mu is held across a command's
//     fork and the Started reply, so the reaper's Done for it never comes
//     first.
//
// The gateway runs one jail per bound thread, and the thread's
// background jobs in it.
package jail
