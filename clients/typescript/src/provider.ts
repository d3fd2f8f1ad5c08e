/**
 * warren as a `@tanstack/ai-sandbox` provider: each sandbox is a warren
 * thread of one tenant — its own FUSE workspace, served by the daemon on
 * the host at the thread's mount path and at `/workspace` inside the
 * thread's jail, where commands run. A harness written against the
 * contract swaps `dockerSandbox(...)` for `warrenSandbox(...)`:
 *
 * ```ts
 * const warren = warrenSandbox({ socketPath: '/var/lib/warren/warren.sock', tenant: 'acme' })
 * const handle = await warren.create({})
 * ```
 *
 * Each handle acts as one agent run (`handle.run`): warren checks its
 * writes against its own reads, through the file API and for every
 * process its commands start, so two runs in one workspace never lose
 * each other's edits (the second writer gets a {@link WarrenStaleError}).
 * `handle.forRun(id)` is the same sandbox acting as another run (a
 * subagent's).
 *
 * What each method does on warren is said beside it; docs in the package's
 * README.
 */
import { randomBytes } from 'node:crypto'
import { spawn as spawnChild } from 'node:child_process'
import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { createExecBackedGit } from '@tanstack/ai-sandbox'
import type {
  ExecResult,
  ProcessOptions,
  SandboxCapabilities,
  SandboxChannel,
  SandboxCreateInput,
  SandboxDestroyInput,
  SandboxFs,
  SandboxGit,
  SandboxHandle,
  SandboxPolicy,
  SandboxProcess,
  SandboxProvider,
  SandboxRestoreInput,
  SandboxResumeInput,
  SnapshotRef,
  SpawnHandle,
  WorkspaceDefinition,
} from '@tanstack/ai-sandbox'
import type { Egress, EndReason, JobInfo, Settings, ThreadInfo } from './api.js'
import { WarrenClient } from './client.js'
import { isWarrenError, WarrenError, WarrenNotFoundError } from './errors.js'
import { watchFiles } from './watch.js'
import type { WarrenFileEvent, WarrenWatch, WatchOptions } from './watch.js'

/** The root of a workspace inside its jail, and the contract's virtual root. */
export const WORKSPACE = '/workspace'

/** Options of {@link warrenSandbox}. */
export interface WarrenSandboxOptions {
  /**
   * The daemon's API socket, e.g. `/var/lib/warren/warren.sock`; left out,
   * `WARREN_SOCKET`, else the default data folder's, as the CLI finds it.
   */
  socketPath?: string
  /** The tenant of every sandbox this provider makes (default `default`). */
  tenant?: string
  /**
   * Settings of the threads it creates (jail network, limits, variables...),
   * laid over the settings a thread has.
   */
  settings?: Settings
  /** How long a command of process.exec may run, in seconds (default: the daemon's, 10 minutes). */
  execTimeoutSeconds?: number
  /**
   * The egress rules of a sandbox whose network is `egress`: `default`
   * (`allow` unless given), `allow` and `deny`, each a list of CIDRs, host
   * names and wildcards (`*.npmjs.org`); deny wins. A policy's
   * `capabilities.network: 'allow'` gives the sandbox network `egress`
   * with these rules (see {@link networkSettings}).
   */
  egress?: Egress
  /**
   * The OCI image whose filesystem is the root of every sandbox it
   * creates, as `dockerSandbox({ image })` takes it (`node:22`,
   * `registry.example:5000/team/py:3.12`, `name@sha256:...`); the daemon
   * pulls it once and pins each thread to its digest. Left out: the
   * server's default image (`serve --jail-image`), else the host's
   * folders. `create({ image })` overrides it for one sandbox.
   */
  image?: string
}

/**
 * warren's own create input: the contract's, and the image of this one
 * sandbox over the provider's `image` (the contract's create input has no
 * image field).
 */
export type WarrenCreateInput = SandboxCreateInput & { image?: string }

/** What a warren sandbox can do: the 0.2.4 contract's capabilities and the newer `killableProcesses`. */
export type WarrenCapabilities = SandboxCapabilities & { killableProcesses: boolean }

