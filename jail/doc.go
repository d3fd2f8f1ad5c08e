// Package jail is the per-thread sandbox in which warren runs an agent's
// commands: new mount, pid, ipc and uts namespaces, an unprivileged uid,
// no capabilities, seccomp, Landlock and limits, with the thread's mount
// as the only writable tree at /workspace.
//
// Where each part lives:
//
//   - jail.go, init_linux.go, protocol.go: Start re-executes the binary
//     (which calls RunInit when IsInit) in new mount, pid, ipc, uts and (by
//     default) network namespaces. The init builds a root of its own
//     (read-only binds of DefaultReadOnly, the thread's mount at
//     /workspace, bound without the host mount's nosymfollow so links are
//     followed inside, a private /tmp, a minimal /dev with its own devpts, a
//     /proc of the jail's pid namespace), pivots into it, sets
//     no_new_privs, empties the capability bounding set, applies Landlock
//     and the seccomp filter, and then starts each command it is sent over
//     a SOCK_SEQPACKET socket pair (stdin, stdout and stderr come as
//     descriptors, or it opens a terminal of the jail's devpts) in a
//     session of its own, as the jail's uid.
//   - env.go: the whole environment a command gets.
//   - script.go: a command line of plain words is started the way bash -c
//     would start it, without starting bash first.
//   - limits_linux.go: memory, process and CPU limits, a cgroup per jail
//     (v2 or v1), rlimits through prlimit(1) where there is no cgroup (no
//     CPU bound there: a jail asked for one refuses to start).
//   - tree_linux.go: each command's processes in a cgroup of their own,
//     entered at the fork, so a command's whole tree is signalled and
//     ended as one, daemons that left its session too. The init itself
//     is in a command's tree for the moment of its fork: Run signals a
//     tree only once the init has answered Started or Done for it, or a
//     hang-up that early would kill the init and the whole jail.
//   - seccomp_linux.go, landlock_linux.go: the filters.
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
// The gateway runs one jail per bound thread (gateway/exec.go) and its
// background jobs in it (gateway/jobs.go).
package jail
