# Sourced by the bench scripts (after `cd` to the repository): what each
# of them needs to start one daemon and leave nothing behind.
#
#   bench_work NAME   makes the work folder $work under BENCH_DIR (default
#                     /var/tmp) and sets the traps: on exit the daemon
#                     ($warren_pid, if set) is stopped by its pid, every
#                     mount under $work is detached and $work removed,
#                     whether the run succeeded or not; so is every pid
#                     in $bench_pids (other children: a registry...),
#                     before the daemon; then every path in $bench_files
#                     (what a child leaves outside $work: sockets in
#                     /tmp...)
#   bench_loopfs      (after bench_work) makes $work a new ext4 of its own,
#                     in a sparse image file beside it on the same disk
#                     (BENCH_LOOPFS_GIB, default 8; loop device, direct
#                     I/O), as root and unless BENCH_LOOPFS=0; unmounted
#                     and removed on exit. Why: bench/README.md, and
#                     bench/fs.sh, which does the same
#   wait_socket SOCK [PID LOG]
#                     waits up to 15 s for the daemon ($warren_pid, or PID
#                     whose output is LOG) to make its socket
#   say ...           prints a line of progress on stderr

GO=${GO:-go}
base=${BENCH_DIR:-/var/tmp}
warren_pid=
bench_pids=()
bench_files=()
loopdev=

say() { echo "bench: $*" >&2; }

# is_child says whether pid $1 is a live child of this shell: only those
# are ever signalled.
is_child() {
	local stat
	stat=$(awk '{ print $3, $4 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $stat != Z* && ${stat#* } == "$$" ]]
}

bench_cleanup() {
	local status=$?
	set +e
	for pid in "${bench_pids[@]}" $warren_pid; do
		is_child "$pid" || continue
		kill -TERM "$pid"
		for _ in $(seq 300); do is_child "$pid" || break; sleep 0.1; done
		is_child "$pid" && kill -KILL "$pid"
		wait "$pid" 2>/dev/null
	done
	for f in "${bench_files[@]}"; do
		rm -f "$f"
	done
	for m in $(awk -v d="$work" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
		say "detaching leftover mount $m"
		umount -l "$m"
	done
	# The daemon's mount points are immutable (chattr +i).
	chattr -i "$work"/data/mnt/*/* 2>/dev/null
	if [[ -n $loopdev ]]; then
		# The ext4 goes whole: no removal of its files on the disk.
		umount "$work" || umount -l "$work"
		losetup -d "$loopdev"
		rmdir "$work"
	else
		rm -rf "$work"
	fi
	rm -f "$work.img"
	exit "$status"
}

bench_work() {
	work=$(mktemp -d "$base/warren-$1.XXXXXX")
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# An ext4 without a journal (this VM's root) skips, when it allocates an
# inode, every inode freed in the last minute, one lookup each
# (recently_deleted): what the rest of the machine deletes (a test suite
# running meanwhile) slows every create measured here, by more than the
# measure itself. A new ext4 has a journal and no past.
bench_loopfs() {
	[[ ${BENCH_LOOPFS:-1} != 0 ]] || return 0
	if [[ $(id -u) != 0 ]] || ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
		say "note: not root, or no losetup/mkfs.ext4: the work folder is on the disk's own filesystem (BENCH_LOOPFS=0)"
		return 0
	fi
	truncate -s "${BENCH_LOOPFS_GIB:-8}G" "$work.img"
	# Every inode table and the journal written now, not by a kernel
	# thread during the runs.
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$work.img"
	loopdev=$(losetup --find --show --direct-io=on "$work.img")
	mount "$loopdev" "$work"
	say "work folder is a new ext4 on $loopdev (the sparse image $work.img)"
}

wait_socket() {
	local pid=${2:-$warren_pid} log=${3:-$work/warren.log}
	for _ in $(seq 150); do
		[[ -S $1 ]] && return 0
		kill -0 "$pid" 2>/dev/null || { say "daemon exited: $(tail -n 1 "$log")"; exit 1; }
		sleep 0.1
	done
	say "no socket at $1 within 15 s"
	exit 1
}
