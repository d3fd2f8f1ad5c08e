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
 * What each method does on warren is said beside it; docs in the package's
 * README.
 */
import { randomBytes } from 'node:crypto'
import { spawn as spawnChild } from 'node:child_process'
import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { createExecBackedGit, UnsupportedCapabilityError } from '@tanstack/ai-sandbox'
import type {
  ExecResult,
  ProcessOptions,
  SandboxCapabilities,
  SandboxCreateInput,
  SandboxDestroyInput,
  SandboxFs,
  SandboxGit,
  SandboxHandle,
  SandboxProcess,
  SandboxProvider,
  SandboxRestoreInput,
  SandboxResumeInput,
  SnapshotRef,
  SpawnHandle,
  WorkspaceDefinition,
} from '@tanstack/ai-sandbox'
import type { Settings } from './api.js'
import { WarrenClient } from './client.js'
import { isWarrenError, WarrenError } from './errors.js'

/** The root of a workspace inside its jail, and the contract's virtual root. */
export const WORKSPACE = '/workspace'

/** Options of {@link warrenSandbox}. */
export interface WarrenSandboxOptions {
  /** The daemon's API socket, e.g. `/var/lib/warren/warren.sock`. */
  socketPath: string
  /** The tenant of every sandbox this provider makes (default `default`). */
  tenant?: string
  /** Settings of the threads it binds (jail network, limits, variables...). */
  settings?: Settings
  /** How long a command of process.exec may run, in seconds (default: the daemon's, 10 minutes). */
  execTimeoutSeconds?: number
}

/** What warren's sandboxes can do; `killableProcesses` and `lstat` are from newer contract revisions. */
export const warrenCapabilities: SandboxCapabilities & { killableProcesses: boolean } = {
  fs: true,
  exec: true,
  env: true,
  ports: false,
  backgroundProcesses: true,
  writableStdin: true,
  snapshots: true,
  networkPolicy: false,
  durableFilesystem: true,
  fork: true,
  killableProcesses: true,
}

/** A sandbox of warren, with the newer contract's `fs.lstat`. */
export interface WarrenSandboxHandle extends SandboxHandle {
  readonly tenant: string
  readonly fs: SandboxFs & {
    lstat: (p: string) => Promise<{ type: 'file' | 'dir' | 'symlink' | 'other'; mode: number; size: number } | undefined>
  }
}

/** The provider. */
export interface WarrenSandboxProvider extends SandboxProvider {
  readonly client: WarrenClient
  readonly tenant: string
}

/** Makes a provider of warren sandboxes on the daemon at socketPath. */
export function warrenSandbox(opts: WarrenSandboxOptions): WarrenSandboxProvider {
  const client = new WarrenClient(opts.socketPath)
  const tenant = opts.tenant ?? 'default'

  const handleOf = (thread: string, mountPath: string): WarrenSandboxHandle =>
    makeHandle(client, tenant, thread, mountPath, opts, provider)

  const provider: WarrenSandboxProvider = {
    name: 'warren',
    client,
    tenant,
    capabilities: () => ({ ...warrenCapabilities }),

    // create binds the thread id (idempotent: the same id gets the same
    // workspace), or a fresh one; env goes into the thread's settings.
    async create(input: SandboxCreateInput): Promise<SandboxHandle> {
      const thread = input.id ?? `sbx-${randomBytes(6).toString('hex')}`
      const settings = withEnv(opts.settings, input.env)
      const b = await client.bind(tenant, thread, settings, { signal: input.signal })
      const h = handleOf(thread, b.mountPath)
      if (input.workspace?.source.type === 'local') {
        await copyIn(h, input.workspace.source.path, input.signal)
      }
      return h
    },

    // resume binds a thread that exists; null when it is not there, or gone.
    async resume(input: SandboxResumeInput): Promise<SandboxHandle | null> {
      try {
        const info = await client.threadInfo(tenant, input.id, { signal: input.signal })
        if (info.state === 'gone' || info.state === 'deleting') return null
        const b = await client.bind(tenant, input.id, undefined, { signal: input.signal })
        return handleOf(input.id, b.mountPath)
      } catch (err) {
        if (isWarrenError(err, 'not_found') || isWarrenError(err, 'gone')) return null
        throw err
      }
    },

    // A snapshot id names a thread and one of its checkpoints; restoring it
    // forks a new thread there (the snapshot's thread is left as it is).
    async restoreSnapshot(input: SandboxRestoreInput): Promise<SandboxHandle> {
      const { thread, checkpoint } = parseSnapshotId(input.snapshotId)
      const f = await client.fork(tenant, thread, { checkpoint }, { signal: input.signal })
      if (input.env && Object.keys(input.env).length > 0) {
        await client.bind(tenant, f.binding.thread, withEnv(f.binding.settings, input.env), { signal: input.signal })
      }
      return handleOf(f.binding.thread, f.mountPath)
    },

    // destroy deletes the thread: its folder, records and checkpoints.
    async destroy(input: SandboxDestroyInput): Promise<void> {
      try {
        await client.deleteThread(tenant, input.id, { signal: input.signal })
      } catch (err) {
        if (!isWarrenError(err, 'not_found')) throw err
      }
    },
  }
  return provider
}

