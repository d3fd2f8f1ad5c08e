/**
 * Real daemons for the tests: `warren serve` from the repository's bin/
 * (built if missing), each on a data folder of its own, stopped by its pid
 * and its mounts detached when the test ends, whatever happened.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import * as path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestContext } from 'node:test'
import { WarrenClient } from '../src/client.js'

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
  log = ''

  constructor(dir: string, args: string[] = []) {
    this.dir = dir
    this.data = path.join(dir, 'data')
    this.socket = path.join(this.data, 'warren.sock')
    this.args = args
  }

  /** The daemon's pid, 0 while it is down. */
  get pid(): number {
    return this.child?.pid ?? 0
  }

  /** Starts it and waits until its socket answers. */
  async start(): Promise<void> {
    const child = spawn(warrenBinary(), ['serve', '--data', this.data, '--log-level', 'debug', ...this.args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    this.child = child
    child.stdout?.on('data', (b: Buffer) => (this.log += b.toString()))
    child.stderr?.on('data', (b: Buffer) => (this.log += b.toString()))
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

/** Starts a daemon for t, stopped and cleaned up when t ends. */
export async function startDaemon(t: TestContext, args: string[] = []): Promise<Daemon> {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-ts-'))
  const d = new Daemon(dir, args)
  t.after(async () => {
    await d.stop()
    cleanUp(dir)
  })
  await d.start()
  return d
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
