// Package toolserver builds and runs the servers that warren's tests
// (internal/testenv) and benchmarks (bench/) need beside a daemon: each is
// built from a Go module of its own under tools/, so that the server's
// dependencies stay out of warren's go.mod, and cached in the
// repository's bin/. It holds what does not need a test: the build, a
// child process tied to its parent, and the S3-compatible server
// (StartS3); package testenv wraps them for tests.
package toolserver
