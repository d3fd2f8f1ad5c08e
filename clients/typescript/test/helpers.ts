/**
 * What the provider's tests share: a git repository made on this host,
 * polling, and checks of the errors a harness gets.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import * as path from 'node:path'
import { WarrenError } from '../src/errors.js'

/** What t.after takes. */
interface Cleanups {
  after: (fn: () => unknown) => void
}

/**
 * A git repository on this host with files (path → content) in one commit
 * on branch main, removed when t ends.
 */
export function makeRepo(t: Cleanups, files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-ts-repo-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=test', '-c', 'user.email=test@example.com', ...args], { cwd: dir, stdio: 'pipe' })
  git('init', '-q', '-b', 'main')
  for (const [p, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, p)), { recursive: true })
    writeFileSync(path.join(dir, p), content)
  }
  git('add', '-A')
  git('commit', '-q', '-m', 'first')
  return dir
}

/** A folder of this host, removed when t ends. */
export function tempDir(t: Cleanups, prefix = 'warren-ts-'): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Calls f until it returns a value other than undefined, for at most ms. */
export async function eventually<T>(what: string, ms: number, f: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms
  let last: unknown
  for (;;) {
    try {
      const v = await f()
      if (v !== undefined) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${ms} ms${last === undefined ? '' : `: last error: ${String(last)}`}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** p, or a rejection once ms passed without it settling. */
export function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)
  })
  return Promise.race([p, late]).finally(() => clearTimeout(timer))
}

/** A check for assert.rejects: a WarrenError of class cls, code and, if given, exact message. */
export function warrenError(
  cls: abstract new (...args: never[]) => WarrenError,
  code: string,
  message?: string | RegExp,
): (err: unknown) => boolean {
  return (err: unknown) => {
    if (!(err instanceof cls)) throw new Error(`got ${String(err)}, want a ${cls.name}`)
    if (err.code !== code) throw new Error(`got code ${err.code} (${err.message}), want ${code}`)
    if (typeof message === 'string' && err.message !== message) {
      throw new Error(`got message ${JSON.stringify(err.message)}, want ${JSON.stringify(message)}`)
    }
    if (message instanceof RegExp && !message.test(err.message)) {
      throw new Error(`got message ${JSON.stringify(err.message)}, want one matching ${message}`)
    }
    return true
  }
}

/** Collects an async iterable of strings. */
export async function collect(it: AsyncIterable<string>): Promise<string> {
  let s = ''
  for await (const chunk of it) s += chunk
  return s
}