/** What warren's sandboxes can do. */
export const warrenCapabilities: WarrenCapabilities = {
  fs: true,
  exec: true,
  env: true,
  ports: true,
  backgroundProcesses: true,
  writableStdin: true,
  snapshots: true,
  networkPolicy: true,
  durableFilesystem: true,
  fork: true,
  killableProcesses: true,
}

/** An entry as the newer contract's optional `fs.lstat` describes it. */
export interface WarrenStat {
  type: 'file' | 'dir' | 'symlink' | 'other'
  /** st_mode as lstat(2) gives it: the type bits (but for `other`) and the permission bits. */
  mode: number
  /** A file's length, or a link's target's. */
  size: number
}

/** The contract's fs with the newer contract's `lstat`, and `watch`. */
export interface WarrenFs extends SandboxFs {
  /** The entry at p, its last link not followed; undefined when there is none. */
  lstat: (p: string) => Promise<WarrenStat | undefined>
  /**
   * Watches the tree at p, recursively, until stop: every change of an
   * entry under it (by an agent, another run, a restore, a process of the
   * host), in order, from warren's file events; resumed from its cursor
   * after a broken connection or a daemon restart, with a `resync` event
   * where changes may have gone untold. It resolves once the daemon
   * follows the thread: every change after that is told.
   */
  watch: (p: string, onEvent: (e: WarrenFileEvent) => void, opts?: WatchOptions) => Promise<WarrenWatch>
}

/**
 * The contract's exec result, with why the command ended as it did: where
 * the daemon or the kernel ended it (its timeout, the thread's memory or
 * process limit, a stop), `reason` says so and the note is the last line
 * of `stderr` (`warren: timed out after 1s (the command's timeout)`),
 * the one place the contract's result has for it. A command that ended by
 * itself has none, whatever its exit code.
 */
export interface WarrenExecResult extends ExecResult {
  reason?: EndReason
}

/** The contract's process, its exec saying why a command ended. */
export interface WarrenProcess extends SandboxProcess {
  exec: (command: string, options?: ProcessOptions) => Promise<WarrenExecResult>
}

/** A sandbox of warren. */
export interface WarrenSandboxHandle extends SandboxHandle {
  readonly tenant: string
  /** The agent run this handle acts as. */
  readonly run: string
  readonly workspaceRoot: string
  readonly capabilities: WarrenCapabilities
  readonly fs: WarrenFs
  readonly process: WarrenProcess
  /** The same sandbox acting as another run (a subagent's, say): its own reads, its own stale checks. */
  forRun: (run: string) => WarrenSandboxHandle
  snapshot: (label?: string) => Promise<SnapshotRef>
  fork: () => Promise<WarrenSandboxHandle>
}

/** The provider. Call close() when finished with it. */
export interface WarrenSandboxProvider extends SandboxProvider {
  readonly client: WarrenClient
  readonly tenant: string
  capabilities: () => WarrenCapabilities
  create: (input: WarrenCreateInput) => Promise<WarrenSandboxHandle>
  resume: (input: SandboxResumeInput) => Promise<WarrenSandboxHandle | null>
  restoreSnapshot: (input: SandboxRestoreInput) => Promise<WarrenSandboxHandle>
  /** Closes the client's idle connections. */
  close: () => void
}

/** A new run id: one per handle, unless the caller names one. */
function newRun(): string {
  return `run-${randomBytes(6).toString('hex')}`
}

