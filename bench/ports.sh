#!/usr/bin/env bash
# Ports benchmark: requests per second to a small HTTP server in a
# thread's jail, through the port's channel (the daemon's loopback
# listener, its token check and its reverse proxy) against straight to
# the jail's port (a connection made in the jail's network namespace, as
# the channel's are, without the proxy), side by side with the ratio,
# medians of several runs; with keep-alive and with a new connection per
# request. See bench/README.md.
#
# Environment:
#   BENCH_PORT_RUNS     runs of each measure (default 5)
#   BENCH_PORT_SECONDS  length of each run (default 2)
#   BENCH_PORT_CONNS    requests in flight at once (default 4)
#   BENCH_DIR           where the daemon's data folder goes (default /var/tmp)
#   BENCH_WARREN        a warren binary to measure instead of building ./cmd/warren
#                       and ./cmd/warrend
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work portbench

say "building"
# Static: it is copied into the jail and runs there as the server too.
CGO_ENABLED=0 "$GO" build -o bin/portbench ./bench/portbench
warren=${BENCH_WARREN:-bin/warren}
[[ -n ${BENCH_WARREN:-} ]] || { CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren && "$GO" build -o bin/warrend ./cmd/warrend; }

sock=$work/data/warren.sock
"$warren" serve --data "$work/data" --socket "$sock" --disk-image off </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

mkdir -p bench/out
report=bench/out/ports-$(date +%Y%m%d-%H%M%S).txt
bin/portbench -socket "$sock" -runs "${BENCH_PORT_RUNS:-5}" -seconds "${BENCH_PORT_SECONDS:-2}" -conns "${BENCH_PORT_CONNS:-4}" | tee "$report"
say "report written to $report"
