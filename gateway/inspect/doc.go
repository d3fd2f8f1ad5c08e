// Package inspect is the room of inspection mounts: a thread's workspace
// served a second time at a folder of the caller's choosing (POST, GET
// and DELETE /v1/mounts), read-only unless asked otherwise, remembered in
// the metadata store and served again at every start.
//
// # What it promises
//
//   - An inspection mount covers only the folder its caller asked for and
//     may cover: the path is walked once from "/" without following links
//     (RESOLVE_NO_SYMLINKS) nor entering a FUSE mount, every check is made
//     on the descriptors of that walk (not the data or workspaces folder
//     nor inside them, owned by the caller's uid unless it is root, no
//     mount root, empty), and the mount is made onto the final descriptor
//     (fs.Target), so a link swapped into a parent meanwhile changes
//     nothing (dir_linux.go).
//   - The same checks hold at every start (Restore): a record whose folder
//     no longer passes them, or whose thread is gone, is dropped and
//     logged, never covered; what a crashed run left at the path is
//     detached first, through its own descriptor.
//   - No two inspection mounts are at, inside or around one another.
//   - A mount is unmounted through its own descriptor, wherever its folder
//     went since, and nothing else is unmounted; Unmount answers once it is
//     out of the mount table, and says inUse when it still serves processes
//     after Config.UnmountDrain. A thread's lock is held only while a mount
//     is detached, which never waits for the filesystem.
//   - After Close no mount is added; after Drain none is put back, and
//     every record stays for the next start.
//
// # What it owns and calls
//
// Inspections owns the set of mounts by path (with the reservations of
// mounts being made and the mounts a start failed to make) and its
// closed and drained flags. It reads and writes the inspection records
// and reads bindings in the store (Config.Store), and calls the threads
// through Threads: their lock, the lazy bind, the trusted workspace
// folder, and the mount itself. It imports no other room. The daemon
// calls UnmountAllOf in a thread's delete, DetachStale for the mounts a
// deleted thread's former run left, Restore at start, and Close and Drain
// at its stop. It holds no goroutine.
//
// # Lock order
//
// A thread's lock (Threads.Lock), then inspectionSet.mu. inspectionSet.mu
// is a leaf: held over map work only, never over a mount, an unmount, a
// store call or a thread lock. A path is reserved in the set before the
// thread lock is taken, so a second request for it is refused at once.
package inspect
