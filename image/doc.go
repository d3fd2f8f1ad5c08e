// Package image is the daemon's content-addressed OCI image store: it
// pulls images from registries (or loads them from tar files) and keeps
// each, unpacked, as one read-only tree that a thread's jail binds as its
// root.
//
// # What it promises
//
//   - An image is known by its platform manifest's digest. Its tree is
//     Dir/roots/<hex>, its record Dir/roots/<hex>.json. A tree is visible
//     (Lookup, List, Pull's answer) only once whole: it is unpacked in
//     Dir/tmp, synced, renamed into place, and then its record written.
//     Open removes whatever a killed process left in Dir/tmp, and a tree
//     without record.
//   - A tree is never written once finished. Remove and Collect take it
//     away whole (renamed out first); the caller checks that no thread
//     uses it.
//   - Nothing in an image leads out of its tree: unpack_linux.go's rules
//     (names beneath a descriptor through no link, absolute links made
//     relative, devices skipped, set-id bits and xattrs dropped,
//     whiteouts applied, bombs bounded).
//   - Every blob is checked against its digest (and each layer's tar
//     against its diff ID) before the image is finished.
//   - A pull dials only public addresses, or the exact address a
//     registry named in Config.Registries resolves to (transport.go), and
//     speaks plain HTTP only to such a registry on loopback. A registry
//     not named, when some are, is refused before any request.
//   - Concurrent pulls of one reference resolve it once; concurrent pulls
//     and loads of one image download and unpack it once (flight.go). The
//     work ends when its last caller has gone.
//
// # Errors
//
// Every failure wraps one of ErrStoreFull, ErrNotAllowed, ErrRefused or
// ErrNotFound when it is one of those, so the daemon branches with
// errors.Is; the message says which layer, which entry, which bound.
// Other errors (a disk's, the network's) are wrapped with what was being
// done.
//
// # Locks
//
// flights.mu (one per group: resolves, pulls) may be held while taking
// Store.mu, never the other way. Store.mu guards the maps and the records
// on disk, and is held while a record is written. A flight's pmu is held
// while its progress callbacks run: they must not block, nor call Pull.
//
// # Phases of a pull
//
// resolve (the reference to the platform manifest, in a flight keyed by
// reference), then in a flight keyed by digest: the config, the store's
// bound against the compressed sizes, the download of the layers into
// the work folder (each checked), the unpack (each layer checked again as
// it is read, and against its diff ID), the mount points, sync, rename,
// record. See build.go.
package image
