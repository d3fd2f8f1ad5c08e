#!/usr/bin/env bash
# Slow uploads: 10,000 raw uploads attempted against one thread, each
# sending a byte every few seconds (under the body timeout), while another
# thread writes, binds and runs commands. Prints what was refused and
# taken, whether the other thread's calls all succeeded, and the daemon's
# descriptors against its open-file limit (issue 29). See bench/README.md.
#
# Environment:
#   BENCH_SLOW_UPLOADS  uploads attempted (default 10000)
#   BENCH_SLOW_WORKERS  attempted at once (default 256)
#   BENCH_SLOW_NOFILE   the daemon's hard open-file limit (default 20000)
#   BENCH_DIR           where the work folder goes (default /var/tmp)
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work slowbench

say "building"
"$GO" build -o bin/slowbench ./bench/slowbench
CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren
"$GO" build -o bin/warrend ./cmd/warrend

sock=$work/data/warren.sock
# The daemon raises its soft limit to the hard one: set the hard one.
(ulimit -Hn "${BENCH_SLOW_NOFILE:-20000}" && exec bin/warren serve --data "$work/data" --socket "$sock" --disk-image off --log-level error) </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

# The client needs a descriptor per upload held at once.
ulimit -n "$(ulimit -Hn)"
mkdir -p bench/out
report=bench/out/slowuploads-$(date +%Y%m%d-%H%M%S).txt
bin/slowbench -socket "$sock" -pid "$warren_pid" -uploads "${BENCH_SLOW_UPLOADS:-10000}" -workers "${BENCH_SLOW_WORKERS:-256}" | tee "$report"
say "report written to $report"
