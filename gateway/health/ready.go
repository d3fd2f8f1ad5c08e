package health

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/version"
)

// readyStoreTimeout bounds the store's answer to a readiness check: a
// probe must answer within its own timeout, and a store that takes longer
// is as good as down for the calls that would follow.
const readyStoreTimeout = time.Second

// readyDiskReserve is the free space the data and workspaces folders
// must have for the server to count as ready: below it, new threads
// would fill the disk the running ones need.
const readyDiskReserve = 256 << 20

// Health answers GET /healthz: the process answers, with its revision.
func (h *Handlers) Health(r *http.Request, p call.Params) (any, error) {
	return api.Health{Status: "ok", Revision: version.Get().Revision}, nil
}

// Ready answers GET /readyz: 200 when the server may take work, 503 with
// the checks that fail otherwise.
func (h *Handlers) Ready(r *http.Request, p call.Params) (any, error) {
	return readyAnswer{h.h.Readiness(r.Context())}, nil
}

// readyAnswer is a readiness, answered 200 when ready and 503 otherwise.
type readyAnswer struct{ rd api.Readiness }

func (a readyAnswer) ServeStream(w http.ResponseWriter, r *http.Request) {
	status := http.StatusOK
	if !a.rd.Ready {
		status = http.StatusServiceUnavailable
	}
	call.WriteJSON(w, status, a.rd)
}

// Readiness runs every check.
func (h *Health) Readiness(ctx context.Context) api.Readiness {
	checks := []api.ReadyCheck{
		h.checkServing(),
		h.checkStore(ctx),
		h.checkLease(),
		h.checkDisk(),
		checkDescriptors(),
		h.checkAdmission(),
		h.checkRestore(),
	}
	if h.cfg.Replicas != nil {
		checks = append(checks, h.checkSnapshotStore())
	}
	rd := api.Readiness{Ready: true, Checks: checks, Restoring: h.cfg.Threads.RestoreLeft()}
	for _, c := range checks {
		rd.Ready = rd.Ready && c.OK
	}
	return rd
}

func (h *Health) checkServing() api.ReadyCheck {
	if !h.cfg.Threads.Serving() {
		return api.ReadyCheck{Name: "serving", Detail: "the daemon is stopping"}
	}
	return api.ReadyCheck{Name: "serving", OK: true, Detail: "serving"}
}

// checkAdmission says whether a new thread would be admitted now (package
// threadlimit), with the headroom of every limit in its detail, and the
// jails alive against their bound. A server that refuses new threads is
// not ready for them; its threads served keep working. The jails' bound
// never makes it unready: a new jail takes an idle one's place.
func (h *Health) checkAdmission() api.ReadyCheck {
	hr := h.cfg.Threads.Headroom()
	refused := hr.Refused
	hr.Refused = "" // said last, after the jails
	live, maxJails := h.cfg.Jails.Live()
	detail := fmt.Sprintf("%s; jails %d of %d (--max-jails)", hr, live, maxJails)
	if refused != "" {
		detail += "; new threads refused: " + refused
	}
	return api.ReadyCheck{Name: "admission", OK: refused == "", Detail: detail}
}

// checkRestore says how many threads the start's background restore has
// still to serve again. It never makes the server unready: a call for one
// of them serves it at once (bindLocked), so the server takes work while
// it restores.
func (h *Health) checkRestore() api.ReadyCheck {
	if n := h.cfg.Threads.RestoreLeft(); n > 0 {
		return api.ReadyCheck{Name: "restore", OK: true, Detail: fmt.Sprintf("restoring: %d threads of the former run still to mount again in the background; a call for one mounts it at once", n)}
	}
	return api.ReadyCheck{Name: "restore", OK: true, Detail: "every thread of the former run is served again"}
}

