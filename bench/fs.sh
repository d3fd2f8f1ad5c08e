#!/usr/bin/env bash
# Filesystem benchmark: native ext4, go-fuse's stock loopback, warren,
# warren with its edit checks off (a second daemon, serve --no-edit-checks)
# and warren with its FUSE requests untimed (a third, serve
# --no-fs-metrics), side by side in one run. See bench/README.md.
#
# Environment:
#   BENCH_RUNS     timed runs per workload and system (default 5)
#   BENCH_DIR      where the work folder goes; must be the disk under test,
#                  not tmpfs (default /var/tmp)
#   BENCH_SEQ_MIB  size of the sequential file in MiB (default 1024)
#   BENCH_ONLY     comma-separated subset of workloads (see bin/fsbench -h)
#   BENCH_LOOPFS   1 (the default, as root): the work folder is a new ext4 of
#                  its own, in an image file on BENCH_DIR's disk (loop device,
#                  direct I/O); 0: the work folder is on BENCH_DIR's own filesystem
#   BENCH_LOOPFS_GIB  the image's size in GiB (default 32; sparse)
#   BENCH_KEEP=1   keep the work folder afterwards
#   BENCH_WARREN   a warren binary to measure instead of building ./cmd/warren and
#                  ./cmd/warrend (its serve runs the warrend beside it, else on PATH)
#                  (without --no-edit-checks, the checks-off root is unavailable)
#
# Everything this script starts is stopped by its pid on exit, and every
# mount under the work folder is detached, whether the run succeeds or not.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
runs=${BENCH_RUNS:-5}
seq_mib=${BENCH_SEQ_MIB:-1024}
base=${BENCH_DIR:-/var/tmp}

say() { echo "bench: $*" >&2; }

work=$(mktemp -d "$base/warren-bench.XXXXXX")
fsbench_pid=
loop_pid=
warren_pid=
warren_mnt=
warren_off_pid=
warren_off_mnt=
warren_nm_pid=
warren_nm_mnt=
reader_pid=
warren_ur_pid=
warren_ur_mnt=
ur_reader_pid=
uring_was=
loopdev=
img=

# is_child PID: PID is still a running child of this script (not exited,
# and not a pid reused by someone else after our child exited).
is_child() {
	local stat
	stat=$(awk '{ print $3, $4 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $stat != Z* && ${stat#* } == "$$" ]]
}

# stop_pid PID NAME: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
	local pid=$1 name=$2
	is_child "$pid" || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 100); do
		is_child "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.1
	done
	say "$name (pid $pid) did not stop within 10 s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

