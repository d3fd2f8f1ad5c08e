// Package snapshot is the repository of workspace checkpoints: a
// content-addressed store of files and folders, the builder that stores a
// workspace folder as a tree (whole, or as the changes since a tree), the
// differ between two trees and the planner that restores one through the
// daemon's filesystem. It keeps no metadata (which checkpoint is which
// tree): the caller records the hashes Build returns. It imports nothing
// of warren.
//
// # What it promises
//
//   - Content addressing: an object is named by the SHA-256 of its
//     uncompressed bytes (Hash). A blob is a file's content or a link's
//     target; a tree is a folder's entries (name, kind, mode, size, hash),
//     sorted, in one canonical encoding (tree.go), so one folder is one
//     hash and unchanged subtrees are shared by every tree that holds them.
//     Owners, times, xattrs and hard links are not kept.
//   - Dedup: an object in place is never written again, nor replaced.
//   - Compression: zstd at its fastest level, kept only where it makes the
//     object at most 7/8 of its size; files over 1 MiB are streamed (never
//     held whole), and their first MiB decides.
//   - Checked reads: OpenBlob checks the content against its hash at the
//     end, ReadTree before decoding; a tree is validated strictly (sorted
//     unique valid names, known kinds, sane modes and sizes) and corrupt
//     data is an error, never a panic.
//   - Durability before return: every object a Build wrote, or found in
//     place but recent enough to be another build's not yet durable, is
//     durable when Build returns, so the caller may record the tree at
//     once (durable_linux.go: up to 32 objects are fsync'ed in parallel
//     with their fan-out folders; more, one syncfs).
//   - A safe walk: Build opens every entry with openat2 below its folder's
//     descriptor, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//     RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, files O_NOFOLLOW |
//     O_NONBLOCK: it never follows a symlink (it stores the link), never
//     leaves the folder, never crosses a mount (a mount point, bind mounts
//     included, is left out with what is below it), and a fifo never
//     blocks it. Kind and mode come from the fstat of the opened
//     descriptor; an entry that changed kind since its lstat is looked at
//     again, one that vanished is left out: an agent deleting files at the
//     wrong moment never fails a build. Fifos, sockets, devices and the
//     names the skip rule names (WithSkip; DefaultSkip: the daemon's
//     .warren-write- files) are left out.
//   - Incremental cost: a Build from a base tree reads only the changed
//     paths and re-encodes only the folders on them; a tree's header
//     carries the totals below it, so even its stats need no walk.
//   - Restore by plan: Diff lists what makes one tree another; Apply drives
//     it through a Target (the daemon's filesystem, under its locks) in an
//     order that converges when run again after a crash.
//
// # Layout
//
//	DIR/objects/<2 hex>/<62 hex>   the objects; the 256 folders are made by Open
//	DIR/tmp/                       objects being written, renamed into place
//	DIR/lock                       the collection lock (below)
//	DIR/gate                       its turnstile
//
// An object file is a format byte (0 raw, 1 zstd) and the payload. A crash
// leaves at most files in tmp/, which Open and Collect remove once they
// are an hour old (another daemon may be writing the newer ones).
//
// # Collection and its lock
//
// Collect removes every object no live root reaches. It is safe because
// every reader and writer of objects holds the lock shared (Shared) from
// its first object read or write until its record is stored, and Collect
// holds it exclusive from before it asks the caller for the live roots
// until its sweep is done. So a checkpoint either stored its record before
// the collection asked (its root is live, its objects marked) or starts
// after the collection ended (the objects it finds in place, and its base
// tree read from the records, are all still there). Build, Apply, Diff,
// ReadTree and OpenBlob do not take the lock themselves: the caller holds
// it across the whole operation and its record. Collect fails closed: a
// failing live function, or a missing or corrupt tree below a root,
// removes nothing. Shared is not reentrant: a goroutine holding it must
// not take it again, nor call Collect (a collection waiting between the
// two would wait for the first while the second waits for it).
//
// The lock is flock(2) on DIR/lock, on an open file description of its
// own per call, so it works alike between goroutines and between
// processes (daemons sharing a disk). Collect first takes DIR/gate
// exclusive, and Shared passes it shared, so a collection waiting for
// the holders to finish keeps new ones out and is not starved. Blocking
// flock cannot be canceled: both ask with LOCK_NB and ask again after a
// backoff of 1 to 25 ms, until granted or ctx ends (lock_linux.go).
//
// # Errors
//
// Errors are wrapped with the step that failed and the path or object
// concerned, prefixed "snapshot:". Callers branch with errors.Is on
// ErrNotFound (an object the repository does not hold) and ErrCorrupt (an
// object that fails its hash, does not decompress or is not a valid tree),
// and on ctx's errors.
//
// # Goroutines
//
// A Repo starts no goroutine of its own and keeps none running. The only
// ones are makeDurable's fsync workers (at most 8 per Build), which the
// Build that starts them waits for before it returns. A Repo may be used
// from any number of goroutines at once: its tree cache has its own mutex,
// the zstd encoders and decoders are pooled per Repo (synchronous ones,
// without goroutines) and released by Close.
//
// # Memory
//
// A Repo that has worked keeps two encoders, two decoders and two 1 MiB
// buffers (about 11 MiB) and its tree cache (8 MiB at most by default,
// WithTreeCache); a build holds one folder's entries per level of depth,
// and the descriptors of the folders it is in (at most 512 deep).
package snapshot