/** Makes a provider of warren sandboxes on the daemon at socketPath. */
export function warrenSandbox(opts: WarrenSandboxOptions = {}): WarrenSandboxProvider {
  const client = new WarrenClient(opts.socketPath)
  const tenant = opts.tenant ?? 'default'

  const handleOf = (thread: string, mountPath: string): WarrenSandboxHandle =>
    makeHandle({ client, tenant, thread, mountPath, opts, provider }, newRun())

  /** A thread's record, or undefined when it has none. */
  const infoOf = async (thread: string, signal?: AbortSignal): Promise<ThreadInfo | undefined> => {
    try {
      return await client.threadInfo(tenant, thread, { signal })
    } catch (err) {
      if (isWarrenError(err, 'not_found')) return undefined
      throw err
    }
  }

  const provider: WarrenSandboxProvider = {
    name: 'warren',
    client,
    tenant,
    capabilities: () => ({ ...warrenCapabilities }),
    close: () => client.close(),

    // create binds the thread id, or a fresh one. It is idempotent: the
    // same id gets the same workspace, as it is; a localSource is copied
    // in only when the thread is new. env and the provider's settings join
    // the thread's settings (a bind with settings replaces them all).
    async create(input: WarrenCreateInput): Promise<WarrenSandboxHandle> {
      input.signal?.throwIfAborted()
      const thread = input.id ?? `sbx-${randomBytes(6).toString('hex')}`
      const before = await infoOf(thread, input.signal)
      const settings = mergeSettings(before?.settings, withImage(withNetwork(opts, input.policy), input.image ?? opts.image), input.env)
      const b = await client.bind(tenant, thread, settings, { signal: input.signal })
      const h = handleOf(thread, b.mountPath)
      if (before === undefined && input.workspace?.source.type === 'local') {
        try {
          await copyIn(client, tenant, h, input.workspace.source.path, input.signal)
        } catch (err) {
          // A half-copied workspace is no workspace: the next create starts over.
          await client.deleteThread(tenant, thread).catch(() => {})
          throw err
        }
      }
      return h
    },

    // resume binds a thread that exists again (a move to this server takes
    // it over here). null when it has no record, or its workspace is gone;
    // a thread another live server holds rejects with WarrenPinnedError.
    async resume(input: SandboxResumeInput): Promise<WarrenSandboxHandle | null> {
      const info = await infoOf(input.id, input.signal)
      if (info === undefined || info.state === 'gone' || info.state === 'deleting') return null
      try {
        const b = await client.bind(tenant, input.id, undefined, { signal: input.signal })
        return handleOf(input.id, b.mountPath)
      } catch (err) {
        if (isWarrenError(err, 'not_found') || isWarrenError(err, 'gone')) return null
        throw err
      }
    },

    // A snapshot id names a thread and one of its checkpoints; restoring it
    // forks a new thread there, with the thread's settings (the snapshot's
    // thread is left as it is).
    async restoreSnapshot(input: SandboxRestoreInput): Promise<WarrenSandboxHandle> {
      const { thread, checkpoint } = parseSnapshotId(input.snapshotId)
      const from = await infoOf(thread, input.signal)
      const f = await client.fork(tenant, thread, { checkpoint }, { signal: input.signal })
      const settings = mergeSettings(from?.settings, withNetwork(opts, input.policy), input.env) ?? from?.settings
      return forked(client, tenant, f.binding.thread, f.mountPath, settings, handleOf)
    },

    // destroy deletes the thread: its folder, records and checkpoints. A
    // thread that is not there is destroyed already. A signal that fired
    // before the call does not stop it: withSandbox tears a sandbox down
    // when its run is aborted, with that run's signal.
    async destroy(input: SandboxDestroyInput): Promise<void> {
      const signal = input.signal?.aborted ? undefined : input.signal
      try {
        await client.deleteThread(tenant, input.id, { signal })
      } catch (err) {
        if (!isWarrenError(err, 'not_found')) throw err
      }
    },
  }
  return provider
}

/**
 * The network settings a harness's policy asks for, by
 * `policy.capabilities.network` (which defaults, as the contract says, to
 * the policy's `default`): `allow` is network `egress` under the
 * provider's `egress` rules (default allow); `deny` is network `none`
 * (loopback only); `ask`, or no policy, leaves the network to the
 * provider's settings, else the server's default (`serve
 * --jail-network`), with the provider's `egress` rules if it has any.
 */
export function networkSettings(policy: SandboxPolicy | undefined, egress: Egress | undefined): Settings {
  const decision = policy === undefined ? undefined : (policy.capabilities?.network ?? policy.default)
  const rules = (): Egress => {
    const e: Egress = { default: egress?.default || 'allow' }
    if (egress?.allow !== undefined) e.allow = [...egress.allow]
    if (egress?.deny !== undefined) e.deny = [...egress.deny]
    return e
  }
  switch (decision) {
    case 'allow':
      return { network: 'egress', egress: rules() }
    case 'deny':
      return { network: 'none' }
  }
  return egress === undefined ? {} : { egress: rules() }
}

