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
//     uncompressed bytes (Hash). A blob is a file's content, a link's
//     target or one data extent of a sparse file; an extent map is a
//     sparse file's layout; a tree is a folder's entries (name, kind,
//     mode, size, hash),
//     sorted, in one canonical encoding (tree.go), so one folder is one
//     hash and unchanged subtrees are shared by every tree that holds them.
//     Owners, times, xattrs and hard links are not kept.
//   - Dedup: an object in place (loose, or in a log of this Repo's) is
//     never written again; a loose one is never replaced, unless crash
//     recovery finds it fails its hash. One found only in another
//     process's log is written again, and placed loose once.
//   - Compression: zstd at its fastest level, kept only where it makes the
//     object at most 7/8 of its size; files over 1 MiB are streamed (never
//     held whole), and their first MiB decides.
//   - Checked reads: OpenBlob checks the content against its hash at the
//     end, ReadTree before decoding; a tree is validated strictly (sorted
//     unique valid names, known kinds, sane modes and sizes) and corrupt
//     data is an error, never a panic. OpenFile checks an extent map
//     before decoding and each extent's blob at its end and against its
//     extent's length; Apply, TextDiff and Collect read through these, so
//     nothing is restored or compared unchecked.
//   - Sparse files stay sparse (sparse.go): a file with holes is stored
//     as an extent map (its size, and the offset, length and blob of each
//     data extent), found with lseek SEEK_DATA/SEEK_HOLE; only the data
//     is read and hashed, never a hole. Its entry says so (Entry.Sparse,
//     its own kind byte), so no file's content is ever taken for a map.
//     Apply hands such a file to the Target as SparseContent, which
//     writes only the data at its offsets of a file cut to its size.
//     Files without holes are one blob, as before maps existed, and trees
//     without a sparse file encode as before: old repositories read
//     alike, and dedup spans them.
//   - Durability before return: every object a Build wrote is durable
//     when Build returns, so the caller may record the tree at once: its
//     new objects are appended to one log, which is fsync'ed once with
//     its folder (below). An object a Build found in place is durable
//     too: a loose object is, or the log it came from is still there.
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
// # Copying objects elsewhere
//
// raw.go gives what a copy to another store needs (package
// snapshot/replica builds on it): Objects lists every object a tree
// reaches, each once, a folder's tree before its entries; ReadRaw and
// OpenRaw read an object in its stored form (its file's bytes: format
// byte and payload), checked against its hash as every read is, so that
// an upload needs no recompression; PutRaw and PutRawStream write objects
// fetched from elsewhere, each checked against its hash before anything
// of it is kept, to one log fsync'ed once, as a Build writes (below).
// Has tells whether an object is in place as dedup sees it.
//
// # Layout
//
//	DIR/objects/<2 hex>/<62 hex>   the loose objects; the 256 folders are made by Open
//	DIR/tmp/log-<16 hex>           build logs: objects durable, not yet loose
//	DIR/tmp/obj-<random>           loose objects being written, renamed into place
//	DIR/lock                       the collection lock (below)
//
// An object file is a format byte (0 raw, 1 zstd) and the payload. A log
// is a header (8 bytes: "wrnlog", 0, 1) and records, each the object's
// hash (32 bytes), its format byte, its payload's size (8 bytes, little
// endian) and the payload (log.go). A crash leaves at most logs, which
// are recovered (below), and obj- files in tmp/, which Open and Collect
// remove once they are an hour old (another daemon may be writing the
// newer ones).
//
// # Build logs and spreading
//
// A Build writes each new object (compressed where that pays) to one
// log, in large buffered writes, made at its first new object; a build
// with nothing new makes none. At its end it fdatasyncs the log and
// fsyncs tmp/ (the log's name): that is the durability point, after
// which Build publishes the log's records in the Repo's index (hash to
// log, offset, size) and returns. No object file is made on Build's
// path. A Build that fails removes its log: nothing names its objects.
//
// The Repo's spreader (spread.go) then turns each published log into
// loose objects, written without fsync and never replacing one in place;
// checks each record against its hash on the way; makes what it placed,
// and what it found in place, durable in one go (durable_linux.go: up to
// 32 objects fsync'ed in parallel with their fan-out folders; more, one
// syncfs, which costs what everything dirty on the filesystem costs, off
// every caller's path); then removes the log and forgets its records. It
// spreads in one pass every log published since its last one. A log it
// cannot spread (a full disk) stays published and readable, and is tried
// again after a pause; one whose records fail their check stays too,
// nothing of it lost, until Close leaves it to the next Open.
//
// Where to find an object (pending.go): loose; else in this Repo's
// index; else in the logs of other processes in tmp/, whose records it
// reads (and remembers, reading only what was added since); else loose
// once more (a spreader places an object before it lets go of its log);
// else ErrNotFound. Every read checks what it reads against the hash,
// wherever it comes from. Dedup looks at this build's log, the index and
// the loose objects, not at other processes' logs: an object found only
// there is written again, and spread once.
//
// # Several processes, and crashes
//
// Daemons on several machines may share one repository folder, each
// with its own Repo (one process may also hold several Repos of one
// folder: they behave as processes do). A log's owner holds flock
// LOCK_EX on it from before its first record until it has removed it,
// spread; a new log is locked, then checked to be still the file of its
// name, before anything is written to it. So a log nobody holds locked
// was left by a process that ended without spreading it: a crash, a
// kill, or a Close whose last pass failed. Open (before it returns) and
// Collect spread such logs, holding their locks: records are checked
// against their hashes, and a log is cut at its last good record (a torn
// last record, a size past the end, a hash that does not match); only a
// log whose fsync completed was ever named by a checkpoint, and all its
// records are whole. A loose object that such a log holds is checked
// too, and replaced by the log's copy where it fails (a crash before it
// was made durable may have left it torn). A log another process holds
// is never spread nor removed by this one; its objects are read from it.
//
// # Collection and its lock
//
// Collect removes every object no live root reaches (a sparse file's
// map and its extents' blobs included: the map is read to mark them),
// beside the checkpoints rather than in front of them. Every reader and writer of
// objects holds the lock shared (Shared) from its first object read or
// write until its record is stored. Collect marks without the lock: it
// calls the caller's live function, marks what the roots reach and lists
// the loose objects not marked (the candidates), while checkpoints run.
// Then it sweeps in short turns, each holding the lock exclusive: it
// calls live again, marks what the roots added since reach (only the
// new trees are read), keeps what any log holds, and removes the other
// candidates, for 20 ms at most (collectHold), then lets go and comes
// back for the rest. So an object is removed only at a moment when no
// checkpoint is between its first object use and its record, and no
// root listed at that moment reaches it: a checkpoint that found it in
// place (dedup) before has its root among those listed, one that looks
// after finds it gone and writes it again. Build, Apply, Diff, ReadTree
// and OpenBlob do not take the lock themselves: the caller holds it
// across the whole operation and its record. Collect fails closed: a
// failing live function, or a missing or corrupt tree below a root,
// removes nothing more.
//
// The exclusive lock is asked for with LOCK_NB and asked again after a
// backoff of 1 to 5 ms, never queued: a collection that waits for a slow
// checkpoint keeps no other checkpoint waiting (a Shared caller waits
// only while a sweep holds the lock). The other side of that choice: a
// tenant whose checkpoints overlap without a gap delays the sweeps (its
// garbage stays on disk) until they leave the lock free for a moment.
//
// Logs and collection: Collect first waits until this Repo's logs
// published before it started are spread, and spreads the logs crashed
// processes left; each sweep keeps every object a log still holds
// (other processes' logs, and logs of this Repo's not yet spread),
// reachable or not: a spreader may be placing them. The spreaders take
// no lock: what they place is either in a log a sweep read, or reachable
// from a root it marked. Shared is not reentrant: a goroutine holding it
// must not take it again, nor call Collect (Collect's sweep would wait
// for it forever).
//
// The lock is flock(2) on DIR/lock, on an open file description of its
// own per call, so it works alike between goroutines and between
// processes (daemons sharing a disk). Blocking flock cannot be canceled:
// Shared too asks with LOCK_NB and asks again after a backoff of 1 to
// 25 ms, until granted or ctx ends (lock_linux.go). (DIR/gate, the
// turnstile of older versions, is no longer used.)
//
// # Limits
//
// A Build reads at most Limits: so many entries listed or looked at
// again, folders so deeply nested, so many bytes of file content
// (WithLimits; a million, 512 and 16 GiB by default). Past one it fails
// with a *LimitError (errors.Is ErrLimit) naming the limit and its
// value, and its log is removed: nothing of it is left.
//
// # Errors
//
// Errors are wrapped with the step that failed and the path or object
// concerned, prefixed "snapshot:". Callers branch with errors.Is on
// ErrNotFound (an object the repository does not hold) and ErrCorrupt (an
// object that fails its hash, does not decompress, or is not a valid tree
// or extent map; the error names the object),
// and on ctx's errors.
//
// # Goroutines
//
// A Repo owns one goroutine, its spreader: started by Open, stopped by
// Close, which lets it spread what is left in a last pass and waits for
// it to end. The spreader starts makeDurable's fsync workers (at most 8
// at a time) and waits for them. No Build, read or Collect starts one. A
// Repo may be used from any number of goroutines at once: its tree cache
// has its own mutex, its index of logs Repo.mu, what it read of other
// processes' logs a mutex of its own (never held with Repo.mu), and the
// zstd encoders and decoders are pooled per Repo (synchronous ones,
// without goroutines) and released by Close.
//
// # Memory
//
// A Repo that has worked keeps two encoders, two decoders and two 1 MiB
// buffers (about 11 MiB) and its tree cache (8 MiB at most by default,
// WithTreeCache); a build holds one folder's entries per level of depth,
// the descriptors of the folders it is in (at most 512 deep: Limits), its log's
// 1 MiB write buffer and its records' index (about 100 bytes an object,
// kept until the log is spread: 10 MiB for a first build of 100,000
// files). A pending log holds a descriptor open until it is spread.
package snapshot
