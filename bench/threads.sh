#!/usr/bin/env bash
# Threads: 10,000 threads bound in one daemon on its default flags, as
# fast as one client can; then a file written to each and a command in
# 1,000 of them; then the daemon stopped and started again, and killed
# with -9 and started again, each timed to its first answer and a first
# exec (issue 29). Prints bind medians and p99, the daemon's memory,
# descriptors and OS threads per bound thread, and the restart times.
#
# Environment:
#   BENCH_THREADS        threads bound (default 10000)
#   BENCH_THREAD_EXECS   commands run, one per thread (default 1000)
#   BENCH_DIR            where the work folder goes (default /var/tmp)
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work threadbench

say "building"
"$GO" build -o bin/threadbench ./bench/threadbench
CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren
"$GO" build -o bin/warrend ./cmd/warrend

sock=$work/data/warren.sock
start_daemon() {
	bin/warren serve --data "$work/data" --socket "$sock" --disk-image off --log-level error </dev/null >>"$work/warren.log" 2>&1 &
	warren_pid=$!
}
# wait_serving prints how long the daemon took to answer /healthz and
# then to run a command in a bound thread.
wait_serving() {
	local t0=$1
	for _ in $(seq 600); do
		curl -sf --unix-socket "$sock" http://warren/healthz >/dev/null 2>&1 && break
		kill -0 "$warren_pid" 2>/dev/null || { say "daemon exited: $(tail -n 1 "$work/warren.log")"; exit 1; }
		sleep 0.05
	done
	local t1 t2
	t1=$(date +%s.%N)
	WARREN_SOCKET=$sock bin/warren exec --tenant bench --thread t0 -- true
	t2=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "  serving after %.2f s, first exec done after %.2f s\n", b - a, c - a }'
}

start_daemon
wait_serving "$(date +%s.%N)" >/dev/null
mkdir -p bench/out
report=bench/out/threads-$(date +%Y%m%d-%H%M%S).txt
# The block runs in this shell (a pipe would make it a subshell, which
# cannot wait for the daemon, a child of this one).
{
	bin/threadbench -socket "$sock" -pid "$warren_pid" -threads "${BENCH_THREADS:-10000}" -execs "${BENCH_THREAD_EXECS:-1000}"
	t0=$(date +%s.%N)
	kill -TERM "$warren_pid"
	wait "$warren_pid" 2>/dev/null || true
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "graceful stop: %.2f s\n", b - a }'
	echo "restart after a clean stop:"
	t0=$(date +%s.%N)
	start_daemon
	wait_serving "$t0"
	kill -KILL "$warren_pid"
	wait "$warren_pid" 2>/dev/null || true
	echo "restart after kill -9:"
	t0=$(date +%s.%N)
	start_daemon
	wait_serving "$t0"
} > >(tee "$report")
say "report written to $report"