// checkSnapshotStore says whether the checkpoints' uploads to the snapshot
// store succeed. A server whose uploads fail still takes checkpoints, but
// they stay on its disk alone: a balancer should prefer another. Once the
// waiting checkpoints' bytes reach their bound
// (--snapshot-cache-bytes) the server refuses new checkpoints: it is not
// ready either, even while the store answers (slowly).
func (h *Health) checkSnapshotStore() api.ReadyCheck {
	_, up, why := h.cfg.Replicas.Stats()
	n, bytes, bound := h.cfg.Replicas.Backlog()
	waiting := fmt.Sprintf("%d checkpoints (%d bytes", n, bytes)
	if bound > 0 {
		waiting += fmt.Sprintf(" of the --snapshot-cache-bytes bound of %d", bound)
	}
	waiting += ")"
	switch {
	case !up:
		return api.ReadyCheck{Name: "snapshot_store", Detail: fmt.Sprintf("the snapshot store is unreachable: %s wait to be copied to it: %v", waiting, why)}
	case bound > 0 && bytes >= bound:
		return api.ReadyCheck{Name: "snapshot_store", Detail: fmt.Sprintf("the snapshot store is too slow: %s wait to be copied to it; new checkpoints are refused", waiting)}
	}
	return api.ReadyCheck{Name: "snapshot_store", OK: true, Detail: fmt.Sprintf("%s wait to be copied to the snapshot store", waiting)}
}

func (h *Health) checkStore(ctx context.Context) api.ReadyCheck {
	ctx, cancel := context.WithTimeout(ctx, readyStoreTimeout)
	defer cancel()
	start := time.Now()
	if _, err := h.cfg.Store.ListHosts(ctx); err != nil {
		return api.ReadyCheck{Name: "store", Detail: fmt.Sprintf("the metadata store does not answer: %v", err)}
	}
	return api.ReadyCheck{Name: "store", OK: true, Detail: fmt.Sprintf("answered in %v", time.Since(start).Round(time.Microsecond))}
}

func (h *Health) checkLease() api.ReadyCheck {
	if h.cfg.HostID == "" {
		return api.ReadyCheck{Name: "lease", OK: true, Detail: "no host id: threads are not pinned"}
	}
	ok, until := h.cfg.Hosts.Valid()
	if !ok {
		return api.ReadyCheck{Name: "lease", Detail: fmt.Sprintf("fenced: host %q holds no lease on the metadata store, so it serves no pinned thread until a heartbeat gets one", h.cfg.HostID)}
	}
	return api.ReadyCheck{Name: "lease", OK: true, Detail: fmt.Sprintf("host %q holds its lease for %v more", h.cfg.HostID, time.Until(until).Round(time.Millisecond))}
}

func (h *Health) checkDisk() api.ReadyCheck {
	detail := ""
	for _, dir := range []string{h.cfg.DataDir, h.cfg.WorkspacesDir} {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return api.ReadyCheck{Name: "disk", Detail: fmt.Sprintf("statfs %s: %v", dir, err)}
		}
		free := int64(st.Bavail) * st.Bsize
		if free < readyDiskReserve {
			return api.ReadyCheck{Name: "disk", Detail: fmt.Sprintf("%s has %d MiB free, below the %d MiB reserve", dir, free>>20, readyDiskReserve>>20)}
		}
		if detail != "" {
			detail += ", "
		}
		detail += fmt.Sprintf("%s: %d MiB free", dir, free>>20)
	}
	return api.ReadyCheck{Name: "disk", OK: true, Detail: detail}
}

// checkDescriptors counts the process's open descriptors against its
// limit: at least an eighth of it (and no fewer than 64) must be free.
func checkDescriptors() api.ReadyCheck {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return api.ReadyCheck{Name: "descriptors", Detail: fmt.Sprintf("getrlimit: %v", err)}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return api.ReadyCheck{Name: "descriptors", Detail: fmt.Sprintf("count open descriptors: %v", err)}
	}
	open, limit := uint64(len(ents)), lim.Cur
	reserve := max(limit/8, 64)
	if open+reserve > limit {
		return api.ReadyCheck{Name: "descriptors", Detail: fmt.Sprintf("%d of %d descriptors open, less than %d left: raise LimitNOFILE", open, limit, reserve)}
	}
	return api.ReadyCheck{Name: "descriptors", OK: true, Detail: fmt.Sprintf("%d of %d open", open, limit)}
}