/** settings with more variables. */
function withEnv(s: Settings | undefined, env: Record<string, string> | undefined): Settings | undefined {
  if (!env || Object.keys(env).length === 0) return s
  return { ...s, env: { ...s?.env, ...env } }
}

/** A snapshot id: the thread, escaped, `@`, the checkpoint. */
export function snapshotId(thread: string, checkpoint: string): string {
  return `${encodeURIComponent(thread)}@${checkpoint}`
}

/** The thread and checkpoint a snapshot id names. */
export function parseSnapshotId(id: string): { thread: string; checkpoint: string } {
  const at = id.lastIndexOf('@')
  if (at <= 0 || at === id.length - 1) {
    throw new WarrenError(400, 'invalid', `${JSON.stringify(id)} is not a snapshot id of warren (thread@checkpoint).`)
  }
  return { thread: decodeURIComponent(id.slice(0, at)), checkpoint: id.slice(at + 1) }
}

/**
 * The path the file API takes for a path the harness gives: inside the
 * workspace, relative to it. `/workspace/...` and the thread's mount path
 * are the workspace; another absolute path is passed on, to be refused as
 * outside.
 */
export function toWorkspacePath(p: string, mountPath: string): string {
  for (const root of [WORKSPACE, mountPath]) {
    if (p === root) return '.'
    if (p.startsWith(root + '/')) return p.slice(root.length + 1) || '.'
  }
  return p === '' ? '.' : p
}

/** The folder a command runs in, in the jail, for a cwd the harness gives. */
function jailCwd(cwd: string | undefined, mountPath: string): string | undefined {
  if (cwd === undefined) return undefined
  const rel = toWorkspacePath(cwd, mountPath)
  if (rel === '.') return WORKSPACE
  return path.posix.isAbsolute(rel) ? rel : `${WORKSPACE}/${rel}`
}

