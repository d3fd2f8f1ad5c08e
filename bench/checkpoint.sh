#!/usr/bin/env bash
# Checkpoint benchmark: a checkpoint of a 100,000-file workspace with 10
# files changed, against git add -A && git commit of the same tree with
# the same changes, and both after an untar of Go's source tree, side by
# side in one run; then a checkpoint and a restore of a 20 GiB sparse file
# with 1 MiB of data, against cp --sparse=always; then another thread's
# one-file checkpoint, alone and while a checkpoint of the tenant is held
# after it took its locks (as a 30 s one would be) and a collection is
# due (BenchmarkCheckpointBesideCollection, target under 100 ms). See
# bench/README.md.
#
# Environment:
#   BENCH_CP_RUNS   timed runs of the small-change measure (default 9)
#   BENCH_CP_FILES  files in the big workspace (default 100000)
#   BENCH_CP_SPARSE_RUNS  timed runs of the 20 GiB sparse file (default 3; 0 skips)
#   BENCH_DIR       where the work folder goes; the disk under test, not
#                   tmpfs (default /var/tmp)
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work cpbench

command -v git >/dev/null || { say "git is needed"; exit 1; }

say "building"
"$GO" build -o bin/cpbench ./bench/cpbench
CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren
"$GO" build -o bin/warrend ./cmd/warrend

# The everything-changed tree: Go's own src, as bench/fs.sh uses it.
tarball=$work/go-src.tar
tar -C "$("$GO" env GOROOT)" -cf "$tarball" src

sock=$work/data/warren.sock
bin/warren serve --data "$work/data" --socket "$sock" --disk-image off </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

mkdir -p bench/out "$work/git"
report=bench/out/checkpoint-$(date +%Y%m%d-%H%M%S).txt
bin/cpbench -socket "$sock" -work "$work/git" -repo "$work/data/snapshots/bench" -runs "${BENCH_CP_RUNS:-9}" -files "${BENCH_CP_FILES:-100000}" -tar "$tarball" -pid "$warren_pid" -sparse-runs "${BENCH_CP_SPARSE_RUNS:-3}" | tee "$report"

say "one-file checkpoint beside a held checkpoint and a due collection"
CI=true "$GO" test -count=1 -run '^$' -bench 'BenchmarkCheckpointBesideCollection' -benchtime 20x ./gateway | grep -E 'Benchmark|ms/checkpoint' | tee -a "$report"
say "report written to $report"
