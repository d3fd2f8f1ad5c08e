/**
 * Real daemons for the tests: `warren serve` from the repository's bin/
 * (built if missing), each on a data folder of its own, stopped by its pid
 * and its mounts detached when the test ends, whatever happened; and a
 * real single-member etcd for daemons that share their metadata.
 *
 * Each process is started under `setpriv --pdeathsig`, so that it gets a
 * signal if the test process dies before its cleanups run: a daemon
 * SIGTERM (it unmounts and stops), etcd SIGKILL. Their output goes to a
 * file, not a pipe to this process: a Go program that writes to a pipe
 * whose reader died is killed by SIGPIPE, and a daemon killed so in its
 * shutdown would leave its mounts behind.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import * as path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestContext } from 'node:test'
import { WarrenClient } from '../src/client.js'

/** argv that runs argv, signalled with sig when this process dies. */
function tied(sig: NodeJS.Signals, argv: string[]): [string, string[]] {
  return ['setpriv', ['--pdeathsig', sig, '--', ...argv]]
}

/** The repository's root: clients/typescript/dist/test → four levels up. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..')

/** The warren CLI, built with its daemon beside it if need be. */
export function warrenBinary(): string {
  const bin = path.join(repoRoot, 'bin', 'warren')
  if (!existsSync(bin) || !existsSync(path.join(repoRoot, 'bin', 'warrend'))) {
    execFileSync('go', ['build', '-o', bin, './cmd/warren'], { cwd: repoRoot, env: { ...process.env, CGO_ENABLED: '0' }, stdio: 'inherit' })
    execFileSync('go', ['build', '-o', path.join(repoRoot, 'bin', 'warrend'), './cmd/warrend'], { cwd: repoRoot, stdio: 'inherit' })
  }
  return bin
}

/**
 * Whether this machine can run daemons (root, /dev/fuse). Under CI=true a
 * missing capability fails the test; elsewhere it skips it.
 */
export function requireDaemons(t: TestContext): boolean {
  const why =
    process.getuid?.() !== 0 ? 'not root' : !existsSync('/dev/fuse') ? 'no /dev/fuse' : undefined
  if (why === undefined) return true
  if (process.env.CI === 'true') throw new Error(`cannot run warren daemons here (${why}), and CI=true`)
  t.skip(`cannot run warren daemons here: ${why}`)
  return false
}

/** A running daemon. */
export class Daemon {
  readonly dir: string
  readonly data: string
  readonly socket: string
  readonly args: string[]
  private child: ChildProcess | undefined
  private exited: Promise<void> | undefined
  /** Where its output goes. */
  readonly logPath: string

  constructor(dir: string, args: string[] = []) {
    this.dir = dir
    this.data = path.join(dir, 'data')
    this.socket = path.join(this.data, 'warren.sock')
    this.logPath = path.join(dir, 'warren.log')
    this.args = args
  }

  /** The daemon's pid, 0 while it is down. */
  get pid(): number {
    return this.child?.pid ?? 0
  }

  /** Starts it and waits until its socket answers. */
  async start(): Promise<void> {
    const [cmd, argv] = tied('SIGTERM', [warrenBinary(), 'serve', '--data', this.data, '--log-level', 'debug', '--disk-image', 'off', ...this.args])
    const out = openSync(this.logPath, 'a')
    let child: ChildProcess
    try {
      child = spawn(cmd, argv, { stdio: ['ignore', out, out] })
    } finally {
      closeSync(out)
    }
    this.child = child
    this.exited = new Promise((resolve) => child.on('exit', () => resolve()))
    const c = new WarrenClient(this.socket)
    try {
      const deadline = Date.now() + 20_000
      for (;;) {
        try {
          await c.threads()
          return
        } catch (err) {
          if (child.exitCode !== null) throw new Error(`warren serve exited at start: ${this.log}`)
          if (Date.now() > deadline) throw new Error(`warren serve did not answer within 20 s: ${String(err)}\n${this.log}`)
          await new Promise((r) => setTimeout(r, 50))
        }
      }
    } finally {
      c.close()
    }
  }

  /** Its output so far. */
  get log(): string {
    try {
      return readFileSync(this.logPath, 'utf8')
    } catch {
      return ''
    }
  }

  /** Ends it with sig (SIGTERM by default; SIGKILL after 20 s) and waits. */
  async stop(sig: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    child.kill(sig)
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000)
    await this.exited
    clearTimeout(timer)
    this.child = undefined
  }

  client(): WarrenClient {
    return new WarrenClient(this.socket)
  }
}