function makeHandle(
  client: WarrenClient,
  tenant: string,
  thread: string,
  mountPath: string,
  opts: WarrenSandboxOptions,
  provider: WarrenSandboxProvider,
): WarrenSandboxHandle {
  const rel = (p: string) => toWorkspacePath(p, mountPath)

  const fs: WarrenSandboxHandle['fs'] = {
    async read(p) {
      const r = await client.readRaw(tenant, thread, rel(p))
      return Buffer.from(r.data).toString('utf8')
    },
    async readBytes(p) {
      return (await client.readRaw(tenant, thread, rel(p))).data
    },
    async write(p, data) {
      const target = rel(p)
      try {
        await client.writeRaw(tenant, thread, target, data)
      } catch (err) {
        // The folders on the way are made, as the other providers do.
        if (!isWarrenError(err, 'not_found') || path.posix.dirname(target) === '.') throw err
        await client.mkdir(tenant, thread, path.posix.dirname(target), true)
        await client.writeRaw(tenant, thread, target, data)
      }
    },
    async list(p) {
      const r = await client.list(tenant, thread, rel(p))
      const base = p.replace(/\/+$/, '')
      return r.entries.map((e) => {
        const name = e.name ?? path.posix.basename(e.path)
        return { name, path: base === '' ? name : `${base}/${name}`, type: e.type === 'dir' ? ('dir' as const) : ('file' as const) }
      })
    },
    async mkdir(p) {
      await client.mkdir(tenant, thread, rel(p), true)
    },
    async remove(p) {
      try {
        await client.remove(tenant, thread, rel(p), true)
      } catch (err) {
        if (!isWarrenError(err, 'not_found')) throw err
      }
    },
    async rename(from, to) {
      await client.rename(tenant, thread, rel(from), rel(to), true)
    },
    async exists(p) {
      return (await client.exists(tenant, thread, rel(p))).exists
    },
    async lstat(p) {
      try {
        const e = await client.stat(tenant, thread, rel(p), false)
        return { type: e.type, mode: e.mode, size: e.size }
      } catch (err) {
        if (isWarrenError(err, 'not_found')) return undefined
        throw err
      }
    },
  }

  const exec = async (command: string, o: ProcessOptions = {}): Promise<ExecResult> => {
    const r = await client.exec(
      tenant,
      thread,
      {
        command,
        cwd: jailCwd(o.cwd, mountPath),
        env: o.env,
        timeoutSeconds: opts.execTimeoutSeconds,
      },
      { signal: o.signal },
    )
    return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode }
  }

  const spawn = async (command: string, o: ProcessOptions = {}): Promise<SpawnHandle> => {
    o.signal?.throwIfAborted()
    const job = await client.spawn(tenant, thread, { command, cwd: jailCwd(o.cwd, mountPath), env: o.env })
    return spawnHandle(client, tenant, thread, job.id, Number(job.backendId ?? 0), o.signal)
  }

  const process: SandboxProcess = { exec, spawn }
  const handle: WarrenSandboxHandle = {
    id: thread,
    tenant,
    provider: 'warren',
    workspaceRoot: mountPath,
    capabilities: { ...warrenCapabilities },
    fs,
    git: execGit(process, fs),
    process,
    ports: {
      connect: async () => {
        throw new UnsupportedCapabilityError('warren', 'ports', 'warren does not expose ports of a sandbox yet.')
      },
    },
    env: {
      // The variables join the thread's settings: every later command
      // gets them.
      async set(vars) {
        const info = await client.threadInfo(tenant, thread)
        await client.bind(tenant, thread, withEnv(info.settings ?? opts.settings, vars))
      },
    },
    async snapshot(label?: string): Promise<SnapshotRef> {
      const r = await client.checkpoint(tenant, thread, { label })
      const ref: SnapshotRef = { id: snapshotId(thread, r.checkpoint.id) }
      if (label !== undefined) ref.label = label
      return ref
    },
    async fork(): Promise<SandboxHandle> {
      const f = await client.fork(tenant, thread, {})
      return makeHandle(client, tenant, f.binding.thread, f.mountPath, opts, provider)
    },
    async destroy() {
      await provider.destroy({ id: thread })
    },
  }
  return handle
}

