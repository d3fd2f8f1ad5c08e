// Package replica copies checkpoints of a snapshot repository to a store
// that other servers read (an S3 bucket, a folder on a shared disk), and
// back: Upload sends what a tree reaches, Fetch brings a tree into another
// server's repository. It knows nothing of threads nor checkpoints: the
// caller (the daemon) says which trees to send, in which order, what each
// is based on, and retries.
//
// # What it promises
//
//   - A manifest present means a whole tree: Upload writes a tree's
//     manifest after every pack it names is in the store, so a reader
//     that finds trees/<tree> finds every object of the tree.
//   - Few requests: small objects travel in packs of about 16 MiB, so
//     that a first checkpoint of 100,000 files is a PUT per 16 MiB of
//     what it holds, not 100,000 (20,000 files of 60 bytes: 3 PUTs);
//     trees and extent maps in packs of their own, apart from blobs.
//     An object over 4 MiB goes alone, streamed, never held whole.
//   - Only what is new: the objects that the packs of the bases'
//     manifests hold (UploadOptions.Bases: the previous checkpoint) are
//     not sent again; a tree whose manifest is in the store is not read.
//   - Resumable: packs are made alike from the same repository, tree and
//     bases, and a pack is sent only where the store lacks its name, so an
//     upload cut at any point (an error, kill -9) and run again sends only
//     the packs the store lacks.
//   - Checked both ways: an object is checked against its hash as it is
//     read for an upload, and again before a fetch keeps it; a pack's head
//     against the pack's name; a manifest against its sum line. Nothing
//     unchecked is kept, and a corrupt object in the store is an error
//     matching ErrCorrupt naming the pack and the object.
//   - Bounded memory: an upload holds at most the two packs it fills and
//     the Parallel ones it sends (16 MiB each by default), plus the set
//     of objects the tree reaches and where the bases' packs hold them
//     (about 200 bytes an object); a fetch the small objects of the packs
//     it reads, Parallel at a time, and the set of objects it lacks.
//
// # Layout of a store
//
//	packs/<64 hex>   a pack, named by the SHA-256 of its head (pack.go)
//	trees/<64 hex>   a tree's manifest: the packs that hold its objects (manifest.go)
//	holds/<time>-<r> manifests a collection deleted, kept a grace (sweep.go)
//
// A pack is a head (the hash, kind and size of each object it holds),
// then the objects in their stored form (snapshot.RawObject: the format
// byte and the payload, compressed as the repository keeps it, so nothing
// is recompressed). A manifest lists every pack that holds an object of
// its tree, whole: not as a change from another tree's (why: manifest.go).
//
// The Store interface is the five calls this needs of a store (Put, Get,
// Stat, List, Delete) over keys of one strict form, refused alike by every
// implementation (no "..", no hidden names): FolderStore (a folder, a Put
// being a temporary file fsync'ed and renamed) and S3Store (minio-go,
// NewS3's URL, the standard AWS credentials).
//
// # Upload, in order
//
//  1. Stat trees/<tree>: there, done.
//  2. Read the bases' manifests and their packs' heads (from the Cache
//     folder where they are there): which pack holds which object.
//  3. Walk the tree (snapshot.Repo.Objects): an object a base's pack holds
//     puts that pack in the new manifest; any other is read (checked)
//     into the next pack of its kind, which, full, goes to a sender.
//  4. Senders (Parallel of them) Stat each pack's name and Put it where
//     the store lacks it, then keep its head in the Cache. After a
//     failure no pack is begun, and those being sent are sent to their
//     end (none is canceled half-way: a run again finds them).
//  5. Once every pack is in: Put the manifest.
//
// The Cache folder (one per store, on the server's disk) holds the heads
// of the packs this server sent or read, as <pack hex> files checked
// against their names when read back: a cache lost costs reads of the
// store, never a wrong answer.
//
// # Fetch, in order
//
//  1. Walk the tree in the local repository: nothing missing, done.
//  2. Read the manifest. Where trees or extent maps are missing, read
//     the meta packs that hold ones the repository lacks, and store those
//     (snapshot.Repo.PutRaw: checked, then durable), then walk again: now
//     the walk lists exactly the blobs missing.
//  3. Read the packs that hold them (a pack whose cached head shows it
//     holds none is not read), keeping only those.
//
// # Collection
//
// Sweep is a mark and sweep over the store, for the daemon that knows
// which trees are live (every server's checkpoints): it deletes the
// manifests of dead trees, then the packs no manifest names. Three rules
// keep it safe beside uploads, on any server, and beside another sweep:
//
//   - A pack is written before the manifest that names it, so a pack no
//     manifest names may belong to an upload under way (or cut short, to
//     be resumed): only packs older than a grace period longer than any
//     upload go. An upload that finds a pack there already puts it again
//     when it is older than UploadOptions.Refresh, so that every pack it
//     names is young until its manifest is written (Refresh plus the
//     longest upload must stay under the grace).
//   - An upload reuses the packs of its bases' manifests, read at its
//     start: a manifest deleted is first written, whole, into a hold
//     record (holds/…), which keeps its packs a grace past the delete.
//   - A tree dead when the sweep listed the live ones may be live again
//     when it deletes its manifest (a checkpoint of the same content,
//     whose upload found the manifest there): the sweep lists the live
//     trees again after its deletes and puts such manifests back from
//     its hold record, as does the next sweep after a crash.
//
// Sweep's doc has the steps and the argument. Any error listing or
// reading stops it before it deletes more: it fails closed. It also
// removes what Puts cut short left (S3 multipart uploads, a folder's
// temporary files) once older than the grace. Packs partly live stay
// whole; repacking their live objects is not done.
//
// # Errors
//
// Errors say the step and the key, prefixed "replica:". Callers branch
// with errors.Is on ErrNotFound (a key the store lacks, a tree without a
// manifest), ErrCorrupt (what the store holds fails its checks; an
// object's error matches snapshot.ErrCorrupt too), and ctx's errors;
// other errors (the network, a full disk) are worth a retry.
//
// # Goroutines
//
// Upload starts Parallel senders, and up to 4×Parallel goroutines to
// read the heads of its bases' packs; Fetch up to Parallel readers of
// packs. All end before they return. Stores start none of their own but
// the HTTP client's connections.
package replica
