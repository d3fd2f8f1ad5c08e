// Package integration holds warren's end-to-end tests: a real warren
// binary, started as a daemon on a real data folder, with real FUSE
// mounts and a real Badger store, driven the way users drive it (the CLI,
// the socket API, ordinary file I/O on the mount paths).
//
// The tests need root and /dev/fuse. Where they are missing the tests
// skip, except under CI=true, where they fail.
package integration