/** A job as the contract's SpawnHandle. */
function spawnHandle(
  client: WarrenClient,
  tenant: string,
  thread: string,
  id: string,
  pid: number,
  signal: AbortSignal | undefined,
): SpawnHandle {
  const stream = (name: 'stdout' | 'stderr'): AsyncIterable<string> => ({
    async *[Symbol.asyncIterator]() {
      for await (const f of client.jobOutput(tenant, thread, id, { stream: name, follow: true })) {
        if (f.data) yield f.data
        if (f.end) return
      }
    },
  })
  let exit: Promise<number> | undefined
  // The end comes as the last frame of the job's output: followed from
  // where the output is now, so what was written before is not read again.
  const wait = () => {
    exit ??= (async () => {
      const info = await client.job(tenant, thread, id)
      if (info.ended) return info.exitCode ?? -1
      for await (const f of client.jobOutput(tenant, thread, id, { follow: true, offset: info.outputBytes ?? 0 })) {
        if (f.end) return f.exit ?? -1
      }
      return (await client.job(tenant, thread, id)).exitCode ?? -1
    })()
    return exit
  }
  const kill = async (sig?: NodeJS.Signals | number) => {
    try {
      await client.jobSignal(tenant, thread, id, sig ?? 'SIGTERM')
    } catch (err) {
      // A job that ended already is killed enough.
      if (!isWarrenError(err, 'conflict')) throw err
    }
  }
  signal?.addEventListener('abort', () => void kill('SIGKILL').catch(() => {}), { once: true })
  return {
    pid,
    stdout: stream('stdout'),
    stderr: stream('stderr'),
    stdin: {
      write: (data: string) => client.jobStdin(tenant, thread, id, data),
      end: () => client.jobStdin(tenant, thread, id, '', true),
    },
    wait,
    kill,
  }
}

/**
 * git through the jail's own git (process.exec), as the contract allows; a
 * clone of a repository on this host (a path, or file://) is carried in
 * as a bundle, since the jail sees none of the host's files.
 */
function execGit(process: SandboxProcess, fs: SandboxFs): SandboxGit {
  const git = createExecBackedGit(process, WORKSPACE)
  return {
    ...git,
    clone: async (input) => {
      const local = localRepo(input.url)
      if (local === undefined || !(await isDir(local))) return git.clone(input)
      if (input.dir?.startsWith('-')) throw new Error('warren git: dir must not begin with "-".')
      const bundle = await hostBundle(local)
      const name = `.warren-clone-${randomBytes(4).toString('hex')}.bundle`
      await fs.write(`${WORKSPACE}/${name}`, bundle)
      const target = input.dir ?? WORKSPACE
      const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`
      const ref = input.ref ? `--branch ${q(input.ref)} ` : ''
      // Cloned aside, then moved in: the target may be the workspace
      // itself, which holds the bundle.
      const r = await process.exec(
        `set -e; tmp=$(mktemp -d); git clone -q ${ref}-- ${q(`${WORKSPACE}/${name}`)} "$tmp/repo"; ` +
          `git -C "$tmp/repo" remote set-url origin ${q(input.url)}; rm -f ${q(`${WORKSPACE}/${name}`)}; ` +
          `mkdir -p ${q(target)}; (cd "$tmp/repo" && tar -cf - .) | (cd ${q(target)} && tar -xf -); rm -rf "$tmp"`,
      )
      if (r.exitCode !== 0) {
        await fs.remove(`${WORKSPACE}/${name}`).catch(() => {})
        throw new Error(`git clone ${input.url}: exit ${r.exitCode}: ${r.stderr.trim()}`)
      }
    },
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
 * folders, files (with their modes) and links, through the file API.
 */
async function copyIn(h: WarrenSandboxHandle, from: string, signal: AbortSignal | undefined): Promise<void> {
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const e of await fsp.readdir(dir, { withFileTypes: true })) {
      signal?.throwIfAborted()
      const src = path.join(dir, e.name)
      const dst = rel === '' ? e.name : `${rel}/${e.name}`
      if (e.isDirectory()) {
        await h.fs.mkdir(`${WORKSPACE}/${dst}`)
        await walk(src, dst)
      } else if (e.isFile()) {
        await h.fs.write(`${WORKSPACE}/${dst}`, await fsp.readFile(src))
        const mode = (await fsp.stat(src)).mode & 0o777
        if (mode & 0o111) {
          await h.process.exec(`chmod ${mode.toString(8)} -- '${dst.replace(/'/g, `'\\''`)}'`)
        }
      } else if (e.isSymbolicLink()) {
        const target = await fsp.readlink(src)
        const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`
        await h.process.exec(`ln -sfn -- ${q(target)} ${q(dst)}`)
      }
    }
  }
  await walk(from, '')
}

export type { WorkspaceDefinition }
