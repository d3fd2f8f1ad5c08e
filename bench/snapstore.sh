#!/usr/bin/env bash
# Snapshot store benchmark (issue 35): two daemons in one run, one that
# keeps its checkpoints in its local folder (the default) and one that
# copies them to an S3-compatible store in the background (serve
# --snapshots s3://...), the store a SeaweedFS server on loopback that this
# script starts (the tests' server, built from tools/s3 into bin/ the
# first time). bench/snapbench measures, on both: a checkpoint of 10 of
# 100,000 files changed (target <= 20 ms, with the store too) and the
# first checkpoints of 100,000 files; and, on the store's daemon, the
# time from each checkpoint's answer to its replicated: true. See
# bench/README.md.
#
# Environment:
#   BENCH_SNAP_RUNS        timed runs of the 10-changed checkpoint (default 9)
#   BENCH_SNAP_FIRST_RUNS  first checkpoints, a 100,000-file tree each, on
#                          each daemon (default 3)
#   BENCH_SNAP_FILES       files in a big workspace (default 100000)
#   BENCH_DIR              where the work folder goes; the disk under test,
#                          not tmpfs (default /var/tmp)
#   BENCH_LOOPFS, BENCH_LOOPFS_GIB  as for bench/lib.sh's bench_loopfs
#                          (default here 24 GiB: 2 x 3 big workspaces and
#                          their repositories, sparse)
#
# The daemons and the S3 server (by the pid of snapbench -serve-s3, which
# kills the server by its pid and removes its sockets in /tmp; the server
# also dies with it) are stopped on exit, every mount under the work
# folder is detached and the folder removed, whether the run succeeds or
# not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work snapstore
BENCH_LOOPFS_GIB=${BENCH_LOOPFS_GIB:-24} bench_loopfs

say "building"
"$GO" build -o bin/snapbench ./bench/snapbench
CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren
"$GO" build -o bin/warrend ./cmd/warrend

# The S3 server first: the store's daemon checks its bucket at start. A
# build of the server from an empty build cache takes about 8 minutes.
say "starting the S3 server (built into bin/ first if need be)"
bin/snapbench -serve-s3 "$work/s3" -bucket warren -addr-file "$work/s3.addr" </dev/null >"$work/s3.log" 2>&1 &
bench_pids+=($!)
for _ in $(seq 12000); do
	[[ -s $work/s3.addr ]] && break
	is_child "${bench_pids[0]}" || { say "S3 server exited: $(tail -n 3 "$work/s3.log")"; exit 1; }
	sleep 0.1
done
[[ -s $work/s3.addr ]] || { say "no S3 server within 20 minutes"; exit 1; }
mapfile -t s3 <"$work/s3.addr"
bench_files+=("${s3[@]:4}")
say "S3 server at ${s3[0]}"

local_sock=$work/local/warren.sock
bin/warren serve --data "$work/local" --socket "$local_sock" --disk-image off </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$local_sock"

store_sock=$work/store/warren.sock
AWS_ACCESS_KEY_ID=${s3[1]} AWS_SECRET_ACCESS_KEY=${s3[2]} \
	bin/warren serve --data "$work/store" --socket "$store_sock" --disk-image off \
	--snapshots "s3://warren/bench?endpoint=${s3[0]}&region=us-east-1&insecure=1" </dev/null >"$work/warren-store.log" 2>&1 &
# Stopped first, before the S3 server it copies to.
bench_pids=("$!" "${bench_pids[@]}")
wait_socket "$store_sock" "${bench_pids[0]}" "$work/warren-store.log"

mkdir -p bench/out
report=bench/out/snapstore-$(date +%Y%m%d-%H%M%S).txt
bin/snapbench -local "$local_sock" -local-repo "$work/local/snapshots/bench" \
	-store "$store_sock" -store-repo "$work/store/snapshots/bench" -s3-pid "${s3[3]}" \
	-runs "${BENCH_SNAP_RUNS:-9}" -first-runs "${BENCH_SNAP_FIRST_RUNS:-3}" -files "${BENCH_SNAP_FILES:-100000}" | tee "$report"
say "report written to $report"
