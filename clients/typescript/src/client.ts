/**
 * The client of warren's socket API: one method per call, typed, with an
 * AbortSignal on each, NDJSON streams as async iterables, and error answers
 * as {@link WarrenError}s. docs/api.md says what each call does.
 */
import type { Readable } from 'node:stream'
import type * as api from './api.js'
import { WarrenError } from './errors.js'
import { escapeId, ndjson, readAll, Transport } from './http.js'

/** Options of every call. */
export interface CallOptions {
  signal?: AbortSignal | undefined
}

/** The answer of an exec read to its end. */
export interface ExecResult {
  id: string
  stdout: string
  stderr: string
  exitCode: number
  timedOut: boolean
  /** Why the command ended as it did, when the daemon or the kernel ended it (none when it ended by itself). */
  reason?: api.EndReason
  /** The sentence of reason, for a person. */
  note?: string
  /** Set when the command moved to the background: the job it became. */
  background?: string
  /** A note on the thread's workspace, given once (the thread moved to this server with its last copied checkpoint). */
  notice?: string
}

/** A client of one daemon. Call close() when finished. */
export class WarrenClient {
  private readonly t: Transport

  /**
   * socketPath is the daemon's API socket (`DATA/warren.sock`); left out,
   * `WARREN_SOCKET`, else the default data folder's, as the CLI finds it.
   */
  constructor(socketPath?: string) {
    this.t = new Transport(socketPath)
  }

  /** The daemon's socket. */
  get socketPath(): string {
    return this.t.socketPath
  }

  /** Closes the client's idle connections. */
  close(): void {
    this.t.close()
  }

  private thread(tenant: string, thread: string): string {
    return `/v1/tenants/${escapeId(tenant)}/threads/${escapeId(thread)}`
  }

  // Threads.

