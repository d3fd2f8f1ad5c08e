#!/usr/bin/env bash
# Egress network benchmark (issue 32): a jail in network egress against
# the host, to an "outside" namespace the benchmark makes (internal/netenv's
# world, 198.51.100.0/24 on a veth): one TCP stream's throughput, the time
# of a TCP connect, and what network egress adds to a new thread's first
# command over network none; side by side with the ratio, medians of
# several runs. See bench/README.md.
#
# Environment:
#   BENCH_NET_RUNS      runs of the stream and connect measures (default 5)
#   BENCH_NET_MIB       MiB of one stream (default 512)
#   BENCH_NET_CONNECTS  connects per run (default 200)
#   BENCH_NET_THREADS   new threads of each network for the first command (default 20)
#   BENCH_DIR           where the daemon's data folder goes (default /var/tmp)
#   BENCH_WARREN        a warren binary to measure instead of building ./cmd/warren
#                       and ./cmd/warrend
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not;
# netbench takes its namespace and link away itself (on a signal too).
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work netbench

say "building"
# Static: it is copied into the jail and runs there as the client too.
CGO_ENABLED=0 "$GO" build -o bin/netbench ./bench/netbench
warren=${BENCH_WARREN:-bin/warren}
[[ -n ${BENCH_WARREN:-} ]] || { CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren && "$GO" build -o bin/warrend ./cmd/warrend; }

# The jails' resolver asks a loopback port nobody listens on: the bench
# uses addresses only, and no query leaves the machine.
sock=$work/data/warren.sock
"$warren" serve --data "$work/data" --socket "$sock" --disk-image off --egress-dns 127.0.0.1:9 </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

mkdir -p bench/out
report=bench/out/net-$(date +%Y%m%d-%H%M%S).txt
bin/netbench -socket "$sock" -runs "${BENCH_NET_RUNS:-5}" -bytes $((${BENCH_NET_MIB:-512} << 20)) \
	-connects "${BENCH_NET_CONNECTS:-200}" -threads "${BENCH_NET_THREADS:-20}" | tee "$report"
say "report written to $report"