cleanup() {
	local status=$?
	set +e
	[[ -n $fsbench_pid ]] && stop_pid "$fsbench_pid" "fsbench"
	[[ -n $warren_pid ]] && stop_pid "$warren_pid" "warren daemon"
	[[ -n $warren_off_pid ]] && stop_pid "$warren_off_pid" "warren daemon (checks off)"
	[[ -n $reader_pid ]] && stop_pid "$reader_pid" "event reader"
	[[ -n $warren_nm_pid ]] && stop_pid "$warren_nm_pid" "warren daemon (no fs metrics)"
	[[ -n $warren_ur_pid ]] && stop_pid "$warren_ur_pid" "warren daemon (uring)"
	[[ -n $ur_reader_pid ]] && stop_pid "$ur_reader_pid" "event reader (uring)"
	# enable_uring back as it was, if this run turned it on.
	[[ -n $uring_was ]] && echo "$uring_was" >/sys/module/fuse/parameters/enable_uring
	[[ -n $loop_pid ]] && stop_pid "$loop_pid" "loopback"
	for m in "$warren_mnt" "$warren_off_mnt" "$warren_nm_mnt" "$warren_ur_mnt"; do
		if [[ -n $m && $m != "$work"/* ]] && mountpoint -q "$m" 2>/dev/null; then
			umount -l "$m"
		fi
	done
	for m in $(mounts_under "$work"); do
		[[ $m == "$work" && -n $loopdev ]] && continue # the bench's own ext4, below
		say "detaching leftover mount $m"
		umount -l "$m"
	done
	if [[ -n $(mounts_under "$work" | grep -vxF "$work") ]]; then
		say "mounts remain under $work; not removing it"
	elif [[ ${BENCH_KEEP:-} == 1 ]]; then
		say "kept $work${loopdev:+ (the ext4 of $img on $loopdev: umount it, then losetup -d $loopdev)}"
	else
		# The daemons' mount points are immutable (chattr +i).
		chattr -i "$work"/*-data/mnt/*/* 2>/dev/null
		if [[ -n $loopdev ]]; then
			umount "$work" || umount -l "$work"
			losetup -d "$loopdev"
			rm -f "$img"
			rmdir "$work"
		else
			rm -rf "$work"
		fi
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The native root must be a real disk: the whole point is to compare with it.
fstype=$(findmnt -n -o FSTYPE -T "$work")
if [[ $fstype == tmpfs || $fstype == ramfs ]]; then
	say "$work is on $fstype; set BENCH_DIR to a folder on the disk under test"
	exit 1
fi
# The work folder is an ext4 of its own, made for this run, on the same
# disk: what the rest of the machine deletes must not slow the creates
# measured here. An ext4 without a journal (this VM's root) skips, when
# it allocates an inode, every inode freed in the last minute (five while
# their table block is dirty), one lookup each: after a large removal,
# half of a FUSE untar's time went there (perf: recently_deleted), and
# it varied with the clock. A new ext4 has a journal and no past.
if [[ ${BENCH_LOOPFS:-1} != 0 ]]; then
	if [[ $(id -u) == 0 ]] && command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null; then
		img=$work.img
		truncate -s "${BENCH_LOOPFS_GIB:-32}G" "$img"
		# Every inode table and the journal written now, not by a kernel thread
		# during the first runs.
		mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img"
		loopdev=$(losetup --find --show --direct-io=on "$img")
		mount "$loopdev" "$work"
		say "work folder is a new ext4 on $loopdev (the sparse image $img)"
	else
		say "note: not root, or no losetup/mkfs.ext4: the work folder is on the disk's own filesystem (BENCH_LOOPFS=0)"
	fi
fi
fstype=$(findmnt -n -o FSTYPE -T "$work")
source=$(findmnt -n -o SOURCE -T "$work")
if [[ $fstype == tmpfs || $fstype == ramfs ]]; then
	say "$work is on $fstype; set BENCH_DIR to a folder on the disk under test"
	exit 1
fi
say "work folder $work ($fstype on $source)"
if [[ $source != "$(findmnt -n -o SOURCE -T .)" ]]; then
	say "note: the repository is on $(findmnt -n -o SOURCE -T .), the work folder on $source"
fi
if [[ $(id -u) != 0 ]]; then
	say "note: not root: caches cannot be dropped and mounts need fusermount3"
fi

say "building"
"$GO" build -o bin/fsbench ./bench/fsbench
"$GO" build -o bin/bench-loopback ./bench/loopback

say "making the source tarball"
tar -C "$("$GO" env GOROOT)" -cf "$work/gosrc.tar" src

mkdir "$work/native" "$work/loop-backing" "$work/loop-mnt"

# (b) go-fuse's stock loopback.
loop_args=(-loopback "$work/loop-mnt")
bin/bench-loopback "$work/loop-backing" "$work/loop-mnt" </dev/null >"$work/loopback.log" 2>&1 &
loop_pid=$!
for _ in $(seq 100); do
	grep -q '^mounted$' "$work/loopback.log" && break
	kill -0 "$loop_pid" 2>/dev/null || break
	sleep 0.1
done
if ! grep -q '^mounted$' "$work/loopback.log"; then
	why=$(tail -n 1 "$work/loopback.log")
	say "loopback: unavailable (${why:-no mount within 10 s})"
	loop_args=(-loopback-unavailable "${why:-no mount within 10 s}")
fi

# (c) warren: a daemon of our own, one bound thread, the workload in its mount.
# (d) the same with the edit checks off: a second daemon, started with
# --no-edit-checks, with its own data folder and socket. The two differ in
# that flag alone, so their ratio is what the checks cost.
# (e) the same with its FUSE requests untimed and no event reader: a third
# daemon, started with --no-fs-metrics, while the first has a reader of
# the thread's events (so it builds file events), so the ratio is what the
# fs metrics and the file events cost together.
# (f) the same as (c), a reader of its events too, with its mounts served
# over FUSE over io_uring (--fuse-transport uring): the ratio between the
# two is what the transport changes. The fuse module's enable_uring is
# turned on for the run, as root, and back off at the end.
warren_args=()
warren_off_args=()
warren_nm_args=()
warren_ur_args=()
warren=${BENCH_WARREN:-bin/warren}
# warren_unavailable SIDE WHY: the report says why SIDE (on, off, nm) is not measured.
warren_unavailable() {
	case $1 in
	on)
		say "warren: unavailable ($2)"
		warren_args=(-warren-unavailable "$2")
		;;
	off)
		say "warren (checks off): unavailable ($2)"
		warren_off_args=(-warren-off-unavailable "$2")
		;;
	nm)
		say "warren (no fs metrics): unavailable ($2)"
		warren_nm_args=(-warren-nometrics-unavailable "$2")
		;;
	ur)
		say "warren (uring): unavailable ($2)"
		warren_ur_args=(-warren-uring-unavailable "$2")
		;;
	esac
}
# start_warren SIDE: start the daemon for SIDE (on: as shipped; off: with
# --no-edit-checks), bind a thread in it and pass its mount to fsbench. Its
# pid and mount are recorded at once, for cleanup.
start_warren() {
	local side=$1 name=warren tag=warren pidvar=warren_pid mntvar=warren_mnt
	local serve_args=() data sock out pid mnt
	case $side in
	off)
		name="warren (checks off)" tag=warren-off pidvar=warren_off_pid mntvar=warren_off_mnt
		serve_args=(--no-edit-checks)
		;;
	nm)
		name="warren (no fs metrics)" tag=warren-nm pidvar=warren_nm_pid mntvar=warren_nm_mnt
		serve_args=(--no-fs-metrics)
		;;
	ur)
		name="warren (uring)" tag=warren-ur pidvar=warren_ur_pid mntvar=warren_ur_mnt
		serve_args=(--fuse-transport uring)
		;;
	esac
	data=$work/$tag-data sock=$work/$tag-data/warren.sock
	"$warren" serve --data "$data" --socket "$sock" --disk-image off "${serve_args[@]}" </dev/null >"$work/$tag.log" 2>&1 &
	pid=$!
	printf -v "$pidvar" %s "$pid"
	for _ in $(seq 150); do
		[[ -S $sock ]] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if ! kill -0 "$pid" 2>/dev/null; then
		warren_unavailable "$side" "daemon exited: $(tail -n 1 "$work/$tag.log")"
		return
	fi
	if [[ ! -S $sock ]]; then
		warren_unavailable "$side" "no socket at $sock within 15 s"
		return
	fi
	if ! out=$(WARREN_SOCKET=$sock "$warren" bind --thread bench 2>"$work/$tag-bind.err"); then
		warren_unavailable "$side" "bind failed: $(tail -n 1 "$work/$tag-bind.err")"
		return
	fi
	mnt=$(tail -n 1 <<<"$out")
	printf -v "$mntvar" %s "$mnt"
	if [[ -z $mnt ]] || ! mountpoint -q "$mnt"; then
		warren_unavailable "$side" "bind printed '$mnt', which is not a mount point"
		return
	fi
	say "$name: daemon pid $pid, thread mounted at $mnt"
	if [[ $side == on ]]; then
		# A reader of the thread's events, so the daemon builds its file
		# events as it would for a harness that follows them; the third
		# daemon has none, and no FUSE timing: the ratio is what both cost.
		WARREN_SOCKET=$sock "$warren" events --thread bench >/dev/null 2>"$work/reader.err" </dev/null &
		reader_pid=$!
	fi
	if [[ $side == ur ]]; then
		WARREN_SOCKET=$sock "$warren" events --thread bench >/dev/null 2>"$work/ur-reader.err" </dev/null &
		ur_reader_pid=$!
	fi
	case $side in
	on) warren_args=(-warren "$mnt") ;;
	off) warren_off_args=(-warren-off "$mnt") ;;
	nm) warren_nm_args=(-warren-nometrics "$mnt") ;;
	ur) warren_ur_args=(-warren-uring "$mnt") ;;
	esac
}
# uring_on: turn the fuse module's enable_uring on for this run (root
# only), remembering its value in uring_was for cleanup. It fails, saying
# why in uring_why, if the kernel lacks it. Called in this shell, never in
# $(...): a subshell's uring_was is lost, and the run would leave
# enable_uring on.
uring_param=/sys/module/fuse/parameters/enable_uring
uring_why=
uring_on() {
	[[ -r $uring_param ]] || { uring_why="this kernel has no FUSE over io_uring ($uring_param)"; return 1; }
	local was
	was=$(cat "$uring_param")
	[[ $was == Y ]] && return 0
	[[ $(id -u) == 0 ]] || { uring_why="enable_uring is off and only root may turn it on"; return 1; }
	echo Y >"$uring_param" || { uring_why="could not turn on $uring_param"; return 1; }
	uring_was=$was
}
if [[ -z ${BENCH_WARREN:-} ]] && ! { CGO_ENABLED=0 "$GO" build -o bin/warren ./cmd/warren && "$GO" build -o bin/warrend ./cmd/warrend; } 2>"$work/warren-build.log"; then
	why="build failed: $(grep -v '^#' "$work/warren-build.log" | head -n 1)"
	warren_unavailable on "$why"
	warren_unavailable off "$why"
	warren_unavailable nm "$why"
	warren_unavailable ur "$why"
else
	start_warren on
	start_warren off
	start_warren nm
	if uring_on; then
		start_warren ur
	else
		warren_unavailable ur "$uring_why"
	fi
fi

mkdir -p bench/out
report=bench/out/fs-$(date +%Y%m%d-%H%M%S).txt
# In the background and waited for, so that a signal to this script is
# handled at once (the trap stops fsbench too) rather than after the run.
bin/fsbench -tar "$work/gosrc.tar" -runs "$runs" -seq-mib "$seq_mib" ${BENCH_ONLY:+-only "$BENCH_ONLY"} \
	-native "$work/native" "${loop_args[@]}" "${warren_args[@]}" "${warren_off_args[@]}" "${warren_nm_args[@]}" "${warren_ur_args[@]}" -out "$report" &
fsbench_pid=$!
rc=0
wait "$fsbench_pid" || rc=$?
fsbench_pid=
exit "$rc"