/** The provider's settings with the network a policy asks for over them; undefined when neither sets anything. */
function withNetwork(opts: WarrenSandboxOptions, policy: SandboxPolicy | undefined): Settings | undefined {
  const net = networkSettings(policy, opts.egress)
  if (opts.settings === undefined && Object.keys(net).length === 0) return undefined
  return { ...opts.settings, ...net }
}

/** settings with image over theirs; undefined stays so without an image. */
function withImage(settings: Settings | undefined, image: string | undefined): Settings | undefined {
  if (image === undefined || image === '') return settings
  return { ...settings, image }
}

/**
 * The settings to bind a thread with: its own, the provider's over them,
 * then more variables; undefined when there is nothing to set, so that a
 * bind keeps the thread's settings as they are.
 */
function mergeSettings(
  own: Settings | undefined,
  provider: Settings | undefined,
  env: Record<string, string> | undefined,
): Settings | undefined {
  const hasEnv = env !== undefined && Object.keys(env).length > 0
  if (provider === undefined && !hasEnv) return undefined
  const out: Settings = { ...own, ...provider }
  const vars = { ...own?.env, ...provider?.env, ...env }
  if (Object.keys(vars).length > 0) out.env = vars
  return out
}

/** The handle of a thread fork made, bound with settings (a fork starts with none). */
async function forked(
  client: WarrenClient,
  tenant: string,
  thread: string,
  mountPath: string,
  settings: Settings | undefined,
  handleOf: (thread: string, mountPath: string) => WarrenSandboxHandle,
): Promise<WarrenSandboxHandle> {
  if (settings !== undefined) {
    try {
      await client.bind(tenant, thread, settings)
    } catch (err) {
      await client.deleteThread(tenant, thread).catch(() => {})
      throw err
    }
  }
  return handleOf(thread, mountPath)
}

/** A snapshot id: the thread, escaped, `@`, the checkpoint. */
export function snapshotId(thread: string, checkpoint: string): string {
  return `${encodeURIComponent(thread)}@${checkpoint}`
}

/** The thread and checkpoint a snapshot id names. */
export function parseSnapshotId(id: string): { thread: string; checkpoint: string } {
  const at = id.lastIndexOf('@')
  const bad = () => new WarrenError(400, 'invalid', `${JSON.stringify(id)} is not a snapshot id of warren (thread@checkpoint).`)
  if (at <= 0 || at === id.length - 1) throw bad()
  try {
    return { thread: decodeURIComponent(id.slice(0, at)), checkpoint: id.slice(at + 1) }
  } catch {
    throw bad()
  }
}

/**
 * The path the file API takes for a path the harness gives: inside the
 * workspace, relative to it. `/workspace/...` and the thread's mount path
 * are the workspace; another absolute path is passed on, to be refused as
 * outside.
 */
export function toWorkspacePath(p: string, mountPath: string): string {
  for (const root of [WORKSPACE, mountPath]) {
    if (p === root || p === root + '/') return '.'
    if (p.startsWith(root + '/')) return p.slice(root.length + 1)
  }
  return p === '' ? '.' : p
}

/** The path in the jail for a path the harness gives (a cwd, a git folder). */
function jailPath(p: string, mountPath: string): string {
  const rel = toWorkspacePath(p, mountPath)
  if (rel === '.') return WORKSPACE
  return path.posix.isAbsolute(rel) ? rel : `${WORKSPACE}/${rel}`
}

