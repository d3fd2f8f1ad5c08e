#!/usr/bin/env bash
# Image benchmark (per-thread images): the pull and unpack of an image of
# about 100 MiB from a loopback registry, skopeo copy + umoci unpack
# against warren image pull; a new thread's first command and a warm
# command on the image against on the host's folders; and the disk one
# image takes for 100 threads against a copy per thread. Side by side with
# the ratio, medians of several runs. See bench/README.md.
#
# Environment:
#   BENCH_IMAGE_RUNS    timed pulls of each side (default 5)
#   BENCH_IMAGE_MIB     about how many MiB the image unpacks to (default 100)
#   BENCH_IMAGE_FIRSTS  new threads of each root for the first command (default 20)
#   BENCH_IMAGE_EXECS   warm commands of each root (default 200)
#   BENCH_IMAGE_MANY    threads bound on the image for the disk figure (default 100)
#   BENCH_DIR           where the work folder goes (default /var/tmp): both
#                       sides' trees, the daemon's data folder
#   BENCH_LOOPFS        1 (the default, as root): the work folder is a new
#                       ext4 of its own, in a sparse image on BENCH_DIR's disk
#                       (see bench/README.md); 0: BENCH_DIR's own filesystem
#   BENCH_LOOPFS_GIB    that image's size in GiB (default 8; sparse)
#   BENCH_WARREN        a warren binary to measure instead of building ./cmd/warren
#                       and ./cmd/warrend
#
# The registry (bin/imagebench -registry, in memory, on a loopback port)
# and the daemon this script starts are stopped by their pids on exit and
# every mount under the work folder is detached, whether the run succeeds
# or not.
set -euo pipefail
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_work imagebench
bench_loopfs

# skopeo and umoci are what warren's pull is held against; Debian's, as
# the Makefile's DEPS are installed for the tests: only as root.
native_off=
missing=
for p in skopeo umoci; do command -v "$p" >/dev/null || missing="$missing $p"; done
if [[ -n $missing ]]; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		say "installing$missing"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1; } ||
			native_off="$missing could not be installed"
	else
		native_off="missing:$missing (apt-get install$missing, or run as root)"
	fi
fi
[[ -e /usr/bin/busybox ]] || { say "busybox-static is needed for the image's shell (make deps installs it)"; exit 1; }

say "building"
"$GO" build -o bin/imagebench ./bench/imagebench
warren=${BENCH_WARREN:-bin/warren}
[[ -n ${BENCH_WARREN:-} ]] || { CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren && "$GO" build -o bin/warrend ./cmd/warrend; }

# The registry first: the daemon refuses a loopback registry it is not
# told of (--registries).
bin/imagebench -registry -addr-file "$work/registry.addr" </dev/null >"$work/registry.log" 2>&1 &
bench_pids+=($!)
for _ in $(seq 100); do
	[[ -s $work/registry.addr ]] && break
	is_child "${bench_pids[0]}" || { say "registry exited: $(tail -n 1 "$work/registry.log")"; exit 1; }
	sleep 0.1
done
[[ -s $work/registry.addr ]] || { say "no registry within 10 s"; exit 1; }
registry=$(cat "$work/registry.addr")

sock=$work/data/warren.sock
"$warren" serve --data "$work/data" --socket "$sock" --disk-image off --registries "$registry" </dev/null >"$work/warren.log" 2>&1 &
warren_pid=$!
wait_socket "$sock"

rootless=()
[[ $(id -u) == 0 ]] || rootless=(-rootless)
mkdir -p bench/out "$work/native"
report=bench/out/image-$(date +%Y%m%d-%H%M%S).txt
# In the background, waited for: a signal then stops it at once (bash runs
# a trap only once the foreground command is done), first of the pids.
bin/imagebench -registry-addr "$registry" -socket "$sock" -data "$work/data" -warren "$warren" -work "$work/native" \
	-runs "${BENCH_IMAGE_RUNS:-5}" -mib "${BENCH_IMAGE_MIB:-100}" -firsts "${BENCH_IMAGE_FIRSTS:-20}" \
	-execs "${BENCH_IMAGE_EXECS:-200}" -many "${BENCH_IMAGE_MANY:-100}" ${native_off:+-native-unavailable "$native_off"} \
	"${rootless[@]}" > >(tee "$report") &
bench_pids=("$!" "${bench_pids[@]}")
wait "${bench_pids[0]}"
say "report written to $report"
