# Sourced by the bench scripts (after `cd` to the repository): what each
# of them needs to start one daemon and leave nothing behind.
#
#   bench_work NAME   makes the work folder $work under BENCH_DIR (default
#                     /var/tmp) and sets the traps: on exit the daemon
#                     ($warren_pid, if set) is stopped by its pid, every
#                     mount under $work is detached and $work removed,
#                     whether the run succeeded or not
#   wait_socket SOCK  waits up to 15 s for the daemon to make its socket
#   say ...           prints a line of progress on stderr

GO=${GO:-go}
base=${BENCH_DIR:-/var/tmp}
warren_pid=

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

bench_work() {
	work=$(mktemp -d "$base/warren-$1.XXXXXX")
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

wait_socket() {
	for _ in $(seq 150); do
		[[ -S $1 ]] && return 0
		kill -0 "$warren_pid" 2>/dev/null || { say "daemon exited: $(tail -n 1 "$work/warren.log")"; exit 1; }
		sleep 0.1
	done
	say "no socket at $1 within 15 s"
	exit 1
}
