#!/usr/bin/env bash
# Checkpoint benchmark: a checkpoint of a 100,000-file workspace with 10
# files changed, against git add -A && git commit of the same tree with
# the same changes, and both after an untar of Go's source tree, side by
# side in one run. See bench/README.md.
#
# Environment:
#   BENCH_CP_RUNS   timed runs of the small-change measure (default 9)
#   BENCH_CP_FILES  files in the big workspace (default 100000)
#   BENCH_DIR       where the work folder goes; the disk under test, not
#                   tmpfs (default /var/tmp)
#
# The daemon this script starts is stopped by its pid on exit and every
# mount under its data folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
base=${BENCH_DIR:-/var/tmp}

say() { echo "bench: $*" >&2; }

work=$(mktemp -d "$base/warren-cpbench.XXXXXX")
warren_pid=

is_child() {
	local stat
	stat=$(awk '{ print $3, $4 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $stat != Z* && ${stat#* } == "$$" ]]
}

cleanup() {
	local status=$?
	set +e
	if [[ -n $warren_pid ]] && is_child "$warren_pid"; then
		kill -TERM "$warren_pid"
		for _ in $(seq 300); do is_child "$warren_pid" || break; sleep 0.1; done
		is_child "$warren_pid" && kill -KILL "$warren_pid"
		wait "$warren_pid" 2>/dev/null
	fi
	for m in $(awk -v d="$work" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
		say "detaching leftover mount $m"
		umount -l "$m"
	done
	# The daemon's mount points are immutable (chattr +i).
	chattr -i "$work"/data/mnt/*/* 2>/dev/null
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v git >/dev/null || { say "git is needed"; exit 1; }

say "building"
"$GO" build -o bin/cpbench ./bench/cpbench
CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren
"$GO" build -o bin/warrend ./cmd/warrend

# The everything-changed tree: Go's own src, as bench/fs.sh uses it.
tarball=$work/go-src.tar
tar -C "$("$GO" env GOROOT)" -cf "$tarball" src

sock=$work/data/warren.sock
bin/warren serve --data "$work/data" --socket "$sock" </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
for _ in $(seq 150); do
	[[ -S $sock ]] && break
	kill -0 "$warren_pid" 2>/dev/null || { say "daemon exited: $(tail -n 1 "$work/warren.log")"; exit 1; }
	sleep 0.1
done
[[ -S $sock ]] || { say "no socket at $sock within 15 s"; exit 1; }

mkdir -p bench/out "$work/git"
report=bench/out/checkpoint-$(date +%Y%m%d-%H%M%S).txt
bin/cpbench -socket "$sock" -work "$work/git" -repo "$work/data/snapshots/bench" -runs "${BENCH_CP_RUNS:-9}" -files "${BENCH_CP_FILES:-100000}" -tar "$tarball" | tee "$report"
say "report written to $report"
