#!/usr/bin/env bash
# A thread moving to another server (issue 35): two daemons on one etcd
# cluster and one S3 store, each with a data folder of its own; host A
# checkpoints BENCH_MOVE_THREADS threads of BENCH_MOVE_FILES files each
# (12,000 by default), dies, and loses its disk; host B
# (--on-unreachable restore) takes each over at its first command, which
# waits for the fetch and the restore of the last copied checkpoint. The
# figure is that first command's time against a git clone (file://) of the
# same tree from a bare repository on the same disk. It runs as a Go
# benchmark of the integration package (BenchmarkMove), with the tests'
# etcd and S3 servers (built into bin/ the first time), which its
# cleanup stops by their pids, with the daemons and their mounts; the
# work folder and its ext4 go on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
# The daemons' data folders and git's trees on a new ext4 of their own
# (bench_loopfs: what the rest of the machine deletes would otherwise
# slow every create measured here).
bench_work move
bench_loopfs
say "a thread moving to another server (integration's BenchmarkMove)"
TMPDIR=$work "$GO" test ./integration -run '^$' -bench '^BenchmarkMove$' -benchtime 1x -count 1 -timeout 30m | grep -v -e '^goos:' -e '^goarch:' -e '^pkg:' -e '^cpu:' -e '^PASS' -e '^ok ' -e '^BenchmarkMove'
