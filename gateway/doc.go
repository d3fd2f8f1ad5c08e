// Package gateway is warren's daemon: it gives every (tenant, thread) its own
// workspace, serves it as a FUSE mount, remembers the binding in the metadata
// store, and answers an HTTP/1.1 + JSON API on a Unix socket.
//
// # What it promises
//
//   - One folder per thread. threads.WorkspaceRoot encodes each id into one path
//     component; two different pairs never share a folder, and nothing lands
//     outside the base folder (a refusal, never a clamp).
//   - Bind is lazy, idempotent and not remembered when it fails. The first
//     call that needs a thread binds it; binding a bound thread returns the
//     same binding; a failed bind leaves no record, no mount and no folder
//     it created.
//   - A record that says "bound" while no mount serves it is a valid state
//     (a mount failed at start, or an unmount succeeded but the record update
//     did not): the next call that needs the thread mounts it again.
//   - Destructive steps never trust a stored path blindly: the folder that
//     delete removes is the recorded root only if it is a workspace root of
//     the thread's own ids (threads.RootOf), else it is recomputed from the ids, and
//     it is removed only after every mount of it is unmounted or detached. A busy mount (a process still
//     has a file open or its cwd there) is detached lazily: it leaves the
//     tree at once and stops serving when its last user lets go.
//   - A thread whose record exists but whose folder vanished is gone
//     (ErrGone, 410): the gateway does not serve an empty folder in its
//     place.
//   - An inspection mount covers only the folder its caller asked for and
//     may cover: the path is walked without following links, checked on
//     the descriptors of the walk, and the mount is made onto the final
//     descriptor, at a request and again at every start (a record that no
//     longer passes is dropped). It is unmounted through its own
//     descriptor, wherever its folder went, and never while a thread lock
//     waits on the filesystem (package inspect).
//   - Only allowed peers talk to the API: the socket is mode 0660, and every
//     connection's peer uid (SO_PEERCRED) must be this process's uid, root,
//     or listed in Config.AllowUIDs.
//   - A mount point that no mount serves refuses writes, even root's: the
//     folder is immutable from when it is made until delete clears the
//     flag and removes it; what is found in one before a mount is moved
//     to moved-aside, never covered (package threads, mountpoint_linux.go).
//   - A file API write or edit is atomic and durable when it answers
//     (fs/files.go: a temporary file, fsync, rename, fsync of the folder).
//   - Shutdown unmounts everything and keeps every record, so a restart
//     serves the same threads again. Start first aborts the connection of,
//     and detaches, every warren mount under mnt/ (a former run's, recorded
//     or not), finishes the deletes a former run recorded (state
//     deleting), and reconciles folders with records: an empty folder with
//     no record goes, a workspace folder with files and no record is moved
//     to orphans/ (package threads, restore.go). RecoverStuck, run before the store is
//     opened, frees a store held by a former daemon that was killed and
//     could not end (stuck_linux.go).
//   - A restart serves at once: the API serves once the steps above are
//     done, and the threads are mounted again in the background, a few at
//     a time (package remount), each with the checkpoint restore a crash
//     cut short finished. A call that works in a thread the background has
//     not come to yet does that thread's part itself, at once (threads.BindLocked
//     and its settleLocked), so a call waits for its own thread, never for the
//     others; until then the thread's mount path refuses writes, as every
//     unserved mount point does. /readyz says how many are left
//     (restoring) and stays ready meanwhile.
//   - A delete is recorded (state deleting) before it removes anything;
//     a thread being deleted answers as gone (410) to every call but
//     another delete, which, like the next start, finishes it.
//   - The daemon makes no request to a mount it serves (package fs, "Requests
//     to its own mounts"): it reads the mount table instead of stat-ing a
//     mount path, and detaches through descriptors or paths without
//     walking into a mount.
//   - Commands run in the thread's jail (packages jails and jail); background
//     jobs too (package jobs), at most maxJobs at once, each keeping the newest
//     1 MiB of its stdout, of its stderr, and of both merged (jobs/jobstreams.go),
//     recorded in the store. A client that hangs up ends its command only.
//     A signal to a command or a job reaches its whole process tree in the
//     jail and nothing outside it (jobs/signals.go). A jail whose init died is
//     replaced at the thread's next command (jail.replaced); the jobs a
//     jail's end killed record 137 and a note saying why.
//   - A checkpoint records the workspace as a tree in the tenant's snapshot
//     repository (package snapshot) and its record in the thread's history
//     in the store; it reads only what changed since the head (the
//     workspace's change set, package fs), with the workspace's entries
//     frozen. Undo, redo and revert restore one through fs.Restorer: the
//     workspace's uncheckpointed changes are kept in a checkpoint first,
//     running commands refuse it (or are stopped, with force), no command
//     starts meanwhile, and the restore is journaled in the history before
//     the first file changes; a restore cut short by a crash is finished
//     at the next start, and one that cannot finish (quota, full disk, an
//     object missing or corrupt) is put back and its journal closed
//     (package checkpoints). Unreferenced objects are collected per tenant
//     (package checkpoints).
//   - A jail idle past its thread's jail idle time is stopped and a thread
//     unused past its close idle time is closed (package idle); a jail is taken
//     only while no command of it is registered and no job runs.
//   - With a host id, a gateway keeps a lease in the store and pins the
//     threads it serves; another gateway refuses them while the lease
//     holds, takes them over once it lapsed, and a gateway whose lease
//     lapsed serves none of them (packages hosts and lease; the fence is
//     threads.Threads.Fence).
//   - What API clients hold at once (connections, requests, request
//     bodies, raw uploads, streams) is bounded in total, per peer uid and
//     per thread; past a bound a request is refused at once with 503
//     unavailable and Retry-After, and one thread at its bounds never
//     makes another's calls fail (package admit: the listener counts
//     connections at accept, the router each request before its
//     handler). A stalled raw upload holds its connection and its
//     temporary file, nothing else (fs.Upload).
//
// # Layout
//
// Everything lives under Config.DataDir:
//
//	meta/                          the metadata store (Badger), opened by the caller (or etcd)
//	workspaces/<tenant>/<thread>   backing folders, unless Config.WorkspacesDir (mode 0700 above them: only
//	                               the daemon reaches them, agents use the mount); on btrfs each is a
//	                               subvolume, whose thread's quota group bounds it (package quota)
//	workspaces/.homes/<t>/<th>     the threads' home folders, their jails' HOME (package threads,
//	                               home.go): the jail's user's, mode 0700; on btrfs subvolumes in
//	                               their thread's quota group with the workspace
//	mnt/<tenant>/<thread>          FUSE mount points of bound threads (mode 0750
//	                               above them: root and the daemon's group), each
//	                               immutable from creation to delete, so an unserved
//	                               one refuses writes (package threads)
//	snapshots/<tenant>             the tenant's snapshot repository, unless Config.SnapshotsDir (mode 0700)
//	moved-aside/<time>/<t>/<th>    what was found in a mount point before a mount
//	orphans/<time>/<t>/<th>        workspace folders a start found with files and no record
//	warren.sock                    the API socket, unless Config.SocketPath says otherwise
//	events.log                     the newest events, for readers that come back with since (package events)
//
// # API
//
// HTTP/1.1 + JSON on the Unix socket; the routes are the table in api.go
// (routes), each handled by its room's Handlers,
// described for machines by docs/openapi.yaml (OpenAPI 3.1), which
// openapi_test.go holds against the table, the api types and the
// examples of docs/api.md.
// Ids travel as single escaped path segments and are unescaped segment by
// segment, so "..", "." and "a/b" are ids like any other (send them
// escaped: %2E%2E, %2E, a%2Fb). An empty tenant segment is the default
// tenant; an empty thread, an id over MaxIDBytes or not UTF-8 is a 400.
//
//	POST   /v1/tenants/{tenant}/threads/{thread}/bind   {"binding":{...},"mountPath":"..."}
//	GET    /v1/tenants/{tenant}/threads/{thread}        {"binding":{...}}
//	POST   /v1/tenants/{tenant}/threads/{thread}/close  {"binding":{...}}
//	DELETE /v1/tenants/{tenant}/threads/{thread}        {"deleted":{"tenant":..,"thread":..}}
//	GET    /v1/threads[?tenant=T][&limit=N][&cursor=C] {"bindings":[...][,"nextCursor":C]}
//	POST   /v1/mounts  {"tenant","thread","path","writable"}  {"mount":{...}}
//	GET    /v1/mounts                                   {"mounts":[...]}
//	DELETE /v1/mounts?path=DIR                          {"unmounted":"DIR"[,"inUse":true]}
//	GET    /v1/events[?tenant=T][&thread=ID]            NDJSON stream of events
//	POST   .../threads/{thread}/files/read   {"path","run"}                 {"content","version",...}
//	POST   .../threads/{thread}/files/write  {"path","run","content"}       {"version",...}
//	POST   .../threads/{thread}/files/edit   {"path","run","old","new","all"}  {"replaced","version"}
//	POST   .../threads/{thread}/files/list   {"path","run"}                 {"path","entries":[...]}
//	POST   .../threads/{thread}/files/stat   {"path","run","follow"}        {"path","type","size","mode","mtime","version","target"}
//	POST   .../threads/{thread}/files/exists {"path","run"}                 {"path","exists","type"}
//	POST   .../threads/{thread}/files/mkdir  {"path","run","parents","mode"} {"path"}
//	POST   .../threads/{thread}/files/remove {"path","run","recursive"}     {"path","removed"}
//	POST   .../threads/{thread}/files/rename {"from","to","run","overwrite"} {"from","to","version"}
//	GET    .../threads/{thread}/files/raw?path=P[&run=R]                    the bytes; X-Warren-Version
//	PUT    .../threads/{thread}/files/raw?path=P[&run=R][&mode=0644]  bytes {"path","size","version"}
//	POST   .../threads/{thread}/runs         {"pid","run"}                  {"run","pid"}
//	POST   .../threads/{thread}/runs/end     {"run"}                        {"run"}
//	POST   .../threads/{thread}/exec         {"command","run","cwd",...}    NDJSON: {"id"}, output frames, {"exit":N}
//	POST   .../threads/{thread}/exec/{id}/stdin   {"data","close"}          {"id"}
//	POST   .../threads/{thread}/exec/{id}/resize  {"rows","cols"}           {"id"}
//	POST   .../threads/{thread}/exec/{id}/background {"user","label"}       {"job":{...}}
//	POST   .../threads/{thread}/exec/{id}/signal  {"signal"}                {"id","signal"}
//	POST   .../threads/{thread}/jobs         {"command","label","user",...} {"job":{...}}
//	GET    .../threads/{thread}/jobs                                        {"jobs":[...]}
//	GET    .../threads/{thread}/jobs/{job}                                  {"job":{...}}
//	GET    .../threads/{thread}/jobs/{job}/output[?stream=S&offset=N&follow=true]  NDJSON frames
//	POST   .../threads/{thread}/jobs/{job}/stdin  {"data","close"}          {"job":{...}}
//	POST   .../threads/{thread}/jobs/{job}/stop   {"graceSeconds"}          {"job":{...}}
//	POST   .../threads/{thread}/jobs/{job}/signal {"signal"}                {"job":{...},"signal"}
//	POST   .../threads/{thread}/unpin                                       {"binding":{...}}
//	GET    /v1/hosts                                                        {"hosts":[...]}
//	POST   .../threads/{thread}/checkpoints  {"label","turn","run"}         {"checkpoint":{...},"cost":{...}}
//	GET    .../threads/{thread}/checkpoints                                 {"checkpoints":[...],"head","redo"}
//	GET    .../threads/{thread}/diff[?from=CP&to=CP|now&text=true]          {"added","removed","modified","diffs"}
//	POST   .../threads/{thread}/undo         {"force"}                      {"op","to","saved","changed",...}
//	POST   .../threads/{thread}/redo         {"force"}                      {"op","to","changed",...}
//	POST   .../threads/{thread}/revert       {"checkpoint","force"}         {"op","to","saved","changed",...}
//	POST   .../threads/{thread}/fork         {"checkpoint","thread"}        {"binding","mountPath","checkpoint","from"}
//	POST   .../threads/{thread}/ports/{port}                                {"url","token","headers","port"}; with Upgrade: tcp, 101 and the bytes
//	DELETE .../threads/{thread}/ports/{port}                                {"port","closed"}
//	GET    /healthz                                                         {"status":"ok"}
//	GET    /readyz                                                          {"ready","checks":[...]}; 503 when not ready
//	GET    /metrics                                                         Prometheus text
//
// The last three are for operators (packages health and metrics): also served,
// alone and without the peer check, on Config.MetricsAddr. Metrics live in
// a registry of the gateway's own; the store is wrapped (meta.Observed)
// and the hub told of each FUSE request (fs.HubConfig.ObserveOp) to time
// them.
//
// The file API (package files) works on the backing folder through
// the fs core, with the same locks, versions and read records as the
// mounts (never through the gateway's own mount); a modification based on
// a stale read is a 409 stale and a write.stale event. Raw content
// streams both ways: a PUT's body has no size bound (the thread's disk
// quota is its bound) and Config.BodyTimeout bounds each pause in it
// rather than the whole body.
//
// For example:
//
//	curl --unix-socket /var/lib/warren/warren.sock -X POST \
//	    http://warren/v1/tenants/acme/threads/fix-login/bind
//	curl --unix-socket /var/lib/warren/warren.sock -X DELETE \
//	    'http://warren/v1/mounts?path=%2Fsrv%2Finspect'
//
// Every error is {"error":{"code":"...","message":"..."}}: 400 invalid
// (malformed ids, JSON, a body that is not an object, unknown fields or
// query parameters, input over its bound in call/input.go), 408 timeout (a
// body slower than Config.BodyTimeout), 403
// forbidden (peer uid, a DIR the caller does not own), 404 not_found, 405
// method_not_allowed (with Allow), 409 conflict, pinned, busy or stale, 410
// gone, 413 too_large (bodies over 1 MiB, files over the file API's
// bound), 403 outside and 422 no_match (file API), 429 job_limit, 503
// closed (shutting down), unavailable (the store did not answer: retry) or
// fenced (the lease lapsed), 507 no_space (the store's disk is nearly full; reads go
// on; or a file API write found the disk full) or quota (the thread's
// disk quota refused a file API write), 500 internal. A request line that net/http cannot parse, or headers over
// 64 KiB, are refused by net/http itself before the route table, in plain
// text. A refused request changes nothing.
//
// # Rooms
//
// The daemon is a composition of rooms: one package per concern, each
// with one type that owns its state, its lock and its goroutines, and
// an exported API that is what the others may call. Package gateway
// makes them in order, wires them, routes the API to their handlers and
// stops them in order; it owns none of their state. Each room's doc
// says what it owns, what it calls and its lock order.
//
//	call        the shared language of a call: ids, input bounds, refusals,
//	            the error table, body and query decoding, the peer
//	metrics     the Prometheus series           events   the event stream, its log, the file events
//	quota       the workspaces' disk quotas     hosts    the host's lease, the threads' pins (over lease)
//	threads     bindings, the thread and turn locks, workspaces, mount points,
//	            mounts, the start's restore, the take-over and the fence
//	inspect     inspection mounts               files    the file API
//	jails       the jails, the commands in them, the bound of live jails
//	jobs        background jobs, their output, the exec streams, signals
//	checkpoints snapshots, undo, redo, revert, fork, collections
//	idle        the idle reclaim                health   readiness and usage
//	ports       the channels into the jails' ports
//
// Imports run one way, down this picture (internal/shape holds the
// graph, and the size of every type's method set):
//
//	gateway ─► health ─► checkpoints ─► jobs ─► jails ─► threads ─► hosts ─► lease
//	           idle ──┘   inspect, files ─────────────────┘   │    └─► quota, events, metrics, call
//	           ports ─► call (the jails through ports.Jails)
//
// Where a lower room must call a higher one it declares a small
// interface of exactly what it calls, which Start wires: the threads
// call the jails, the jobs, the inspection mounts and the checkpoints
// (threads.Deps, through Attach) when a thread is closed, deleted, moved
// or restored, and the ports when it is closed; the jails ask the jobs
// whether a thread's jobs run (jails.SetJobs) and tell the ports of each
// jail's end (jails.AddEnded); the ports call the jails through an
// interface of their own (ports.Jails); the hosts' lease calls the
// threads' Fence.
//
// # Start and stop
//
// Start makes the rooms in the order they need each other: the metrics,
// the data folder, the events, the quotas, the threads, the inspection
// mounts, the file API, the checkpoints, the hosts (whose lease must hold
// before anything pinned is served), the jails and the jobs; then it
// attaches the threads' dependencies, restores what the store says this
// host served (the threads' part, then the inspection mounts), listens,
// starts the idle reclaim and serves, and last starts the threads'
// background restore. A failed step undoes the ones before it.
//
// Close stops them in the reverse of what they depend on: the idle
// reclaim (it closes threads and jails), the background restore's intake,
// the threads', inspections' and jobs' intake (from then on nothing is
// added: a request that would add a mount, a jail or a job is refused
// with ErrClosed and undoes what it made); then the jobs are told why and
// the jails end (and with them every command and job, whose ends are
// recorded, and the ports' channels), the ports room closes, the event
// streams end, the server shuts down (waiting
// shutdownGrace for requests), the restores are cut, the requests still
// running are waited for, the jails' base goes, the lease ends (no fence
// behind the unmounts, nor on a closed store), the collections end, every
// mount is unmounted (a few at a time) and the FUSE connections and hub
// close. The caller may close the store once Close returned.
//
// # Lock order
//
// The locks that span rooms, outermost first; each room's doc gives its
// own leaves.
//
//   - A thread's turn lock (threads.LockTurn) serializes its checkpoints,
//     restores and delete; a fork holds two, taken in the order of their
//     keys.
//   - A thread's lock (threads.Lock), held across the slow steps of an
//     operation on one thread: mounting, store writes, removing folders,
//     ending a jail. At most one is held at a time, and no global lock is
//     held during a mount, so threads bind in parallel.
//   - Under them, a tenant's snapshot repository's shared lock and the
//     workspace's change gate (package checkpoints, fs.Files.Freeze).
//   - Every other lock is a leaf of its room, held over in-memory work
//     only, never across a mount, a store call or a wait: the rooms' mu,
//     the lease session's, the admitters'. Code that needs two rooms' state
//     takes one room's lock, lets go, then takes the other's (the jails'
//     bound asks the jobs between two looks at its own set).
//   - The fence (threads.Fence) takes thread locks, so the hosts room is
//     closed holding none.
//
// # Goroutines
//
// Every goroutine has an owner that stops it and waits for it, and Close
// returns only when none of them runs: the API's serving goroutine and
// the metrics listener's (package gateway; Close); the connections' and
// handlers' of net/http (Shutdown, then requestSet); the event streams'
// watchers and the file events' window (package events); the idle
// reclaim (package idle); the reader of the kernel's refusals of the
// jails' connections (package network; closing the egress network ends
// it); the background restore's workers (package
// threads, through package remount); a jail's (package jail, through
// package jails); a job's run and its end, and a closed thread's last
// take-down (package jobs, its WaitGroup); the port channels' servers
// and closes (package ports, its WaitGroup; a plain TCP connection's
// copies run in its request's handler); the collections (package
// checkpoints); the lease's heartbeat and fence (package hosts, through
// package lease); a mount's FUSE server (package fs, through the threads'
// and inspections' sets, unmounted by unmountAll).
//
// # Errors
//
// Functions wrap each step's error with the step ("mount workspace: %w").
// Callers, and the API's single error writer, branch with errors.Is on
// package api's sentinels (ErrInvalid, ErrNotFound, ErrConflict,
// ErrPinned, ErrBusy, ErrClosed, ErrGone, ErrJobLimit, ErrFenced...) and
// on meta's, through one table (call.Classify); everything else is an
// internal error. Every refusal is logged with the thread and the path.
//
// Input is bounded before it is used (package call, input.go), by the
// kernel's limit for what it becomes, so that bad input is a 400 and
// never a 500 from deep inside. A message that quotes client input quotes
// it through call.Quote (a bounded prefix); writeErrorCode bounds every
// message again, whatever it quotes.
package gateway
