// Package gateway is warren's daemon: it gives every (tenant, thread) its own
// workspace, serves it as a FUSE mount, remembers the binding in the metadata
// store, and answers an HTTP/1.1 + JSON API on a Unix socket.
//
// # What it promises
//
//   - One folder per thread. WorkspaceRoot encodes each id into one path
//     component; two different pairs never share a folder, and nothing lands
//     outside the base folder (a refusal, never a clamp).
//   - Bind is lazy, idempotent and not remembered when it fails. The first
//     call that needs a thread binds it; binding a bound thread returns the
//     same binding; a failed bind leaves no record, no mount and no folder
//     it created.
//   - A record that says "bound" while no mount serves it is a valid state
//     (a mount failed at start, or an unmount succeeded but the record update
//     did not): the next call that needs the thread mounts it again.
//   - Destructive steps never trust a stored path: the folder that delete
//     removes is recomputed from the ids, and it is removed only after every
//     mount of it is gone.
//   - Only allowed peers talk to the API: the socket is mode 0660, and every
//     connection's peer uid (SO_PEERCRED) must be this process's uid, root,
//     or listed in Config.AllowUIDs.
//   - Shutdown unmounts everything and keeps every record, so a restart
//     serves the same threads again. Start first detaches the stale mounts a
//     crashed daemon leaves behind.
//
// # Layout
//
// Everything lives under Config.DataDir:
//
//	meta/                          the metadata store (Badger), opened by the caller
//	workspaces/<tenant>/<thread>   backing folders (mode 0700 above them: only
//	                               the daemon reaches them, agents use the mount)
//	mnt/<tenant>/<thread>          FUSE mount points of bound threads
//	warren.sock                    the API socket, unless Config.SocketPath says otherwise
//
// # Lock order
//
// A thread lock (one per ThreadKey, see keyedLocks) is taken first and held
// across the slow steps of an operation on that thread: mounting, store
// writes, removing folders. Gateway.mu is a leaf: it guards the in-memory
// maps only and is never held across a mount, an unmount, a store call or a
// filesystem call. keyedLocks.mu is a leaf too, held only to find or drop a
// thread's lock. There is no global lock held during a mount, so threads
// bind in parallel.
//
// # Errors
//
// Functions wrap each step's error with the step ("mount workspace: %w").
// Callers, and the API's single error writer, branch with errors.Is on the
// package's sentinels (ErrInvalid, ErrNotFound, ErrConflict, ErrPinned,
// ErrBusy, ErrClosed) and on meta's; everything else is an internal error.
// Every refusal is logged with the thread and the path.
package gateway
