#!/usr/bin/env bash
# Command benchmark: /bin/true by plain fork+exec, through warren's API in
# a warm jail, through the warren CLI (`warren exec -- true`, the binary run
# each time) in the same jail, and by one bubblewrap call, side by side in
# one run; and the first command of a new thread. Then the TypeScript
# provider (clients/typescript) on the same daemon: its exec('true') beside
# the Go client's warm `true`, and its fs.read of a 4 KiB file against
# node's fs.readFile on the mount path. See bench/README.md.
#
# Environment:
#   BENCH_EXEC_RUNS  timed runs of each warm measure (default 200)
#   BENCH_DIR        where the daemon's data folder goes (default /var/tmp)
#   BENCH_WARREN     a warren binary to measure instead of building ./cmd/warren
#                    and ./cmd/warrend (its serve runs the warrend beside it,
#                    else on PATH)
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
runs=${BENCH_EXEC_RUNS:-200}
bench_work execbench

if ! command -v bwrap >/dev/null; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		say "installing bubblewrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1; } ||
			say "bubblewrap could not be installed; it is left out"
	fi
fi

say "building"
"$GO" build -o bin/execbench ./bench/execbench
warren=${BENCH_WARREN:-bin/warren}
# The CLI as make build makes it: without cgo (see the Makefile).
[[ -n ${BENCH_WARREN:-} ]] || { CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren && "$GO" build -o bin/warrend ./cmd/warrend; }

sock=$work/data/warren.sock
"$warren" serve --data "$work/data" --socket "$sock" --disk-image off </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

mkdir -p bench/out
report=bench/out/exec-$(date +%Y%m%d-%H%M%S).txt
bin/execbench -socket "$sock" -warren "$warren" -runs "$runs" -daemon-pid "$warren_pid" -job-runs "${BENCH_JOB_RUNS:-5}" -threads "${BENCH_THREADS:-1000}" | tee "$report"

# The TypeScript provider against the same daemon, with the Go client's
# warm `true` of the report above beside its own.
if command -v node >/dev/null && command -v npm >/dev/null; then
	say "building the TypeScript client"
	(cd clients/typescript && { [[ -d node_modules ]] || npm ci --silent; } && npm run --silent build) >&2
	go_warm=$(awk '/^warren, warm jail / { print $4, $5, $6 }' "$report")
	node clients/typescript/dist/bench/bench.js --socket "$sock" --runs "$runs" --go-warm "$go_warm" | tee -a "$report"
else
	say "node or npm is missing: the TypeScript provider is not measured"
fi
say "report written to $report"