  /**
   * Replaces a thread's egress rules (its other settings kept); a running
   * jail follows them at once. The thread must be in network egress.
   */
  setNetwork(tenant: string, thread: string, egress: api.Egress, o: CallOptions = {}): Promise<api.BindResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/network', { json: egress, signal: o.signal })
  }

  /** Binds a thread (idempotent), with settings if given. */
  bind(tenant: string, thread: string, settings?: api.Settings, o: CallOptions = {}): Promise<api.BindResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/bind', {
      json: settings ? { settings } : {},
      signal: o.signal,
    })
  }

  /** A thread's record, without binding it; WarrenNotFoundError if it has none. */
  async threadInfo(tenant: string, thread: string, o: CallOptions = {}): Promise<api.ThreadInfo> {
    const r = await this.t.call<{ binding: api.ThreadInfo }>('GET', this.thread(tenant, thread), { signal: o.signal })
    return r.binding
  }

  /**
   * Every thread (of tenant, if given), following the daemon's pages to the
   * end. The first page is asked for with no limit, so a daemon from before
   * pages answers it whole; the rest ask for the largest pages.
   */
  async threads(tenant?: string, o: CallOptions = {}): Promise<api.ThreadInfo[]> {
    const all: api.ThreadInfo[] = []
    let limit: number | undefined
    let cursor: string | undefined
    for (;;) {
      const page = await this.threadsPage({ tenant, limit, cursor }, o)
      all.push(...page.bindings)
      if (!page.nextCursor) return all
      if (page.nextCursor === cursor || page.bindings.length === 0) {
        throw new Error("list threads: the daemon's pages do not advance")
      }
      limit = 1000
      cursor = page.nextCursor
    }
  }

  /**
   * One page of threads, ordered by tenant then thread: of tenant, if given;
   * at most limit (the daemon's default, 100, if not given); after cursor,
   * the nextCursor of the page before. nextCursor is absent on the last page.
   */
  async threadsPage(
    q: { tenant?: string; limit?: number; cursor?: string } = {},
    o: CallOptions = {},
  ): Promise<api.ThreadsResponse> {
    return this.t.call<api.ThreadsResponse>('GET', '/v1/threads', {
      query: { tenant: q.tenant, limit: q.limit, cursor: q.cursor },
      signal: o.signal,
    })
  }

  /** Unmounts a thread, keeping its folder. */
  async closeThread(tenant: string, thread: string, o: CallOptions = {}): Promise<api.ThreadInfo> {
    const r = await this.t.call<{ binding: api.ThreadInfo }>('POST', this.thread(tenant, thread) + '/close', {
      signal: o.signal,
    })
    return r.binding
  }

  /** Removes a thread's folder and records. */
  async deleteThread(tenant: string, thread: string, o: CallOptions = {}): Promise<void> {
    await this.t.call('DELETE', this.thread(tenant, thread), { signal: o.signal })
  }

  /**
   * Moves a thread whose owner died to this daemon at once, bound here;
   * WarrenPinnedError while the owner lives.
   */
  async unpin(tenant: string, thread: string, o: CallOptions = {}): Promise<api.ThreadInfo> {
    const r = await this.t.call<api.ThreadResponse>('POST', this.thread(tenant, thread) + '/unpin', { signal: o.signal })
    return r.binding
  }

  // Probes and metrics: calls for operators (also on `--metrics-addr`).

  /** What a thread uses on the server that serves it: CPU, memory, processes, disk, jobs, FUSE requests. */
  async usage(tenant: string, thread: string, o: CallOptions = {}): Promise<api.Usage> {
    const r = await this.t.call<api.UsageResponse>('GET', this.thread(tenant, thread) + '/usage', { signal: o.signal })
    return r.usage
  }

  /** The daemon's build (version, commit, Go version) and what its kernel offers it. */
  async version(o: CallOptions = {}): Promise<api.Version> {
    return this.t.call<api.Version>('GET', '/v1/version', { signal: o.signal })
  }

  /** The daemon answers: `{ status: 'ok' }`, and its commit. */
  async health(o: CallOptions = {}): Promise<api.Health> {
    return this.t.call<api.Health>('GET', '/healthz', { signal: o.signal })
  }

  /** Whether this server may take work, and each check; a server that may not is an answer, not an error. */
  async ready(o: CallOptions = {}): Promise<api.Readiness> {
    const res = await this.t.send('GET', '/readyz', { signal: o.signal, alsoOk: [503] })
    return JSON.parse((await readAll(res, Infinity)).toString('utf8')) as api.Readiness
  }

  /** The daemon's metrics, in Prometheus' text format. */
  async metrics(o: CallOptions = {}): Promise<string> {
    const res = await this.t.send('GET', '/metrics', { signal: o.signal })
    return (await readAll(res, Infinity)).toString('utf8')
  }

  // Hosts and inspection mounts: calls for operators.

  /** The daemons that ever sent a heartbeat, and whether their lease holds. */
  async hosts(o: CallOptions = {}): Promise<api.Host[]> {
    const r = await this.t.call<api.HostsResponse>('GET', '/v1/hosts', { signal: o.signal })
    return r.hosts
  }

  /** Serves a thread's workspace a second time at path, read-only unless writable. */
  async mount(req: api.MountRequest, o: CallOptions = {}): Promise<api.MountInfo> {
    const r = await this.t.call<api.MountResponse>('POST', '/v1/mounts', { json: req, signal: o.signal })
    return r.mount
  }

  /** Every inspection mount, ordered by path. */
  async mounts(o: CallOptions = {}): Promise<api.MountInfo[]> {
    const r = await this.t.call<api.MountsResponse>('GET', '/v1/mounts', { signal: o.signal })
    return r.mounts
  }

  /** Removes the inspection mount made at path. */
  unmount(path: string, o: CallOptions = {}): Promise<api.UnmountResponse> {
    return this.t.call('DELETE', '/v1/mounts', { query: { path }, signal: o.signal })
  }

  // The file API.

  readFile(tenant: string, thread: string, path: string, run?: string, o: CallOptions = {}): Promise<api.ReadFileResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/read', { json: { path, run }, signal: o.signal })
  }

  writeFile(
    tenant: string,
    thread: string,
    req: { path: string; content: string; encoding?: 'base64'; run?: string },
    o: CallOptions = {},
  ): Promise<api.WriteFileResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/write', { json: req, signal: o.signal })
  }

  editFile(
    tenant: string,
    thread: string,
    req: { path: string; old: string; new: string; all?: boolean; run?: string },
    o: CallOptions = {},
  ): Promise<{ path: string; replaced: number; version: number }> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/edit', { json: req, signal: o.signal })
  }

  /** A folder's entries. */
  list(tenant: string, thread: string, path: string, run?: string, o: CallOptions = {}): Promise<api.ListResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/list', { json: { path, run }, signal: o.signal })
  }

  /** One entry; follow resolves a final link inside the workspace. */
  stat(tenant: string, thread: string, path: string, follow = true, run?: string, o: CallOptions = {}): Promise<api.EntryInfo> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/stat', {
      json: { path, run, follow },
      signal: o.signal,
    })
  }

  exists(tenant: string, thread: string, path: string, o: CallOptions = {}): Promise<api.ExistsResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/exists', { json: { path }, signal: o.signal })
  }

  async mkdir(tenant: string, thread: string, path: string, parents = true, mode?: number, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', this.thread(tenant, thread) + '/files/mkdir', {
      json: { path, parents, mode },
      signal: o.signal,
    })
  }

  remove(
    tenant: string,
    thread: string,
    path: string,
    recursive = false,
    run?: string,
    o: CallOptions = {},
  ): Promise<api.RemoveResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/remove', {
      json: { path, recursive, run },
      signal: o.signal,
    })
  }

  rename(
    tenant: string,
    thread: string,
    from: string,
    to: string,
    overwrite = true,
    run?: string,
    o: CallOptions = {},
  ): Promise<api.RenameResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/files/rename', {
      json: { from, to, overwrite, run },
      signal: o.signal,
    })
  }

  /** A file's bytes, any size, and its version. */
  async readRaw(
    tenant: string,
    thread: string,
    path: string,
    run?: string,
    o: CallOptions = {},
  ): Promise<{ data: Uint8Array; version: number }> {
    const res = await this.t.send('GET', this.thread(tenant, thread) + '/files/raw', {
      query: { path, run },
      signal: o.signal,
    })
    const version = Number(res.headers['x-warren-version'] ?? 0)
    const data = await readAll(res, Infinity)
    return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), version }
  }

  /** Replaces a file with bytes or a stream of them, any size. */
  writeRaw(
    tenant: string,
    thread: string,
    path: string,
    data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable,
    opts: { run?: string; mode?: number } & CallOptions = {},
  ): Promise<api.WriteFileResponse> {
    return this.t.call('PUT', this.thread(tenant, thread) + '/files/raw', {
      query: { path, run: opts.run, mode: opts.mode === undefined ? undefined : opts.mode.toString(8) },
      raw: data,
      signal: opts.signal,
    })
  }

  /**
   * Registers process pid (the daemon's view of it) for run: from its next
   * open on, it and what it starts act as run on this daemon's mounts.
   */
  registerRun(tenant: string, thread: string, run: string, pid: number, o: CallOptions = {}): Promise<api.RunResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/runs', { json: { run, pid }, signal: o.signal })
  }

  /** Forgets a run: its registered processes and its read records. */
  async endRun(tenant: string, thread: string, run: string, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', this.thread(tenant, thread) + '/runs/end', { json: { run }, signal: o.signal })
  }

  // Commands.

  /**
   * Runs a command and yields its frames: its id (when it takes input, at
   * once), its output, and its end. Breaking off the iteration, or the
   * signal, ends the command.
   */
  async *execFrames(tenant: string, thread: string, req: api.ExecRequest, o: CallOptions = {}): AsyncGenerator<api.ExecFrame> {
    const res = await this.t.send('POST', this.thread(tenant, thread) + '/exec', { json: req, signal: o.signal })
    yield* ndjson<api.ExecFrame>(res, o.signal)
  }

  /**
   * Runs a command to its end and collects its output. The signal, or a
   * throw from onFrame, ends the command (the daemon ends a command whose
   * client hangs up).
   */
  async exec(
    tenant: string,
    thread: string,
    req: api.ExecRequest,
    o: CallOptions & { onFrame?: (f: api.ExecFrame) => void } = {},
  ): Promise<ExecResult> {
    const out: ExecResult = { id: '', stdout: '', stderr: '', exitCode: -1, timedOut: false }
    for await (const f of this.execFrames(tenant, thread, req, o)) {
      o.onFrame?.(f)
      if (f.id) out.id = f.id
      if (f.notice) out.notice = f.notice
      if (f.data !== undefined) {
        if (f.stream === 'stderr') out.stderr += f.data
        else out.stdout += f.data
      }
      if (f.background) out.background = f.background
      if (f.timedOut) out.timedOut = true
      if (f.exit !== undefined) out.exitCode = f.exit
      if (f.reason) out.reason = f.reason
      if (f.note) out.note = f.note
      // The command's jail ended under it (a stop of the daemon, a delete,
      // its init's death): no exit of the command's own to report.
      if (f.error) throw new WarrenError(500, 'internal', `command ${out.id}: ${f.error}`)
    }
    return out
  }

  /** Sends input to a running command; close ends its input. */
  async execStdin(tenant: string, thread: string, id: string, data: string, close = false, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', `${this.thread(tenant, thread)}/exec/${escapeId(id)}/stdin`, {
      json: { data, close },
      signal: o.signal,
    })
  }

  /** Resizes the terminal of a command run with tty. */
  async execResize(tenant: string, thread: string, id: string, rows: number, cols: number, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', `${this.thread(tenant, thread)}/exec/${escapeId(id)}/resize`, {
      json: { rows, cols },
      signal: o.signal,
    })
  }

  /**
   * Makes a running command a job: its exec's answer ends with its job's id
   * and the job gets the rest of its output. WarrenError `job_limit` (429)
   * at the thread's job limit; the command goes on either way.
   */
  async execBackground(
    tenant: string,
    thread: string,
    id: string,
    req: api.BackgroundRequest = {},
    o: CallOptions = {},
  ): Promise<api.JobInfo> {
    const r = await this.t.call<api.JobResponse>('POST', `${this.thread(tenant, thread)}/exec/${escapeId(id)}/background`, {
      json: req,
      signal: o.signal,
    })
    return r.job
  }

  /** Sends a signal to a running command's process tree. */
  async execSignal(tenant: string, thread: string, id: string, signal: string | number, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', `${this.thread(tenant, thread)}/exec/${escapeId(id)}/signal`, {
      json: { signal },
      signal: o.signal,
    })
  }

  // Jobs.

  async spawn(tenant: string, thread: string, req: api.SpawnRequest, o: CallOptions = {}): Promise<api.JobInfo> {
    const r = await this.t.call<{ job: api.JobInfo }>('POST', this.thread(tenant, thread) + '/jobs', { json: req, signal: o.signal })
    return r.job
  }

  async jobs(tenant: string, thread: string, o: CallOptions = {}): Promise<api.JobInfo[]> {
    const r = await this.t.call<{ jobs: api.JobInfo[] }>('GET', this.thread(tenant, thread) + '/jobs', { signal: o.signal })
    return r.jobs
  }

  async job(tenant: string, thread: string, id: string, o: CallOptions = {}): Promise<api.JobInfo> {
    const r = await this.t.call<{ job: api.JobInfo }>('GET', `${this.thread(tenant, thread)}/jobs/${escapeId(id)}`, {
      signal: o.signal,
    })
    return r.job
  }

  /**
   * A job's output from offset: one stream of it, or both merged ('all',
   * the default); with follow, until the job ends.
   */
  async *jobOutput(
    tenant: string,
    thread: string,
    id: string,
    opts: { stream?: 'stdout' | 'stderr' | 'all'; offset?: number; follow?: boolean } & CallOptions = {},
  ): AsyncGenerator<api.JobFrame> {
    const res = await this.t.send('GET', `${this.thread(tenant, thread)}/jobs/${escapeId(id)}/output`, {
      query: { stream: opts.stream, offset: opts.offset, follow: opts.follow ? 'true' : undefined },
      signal: opts.signal,
    })
    yield* ndjson<api.JobFrame>(res, opts.signal)
  }

  async jobStdin(tenant: string, thread: string, id: string, data: string, close = false, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', `${this.thread(tenant, thread)}/jobs/${escapeId(id)}/stdin`, {
      json: { data, close },
      signal: o.signal,
    })
  }

  /** Sends a signal to a job's process tree. */
  async jobSignal(tenant: string, thread: string, id: string, signal: string | number, o: CallOptions = {}): Promise<void> {
    await this.t.call('POST', `${this.thread(tenant, thread)}/jobs/${escapeId(id)}/signal`, {
      json: { signal },
      signal: o.signal,
    })
  }

  /** Stops a job: SIGTERM to its tree, SIGKILL after graceSeconds. */
  async stopJob(tenant: string, thread: string, id: string, graceSeconds?: number, o: CallOptions = {}): Promise<api.JobInfo> {
    const r = await this.t.call<{ job: api.JobInfo }>('POST', `${this.thread(tenant, thread)}/jobs/${escapeId(id)}/stop`, {
      json: { graceSeconds },
      signal: o.signal,
    })
    return r.job
  }

  // Ports.

  /**
   * The channel to a port of a thread's jail (binding the thread and
   * starting its jail if need be): a loopback URL of the daemon's that
   * forwards HTTP and WebSocket to the port, and the headers every request
   * to it must carry. The same port gives the same channel while the jail
   * lives.
   */
  openPort(tenant: string, thread: string, port: number, o: CallOptions = {}): Promise<api.PortChannel> {
    return this.t.call('POST', `${this.thread(tenant, thread)}/ports/${portSegment(port)}`, { signal: o.signal })
  }

  /** Closes the channel to a port of a thread's jail, if one is open. */
  closePort(tenant: string, thread: string, port: number, o: CallOptions = {}): Promise<api.PortClosed> {
    return this.t.call('DELETE', `${this.thread(tenant, thread)}/ports/${portSegment(port)}`, { signal: o.signal })
  }

  // Images.

  /** The server's image store: each image, the bound threads pinned to it, and the store's size. */
  listImages(o: CallOptions = {}): Promise<api.ImagesResponse> {
    return this.t.call('GET', '/v1/images', { signal: o.signal })
  }

  /** Pulls an image into the store (nothing is fetched if it holds it). */
  async pullImage(ref: string, o: CallOptions = {}): Promise<api.Image> {
    const r = await this.t.call<api.ImageResponse>('POST', '/v1/images/pull', { json: { ref }, signal: o.signal })
    return r.image
  }

  /**
   * Loads the image of an archive on the server's disk (an OCI image
   * layout in a tar, or a docker save tarball), named name or as the
   * archive names it.
   */
  async loadImage(path: string, name?: string, o: CallOptions = {}): Promise<api.Image> {
    const r = await this.t.call<api.ImageResponse>('POST', '/v1/images/load', { json: { path, name }, signal: o.signal })
    return r.image
  }

  /** Removes an image (by reference or digest); refused while a bound thread is pinned to it. */
  async removeImage(ref: string, o: CallOptions = {}): Promise<void> {
    await this.t.call('DELETE', '/v1/images?ref=' + encodeURIComponent(ref), { signal: o.signal })
  }

  // Checkpoints.

  checkpoint(
    tenant: string,
    thread: string,
    req: { label?: string; turn?: number; run?: string } = {},
    o: CallOptions = {},
  ): Promise<api.CheckpointResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/checkpoints', { json: req, signal: o.signal })
  }

  checkpoints(tenant: string, thread: string, o: CallOptions = {}): Promise<api.CheckpointsResponse> {
    return this.t.call('GET', this.thread(tenant, thread) + '/checkpoints', { signal: o.signal })
  }

  diff(
    tenant: string,
    thread: string,
    opts: { from?: string; to?: string; text?: boolean } & CallOptions = {},
  ): Promise<api.DiffResponse> {
    return this.t.call('GET', this.thread(tenant, thread) + '/diff', {
      query: { from: opts.from, to: opts.to, text: opts.text ? 'true' : undefined },
      signal: opts.signal,
    })
  }

  undo(tenant: string, thread: string, force = false, o: CallOptions = {}): Promise<api.RestoreResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/undo', { json: { force }, signal: o.signal })
  }

  redo(tenant: string, thread: string, force = false, o: CallOptions = {}): Promise<api.RestoreResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/redo', { json: { force }, signal: o.signal })
  }

  revert(tenant: string, thread: string, checkpoint: string, force = false, o: CallOptions = {}): Promise<api.RestoreResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/revert', {
      json: { checkpoint, force },
      signal: o.signal,
    })
  }

  fork(
    tenant: string,
    thread: string,
    req: { checkpoint?: string; thread?: string } = {},
    o: CallOptions = {},
  ): Promise<api.ForkResponse> {
    return this.t.call('POST', this.thread(tenant, thread) + '/fork', { json: req, signal: o.signal })
  }

  // Events.

  /**
   * The event stream, filtered by tenant and thread (and, for file events,
   * a path prefix), until the signal fires. With since, the kept events
   * after that seq come first.
   */
  async *events(
    filter: { tenant?: string; thread?: string; prefix?: string; since?: number } & CallOptions = {},
  ): AsyncGenerator<api.WarrenEvent> {
    const res = await this.t.send('GET', '/v1/events', {
      query: { tenant: filter.tenant, thread: filter.thread, prefix: filter.prefix, since: filter.since },
      signal: filter.signal,
    })
    yield* ndjson<api.WarrenEvent>(res, filter.signal)
  }

  /**
   * The event stream as {@link events} gives it, once the daemon answered:
   * with `seq`, the newest event's when the stream began (every event
   * after it follows), and `run`, which names this run of the daemon (a
   * new one at each start), so that a reader can resume it from where it
   * was and tell when it may have missed changes.
   */
  async openEvents(
    filter: { tenant?: string; thread?: string; prefix?: string; since?: number } & CallOptions = {},
  ): Promise<{ seq: number; run: string; events: AsyncGenerator<api.WarrenEvent> }> {
    const res = await this.t.send('GET', '/v1/events', {
      query: { tenant: filter.tenant, thread: filter.thread, prefix: filter.prefix, since: filter.since },
      signal: filter.signal,
    })
    const header = (name: string) => {
      const v = res.headers[name.toLowerCase()]
      return (Array.isArray(v) ? v[0] : v) ?? ''
    }
    return {
      seq: Number(header('X-Warren-Event-Seq')) || 0,
      run: header('X-Warren-Event-Run'),
      events: ndjson<api.WarrenEvent>(res, filter.signal),
    }
  }
}

/** A port as its path segment: an integer is sent as it is; anything else as text the daemon refuses (400). */
function portSegment(port: number): string {
  return Number.isInteger(port) ? String(port) : encodeURIComponent(String(port))
}