/** POSIX single-quoting for a shell word. */
function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`
}

/** What a handle works with. */
interface Ctx {
  client: WarrenClient
  tenant: string
  thread: string
  mountPath: string
  opts: WarrenSandboxOptions
  provider: WarrenSandboxProvider
}

/** The st_mode type bits of each entry type warren names. */
const typeBits: Record<WarrenStat['type'], number> = { file: 0o100000, dir: 0o040000, symlink: 0o120000, other: 0 }

function makeHandle(ctx: Ctx, run: string): WarrenSandboxHandle {
  const { client, tenant, thread, mountPath, opts, provider } = ctx
  const rel = (p: string) => toWorkspacePath(p, mountPath)
  // Calls on a thread bind it first: a destroyed sandbox's handle would
  // make it again, empty. It refuses instead.
  let destroyed = false
  const watches = new Set<WarrenWatch>() // fs.watch's, stopped by destroy
  const live = () => {
    if (destroyed) throw new WarrenNotFoundError(404, `The sandbox ${thread} was destroyed.`)
  }

  const fs: WarrenFs = {
    async read(p) {
      live()
      const r = await client.readRaw(tenant, thread, rel(p), run)
      return Buffer.from(r.data).toString('utf8')
    },
    async readBytes(p) {
      live()
      return (await client.readRaw(tenant, thread, rel(p), run)).data
    },
    // The raw upload makes the missing folders on the way; the write is
    // refused (WarrenStaleError) when this run read the file before its
    // last change.
    async write(p, data) {
      live()
      await client.writeRaw(tenant, thread, rel(p), data, { run })
    },
    // Entries at `${p}/${name}`, so that a walker can list them in turn; a
    // link is a 'file' (the contract has no third kind; lstat tells).
    async list(p) {
      live()
      const r = await client.list(tenant, thread, rel(p), run)
      const base = p.replace(/\/+$/, '')
      return r.entries.map((e) => {
        const name = e.name ?? path.posix.basename(e.path)
        return { name, path: base === '' ? name : `${base}/${name}`, type: e.type === 'dir' ? ('dir' as const) : ('file' as const) }
      })
    },
    async mkdir(p) {
      live()
      await client.mkdir(tenant, thread, rel(p), true)
    },
    // As rm -rf: a missing path is removed already.
    async remove(p) {
      live()
      try {
        await client.remove(tenant, thread, rel(p), true, run)
      } catch (err) {
        if (!isWarrenError(err, 'not_found')) throw err
      }
    },
    async rename(from, to) {
      live()
      await client.rename(tenant, thread, rel(from), rel(to), true, run)
    },
    // As test -e: links are followed, a link to nothing does not exist.
    async exists(p) {
      live()
      return (await client.exists(tenant, thread, rel(p))).exists
    },
    async watch(p, onEvent, o = {}) {
      live()
      const r = rel(p)
      if (path.posix.isAbsolute(r)) throw new WarrenError(400, 'outside', `watch: ${JSON.stringify(p)} is not in the workspace`)
      const prefix = r === '.' ? '' : '/' + path.posix.normalize(r).replace(/\/+$/, '')
      if (prefix === '/..' || prefix.startsWith('/../')) throw new WarrenError(400, 'outside', `watch: ${JSON.stringify(p)} is not in the workspace`)
      // Events name the paths as p does: under the root it was given in.
      const base = [WORKSPACE, mountPath].find((root) => p === root || p.startsWith(root + '/')) ?? ''
      const name = (e: string) => (base === '' ? e.slice(1) || '.' : base + (e === '/' ? '' : e))
      const w = await watchFiles(client, tenant, thread, prefix, name, onEvent, o)
      watches.add(w)
      return {
        stop: async () => {
          watches.delete(w)
          await w.stop()
        },
        cursor: w.cursor,
      }
    },
    async lstat(p) {
      live()
      try {
        const e = await client.stat(tenant, thread, rel(p), false, run)
        return { type: e.type, mode: typeBits[e.type] | e.mode, size: e.size }
      } catch (err) {
        if (isWarrenError(err, 'not_found')) return undefined
        throw err
      }
    },
  }

  const exec = async (command: string, o: ProcessOptions = {}): Promise<WarrenExecResult> => {
    live()
    const r = await client.exec(
      tenant,
      thread,
      {
        command,
        run,
        cwd: o.cwd === undefined ? undefined : jailPath(o.cwd, mountPath),
        env: o.env,
        timeoutSeconds: opts.execTimeoutSeconds,
      },
      { signal: o.signal },
    )
    // A notice on the workspace (it moved to this server) comes first,
    // on a line of its own: the model reads it before the output.
    const before = r.notice ? `warren: ${r.notice}\n` : ''
    if (!r.note) return { stdout: r.stdout, stderr: before + r.stderr, exitCode: r.exitCode }
    // The note goes on a line of its own after the command's output.
    const sep = r.stderr === '' || r.stderr.endsWith('\n') ? '' : '\n'
    const stderr = `${before}${r.stderr}${sep}warren: ${r.note}\n`
    return r.reason ? { stdout: r.stdout, stderr, exitCode: r.exitCode, reason: r.reason } : { stdout: r.stdout, stderr, exitCode: r.exitCode }
  }

  const spawn = async (command: string, o: ProcessOptions = {}): Promise<SpawnHandle> => {
    live()
    o.signal?.throwIfAborted()
    // The signal is not given to the start: a start cut off after the job
    // began would leave it running unknown. It ends the job once it runs.
    const job = await client.spawn(tenant, thread, {
      command,
      run,
      cwd: o.cwd === undefined ? undefined : jailPath(o.cwd, mountPath),
      env: o.env,
    })
    const h = jobHandle(client, tenant, thread, job)
    if (o.signal) {
      const signal = o.signal
      const onAbort = () => void h.kill('SIGKILL').catch(() => {})
      if (signal.aborted) {
        await h.kill('SIGKILL').catch(() => {})
        signal.throwIfAborted()
      }
      signal.addEventListener('abort', onAbort, { once: true })
      void h.ended.then(
        () => signal.removeEventListener('abort', onAbort),
        () => {},
      )
    }
    return h
  }

  const process: WarrenProcess = { exec, spawn }

  // Settings change as a whole (a bind with settings replaces them all):
  // one change at a time, each over the thread's settings as they are.
  let settingsChange: Promise<unknown> = Promise.resolve()

  const handle: WarrenSandboxHandle = {
    id: thread,
    tenant,
    run,
    provider: 'warren',
    workspaceRoot: mountPath,
    capabilities: { ...warrenCapabilities },
    fs,
    git: execGit(process, fs, mountPath),
    process,
    ports: {
      // A loopback listener of the daemon's that forwards HTTP and
      // WebSocket to the port inside the jail, in every network mode;
      // every request must carry the channel's headers (its bearer token).
      // The same port gives the same channel while the jail lives; closing
      // the thread, or its jail ending, closes it.
      async connect(port: number): Promise<SandboxChannel> {
        live()
        const ch = await client.openPort(tenant, thread, port)
        return { url: ch.url, token: ch.token, headers: { ...ch.headers } }
      },
    },
    env: {
      // The variables join the thread's settings: every later command of
      // the thread gets them, on any server that takes it over.
      set(vars) {
        const next = settingsChange.then(async () => {
          live()
          const info = await client.threadInfo(tenant, thread)
          await client.bind(tenant, thread, mergeSettings(info.settings, undefined, vars))
        })
        settingsChange = next.catch(() => {})
        return next
      },
    },
    forRun: (other) => makeHandle(ctx, other),
    async snapshot(label?: string): Promise<SnapshotRef> {
      live()
      const r = await client.checkpoint(tenant, thread, { label, run })
      const ref: SnapshotRef = { id: snapshotId(thread, r.checkpoint.id) }
      if (label !== undefined) ref.label = label
      return ref
    },
    // A new thread from the workspace as it is now: a checkpoint of it,
    // and a fork there, with this thread's settings.
    async fork(): Promise<WarrenSandboxHandle> {
      live()
      const cp = await client.checkpoint(tenant, thread, { label: 'fork', run })
      const info = await client.threadInfo(tenant, thread)
      const f = await client.fork(tenant, thread, { checkpoint: cp.checkpoint.id })
      return forked(client, tenant, f.binding.thread, f.mountPath, info.settings, (t, m) =>
        makeHandle({ ...ctx, thread: t, mountPath: m }, newRun()),
      )
    },
    async destroy() {
      await Promise.all([...watches].map((w) => w.stop()))
      watches.clear()
      await provider.destroy({ id: thread })
      destroyed = true
    },
  }
  return handle
}

/** A job as the contract's SpawnHandle, with a promise of its end. */
interface JobHandle extends SpawnHandle {
  /** Settles when the job ends (what wait() gives), or wait() fails. */
  readonly ended: Promise<number>
}

/** The error for a followed output that broke off before the job's end. */
function cutOff(id: string): WarrenError {
  return new WarrenError(503, 'closed', `The output of ${id} ended before the job did: the daemon stopped.`)
}

function jobHandle(client: WarrenClient, tenant: string, thread: string, job: JobInfo): JobHandle {
  const id = job.id
  const exitOf = (info: JobInfo) => info.exitCode ?? -1

  // Each stream from its first byte the daemon keeps (offset 0), however
  // late the reader comes: a short job's output is there after its end.
  const stream = (name: 'stdout' | 'stderr'): AsyncIterable<string> => ({
    async *[Symbol.asyncIterator]() {
      for await (const f of client.jobOutput(tenant, thread, id, { stream: name, follow: true })) {
        if (f.data) yield f.data
        if (f.end) return
      }
      throw cutOff(id)
    },
  })

  // The end comes as the last frame of the job's output: followed from
  // where the merged output ends now (offsets of the merged view count
  // both streams' bytes: the job's outputBytes), so nothing it wrote
  // before is sent again.
  let exit: Promise<number> | undefined
  const wait = (): Promise<number> => {
    exit ??= (async () => {
      const info = await client.job(tenant, thread, id)
      if (info.ended) return exitOf(info)
      for await (const f of client.jobOutput(tenant, thread, id, { follow: true, offset: info.outputBytes ?? 0 })) {
        if (f.end) return f.exit ?? exitOf(await client.job(tenant, thread, id))
      }
      throw cutOff(id)
    })()
    // A failed wait (the daemon away a moment) may be asked again.
    exit.catch(() => (exit = undefined))
    return exit
  }

  // kill() ends the job's whole process tree: SIGTERM, then SIGKILL after
  // the daemon's grace, answered once it ended. kill(sig) sends that one
  // signal to the tree. An ended job is killed enough.
  const kill = async (sig?: NodeJS.Signals | number): Promise<void> => {
    if (sig === undefined) {
      await client.stopJob(tenant, thread, id)
      return
    }
    try {
      await client.jobSignal(tenant, thread, id, sig)
    } catch (err) {
      if (isWarrenError(err, 'conflict') && (await client.job(tenant, thread, id)).ended) return
      throw err
    }
  }

  let ended: Promise<number> | undefined
  return {
    pid: Number(job.backendId ?? 0),
    stdout: stream('stdout'),
    stderr: stream('stderr'),
    stdin: {
      write: (data: string) => client.jobStdin(tenant, thread, id, data),
      end: () => client.jobStdin(tenant, thread, id, '', true),
    },
    wait,
    kill,
    get ended() {
      ended ??= wait()
      return ended
    },
  }
}

/**
 * git through the jail's own git (process.exec), as the contract allows,
 * with two changes: a failed git command rejects (with git's message)
 * rather than passing for done, and a clone of a repository on this host
 * (a path, or file://) is carried in as a bundle, since the jail sees none
 * of the host's files. Folders may be given as the harness sees them
 * (`/workspace/...`, the mount path, relative).
 */
function execGit(proc: SandboxProcess, fs: SandboxFs, mountPath: string): SandboxGit {
  const checked: SandboxProcess = {
    spawn: proc.spawn,
    exec: async (command, o) => {
      const r = await proc.exec(command, o)
      if (r.exitCode !== 0) {
        const verb = /^git (?:-c \S+ )?(?:-C '(?:[^']|'\\'')*' )?(\w+)/.exec(command)?.[1] ?? 'command'
        throw new Error(`git ${verb} failed (exit ${r.exitCode}): ${r.stderr.trim() || r.stdout.trim()}`)
      }
      return r
    },
  }
  const git = createExecBackedGit(checked, WORKSPACE)
  const at = (dir?: string) => (dir === undefined ? undefined : jailPath(dir, mountPath))
  return {
    clone: async (input) => {
      const local = localRepo(input.url)
      if (local === undefined || !(await isDir(local))) return git.clone({ ...input, dir: at(input.dir) })
      const target = at(input.dir) ?? WORKSPACE
      if (target.startsWith('-') || input.ref?.startsWith('-')) throw new Error('git clone: dir and ref must not begin with "-".')
      const bundle = await hostBundle(local)
      // The clone is made in a hidden folder of the workspace beside the
      // bundle, then moved into the target (git clones only into an empty
      // folder, and the target may be the workspace itself).
      const stage = `.warren-clone-${randomBytes(4).toString('hex')}`
      await fs.write(`${WORKSPACE}/${stage}/repo.bundle`, bundle)
      const ref = input.ref ? `--branch ${q(input.ref)} ` : ''
      const r = await proc.exec(
        [
          `stage=${q(`${WORKSPACE}/${stage}`)}; target=${q(target)}`,
          `trap 'rm -rf "$stage"' EXIT`,
          `if [ -e "$target" ] && [ -n "$(ls -A "$target" | grep -vxF ${q(stage)})" ]; then`,
          `  echo "fatal: destination path '$target' already exists and is not an empty directory." >&2; exit 128`,
          `fi`,
          `git clone -q ${ref}-- "$stage/repo.bundle" "$stage/repo" || exit`,
          `git -C "$stage/repo" remote set-url origin ${q(input.url)} || exit`,
          `mkdir -p -- "$target" && find "$stage/repo" -mindepth 1 -maxdepth 1 -exec mv -t "$target" -- {} +`,
        ].join('\n'),
      )
      if (r.exitCode !== 0) throw new Error(`git clone of ${input.url} failed (exit ${r.exitCode}): ${r.stderr.trim()}`)
    },
    status: (dir) => git.status(at(dir)),
    add: (paths, dir) => git.add(paths, at(dir)),
    commit: (message, dir) => git.commit(message, at(dir)),
    push: (dir) => git.push(at(dir)),
    pull: (dir) => git.pull(at(dir)),
    branch: (dir) => git.branch(at(dir)),
  }
}

/** The host folder a clone url names, if it is a local one. */
function localRepo(url: string): string | undefined {
  if (url.startsWith('file://')) return decodeURIComponent(new URL(url).pathname)
  if (path.isAbsolute(url)) return url
  return undefined
}

async function isDir(p: string): Promise<boolean> {
  try {
    return (await fsp.stat(p)).isDirectory()
  } catch {
    return false
  }
}

/** A git bundle of every ref of the repository at dir, made on this host. */
function hostBundle(dir: string): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const child = spawnChild('git', ['-C', dir, 'bundle', 'create', '-', '--all'], { stdio: ['ignore', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    let err = ''
    child.stdout.on('data', (b: Buffer) => out.push(b))
    child.stderr.on('data', (b: Buffer) => (err += b.toString()))
    child.on('error', reject)
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out))
      else reject(new Error(`git bundle of ${dir}: exit ${code}: ${err.trim()}`))
    })
  })
}

/**
 * Fills a new sandbox from a folder of this host (a `localSource`): its
 * folders and files with their modes through the file API, then its links
 * in one command in the jail (a link that would lead out of the workspace
 * is refused there, and so is the copy). Other entries (fifos, sockets)
 * are left out.
 */
async function copyIn(
  client: WarrenClient,
  tenant: string,
  h: WarrenSandboxHandle,
  from: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const links: string[] = []
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const e of await fsp.readdir(dir, { withFileTypes: true })) {
      signal?.throwIfAborted()
      const src = path.join(dir, e.name)
      const dst = rel === '' ? e.name : `${rel}/${e.name}`
      if (e.isDirectory()) {
        const mode = (await fsp.stat(src)).mode & 0o7777
        await client.mkdir(tenant, h.id, dst, false, mode, { signal })
        await walk(src, dst)
      } else if (e.isFile()) {
        const mode = (await fsp.stat(src)).mode & 0o7777
        await client.writeRaw(tenant, h.id, dst, await fsp.readFile(src), { run: h.run, mode, signal })
      } else if (e.isSymbolicLink()) {
        links.push(`ln -s -- ${q(await fsp.readlink(src))} ${q(dst)}`)
      }
    }
  }
  await walk(from, '')
  if (links.length === 0) return
  const r = await h.process.exec(links.join(' &&\n'), { signal })
  if (r.exitCode !== 0) {
    throw new Error(`copy of ${from} into sandbox ${h.id}: its links: exit ${r.exitCode}: ${r.stderr.trim()}`)
  }
}

export type { WorkspaceDefinition }