/** What the tests' t.after and t.before take: a test's or a suite's context. */
interface Cleanups {
  after: (fn: () => unknown) => void
}

/** Starts a daemon for t, stopped and cleaned up when t ends. */
export async function startDaemon(t: Cleanups, args: string[] = []): Promise<Daemon> {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-ts-'))
  const d = new Daemon(dir, args)
  t.after(async () => {
    await d.stop()
    cleanUp(dir)
  })
  await d.start()
  return d
}

/** The etcd server built from tools/etcd (the repository's bin/etcd), built if missing. */
export function etcdBinary(): string {
  const bin = path.join(repoRoot, 'bin', 'etcd')
  if (!existsSync(bin)) {
    execFileSync('go', ['build', '-o', bin, '-ldflags=-s -w', '.'], {
      cwd: path.join(repoRoot, 'tools', 'etcd'),
      env: { ...process.env, GOWORK: 'off', CGO_ENABLED: '0' },
      stdio: 'inherit',
    })
  }
  return bin
}

/** n loopback TCP ports that were free a moment ago, all different. */
async function freePorts(n: number): Promise<number[]> {
  const servers: net.Server[] = []
  try {
    for (let i = 0; i < n; i++) {
      const srv = net.createServer()
      await new Promise<void>((resolve, reject) => srv.once('error', reject).listen(0, '127.0.0.1', resolve))
      servers.push(srv)
    }
    return servers.map((srv) => (srv.address() as net.AddressInfo).port)
  } finally {
    await Promise.all(servers.map((srv) => new Promise((resolve) => srv.close(resolve))))
  }
}

/** A single-member etcd on loopback ports with a data folder of its own. */
export interface Etcd {
  endpoint: string
  pid: number
}

/**
 * Starts a real single-member etcd for t on free loopback ports and a
 * temporary data folder, and waits until it is healthy; it is killed by
 * its pid and its folder removed when t ends.
 */
export async function startEtcd(t: Cleanups): Promise<Etcd> {
  const bin = etcdBinary()
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-ts-etcd-'))
  const [clientPort, peerPort] = await freePorts(2)
  const clientURL = `http://127.0.0.1:${clientPort}`
  const peerURL = `http://127.0.0.1:${peerPort}`
  const [cmd, argv] = tied('SIGKILL', [
    bin,
    '--name', 'm0',
    '--data-dir', path.join(dir, 'm0'),
    '--listen-client-urls', clientURL,
    '--advertise-client-urls', clientURL,
    '--listen-peer-urls', peerURL,
    '--initial-advertise-peer-urls', peerURL,
    '--initial-cluster', `m0=${peerURL}`,
    '--initial-cluster-state', 'new',
    '--unsafe-no-fsync',
    '--log-outputs', 'stderr',
  ])
  const logPath = path.join(dir, 'etcd.log')
  const out = openSync(logPath, 'a')
  let child: ChildProcess
  try {
    child = spawn(cmd, argv, { stdio: ['ignore', out, out] })
  } finally {
    closeSync(out)
  }
  const log = () => readFileSync(logPath, 'utf8').slice(-8192)
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  })
  const deadline = Date.now() + 60_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`etcd exited at start:\n${log()}`)
    const health = await new Promise<string>((resolve) => {
      const req = http.get(`${clientURL}/health`, { timeout: 2000 }, (res) => {
        let body = ''
        res.on('data', (b: Buffer) => (body += b.toString()))
        res.on('end', () => resolve(body))
      })
      req.on('error', () => resolve(''))
      req.on('timeout', () => req.destroy())
    })
    if (health.includes('"health":"true"')) return { endpoint: clientURL, pid: child.pid ?? 0 }
    if (Date.now() > deadline) throw new Error(`etcd not healthy within 60 s:\n${log()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/**
 * Detaches every mount left under dir, deepest first, lets go of the
 * mount points' immutable flag and removes dir.
 */
export function cleanUp(dir: string): void {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m === dir || m.startsWith(dir + '/'))
    .sort()
    .reverse()
  for (const m of mounts) {
    try {
      execFileSync('umount', ['-l', m])
    } catch {
      // gone already
    }
  }
  try {
    execFileSync('sh', ['-c', 'chattr -i "$1"/data/mnt/*/* 2>/dev/null; true', 'sh', dir])
  } catch {
    // no mount points
  }
  rmSync(dir, { recursive: true, force: true })
}
