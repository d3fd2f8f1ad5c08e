/**
 * The package as a user gets it, from a fresh copy of this folder (its
 * sources as a clone has them: no dist/, no node_modules):
 *
 *   - after `npm ci` (here: this folder's node_modules, linked in), `npm
 *     pack` makes a tarball of what `files` lists, dist/src built by the
 *     prepare script, and that tarball installs in a new project, its
 *     peer (@tanstack/ai-sandbox, in the range) from the registry or the
 *     npm cache `npm ci` filled, loads from ESM and from CommonJS, and its
 *     types check in a strict TypeScript project;
 *   - `npm install /path/to/the/folder` builds dist/src there (prepare
 *     installs the build's tools first when the folder has none), linked
 *     or, with `--install-links`, copied;
 *   - the README's whole file (coder.mjs) runs as it is, in the project
 *     the tarball went into, against a real daemon.
 *
 * The npm that runs the tests runs these (npm_execpath), with the
 * caller's cache and registry and `--prefer-offline`, so that what `npm
 * ci` fetched is not fetched again.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import * as path from 'node:path'
import { after, test } from 'node:test'
import { promisify } from 'node:util'
import { WarrenClient } from '../src/client.js'
import { repoRoot, requireDaemons, startDaemon } from './daemon.js'
import { makeRepo } from './helpers.js'

const run = promisify(execFile)
const pkgRoot = path.join(repoRoot, 'clients', 'typescript')
const work = mkdtempSync(path.join(tmpdir(), 'warren-ts-pkg-'))
after(() => rmSync(work, { recursive: true, force: true }))

/**
 * The environment of an npm the test runs: this one's, less what the npm
 * that runs the tests set for its own package (npm_package_*, its
 * lifecycle, its local prefix), keeping the settings that say where
 * packages come from.
 */
function npmEnv(): NodeJS.ProcessEnv {
  const keep = new Set(['npm_config_cache', 'npm_config_registry', 'npm_config_userconfig', 'npm_config_globalconfig', 'npm_config_cafile'])
  const env: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.toLowerCase().startsWith('npm_') || keep.has(k.toLowerCase())) env[k] = v
  }
  return env
}

/** Runs npm with args in cwd; a failure carries its output. */
async function npm(cwd: string, ...args: string[]): Promise<string> {
  const cli = process.env.npm_execpath
  const [cmd, pre] = cli && /\.[cm]?js$/.test(cli) ? [process.execPath, [cli]] : ['npm', []]
  try {
    const { stdout } = await run(cmd, [...pre, ...args, '--no-audit', '--no-fund'], { cwd, env: npmEnv(), maxBuffer: 64 << 20, timeout: 150_000 })
    return stdout
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string }
    throw new Error(`npm ${args.join(' ')} in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`)
  }
}

/** Runs node with args in dir; its stdout. */
async function node(dir: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  try {
    const { stdout } = await run(process.execPath, args, { cwd: dir, env: { ...npmEnv(), ...env }, timeout: 60_000 })
    return stdout
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string }
    throw new Error(`node ${args.join(' ')} in ${dir}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`)
  }
}

/** A copy of this folder as a fresh clone has it: no node_modules, no dist, no tarball. */
function freshCopy(name: string): string {
  const dst = path.join(work, name)
  cpSync(pkgRoot, dst, {
    recursive: true,
    filter: (src) => {
      const rel = path.relative(pkgRoot, src)
      return rel !== 'node_modules' && rel !== 'dist' && !rel.endsWith('.tgz')
    },
  })
  return dst
}

/** A new empty project of this host (CommonJS, npm's default). */
function project(name: string): string {
  const dir = path.join(work, name)
  mkdirSync(dir)
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true }) + '\n')
  return dir
}

/** What a project that installed the package checks: it loads, and its calls work (here: no daemon, the hint). */
const esmCheck = `import { warrenSandbox, WarrenClient, WarrenUnreachableError } from '@warren/sandbox'
const warren = warrenSandbox({ socketPath: '/nonexistent/warren.sock' })
const err = await warren.create({}).catch((e) => e)
console.log(JSON.stringify({ provider: typeof warrenSandbox, client: typeof WarrenClient, unreachable: err instanceof WarrenUnreachableError, message: err.message }))
`
const cjsCheck = `// CommonJS loads the ES module with import(), as it loads @tanstack/ai-sandbox.
import('@warren/sandbox').then((m) => console.log(JSON.stringify({ provider: typeof m.warrenSandbox, caps: m.warrenCapabilities.fs })))
`

/** Runs the checks in dir, which installed the package. */
async function checkInstalled(dir: string): Promise<void> {
  writeFileSync(path.join(dir, 'check.mjs'), esmCheck)
  writeFileSync(path.join(dir, 'check.cjs'), cjsCheck)
  const esm = JSON.parse(await node(dir, ['check.mjs'])) as { message: string }
  assert.match(esm.message, /: no daemon answers on \/nonexistent\/warren\.sock \(is 'warren serve' running\? set socketPath or WARREN_SOCKET\): connect ENOENT /)
  assert.deepEqual(esm, { provider: 'function', client: 'function', unreachable: true, message: esm.message })
  assert.deepEqual(JSON.parse(await node(dir, ['check.cjs'])), { provider: 'function', caps: true })
}

/** The tarball `npm pack` makes of a fresh copy after npm ci, and the project it was installed in; made once. */
let packedOnce: Promise<{ tarball: string; files: string[]; app: string }> | undefined
function packed(): Promise<{ tarball: string; files: string[]; app: string }> {
  packedOnce ??= (async () => {
    const src = freshCopy('packed')
    // What `npm ci` leaves there: the lock file's packages, installed.
    symlinkSync(path.join(pkgRoot, 'node_modules'), path.join(src, 'node_modules'))
    const out = JSON.parse(await npm(src, 'pack', '--json', '--pack-destination', work)) as [{ filename: string; files: { path: string }[] }]
    const tarball = path.join(work, out[0].filename)
    const app = project('app')
    await npm(app, 'install', '--prefer-offline', tarball)
    return { tarball, files: out[0].files.map((f) => f.path).sort(), app }
  })()
  return packedOnce
}

test('npm pack after npm ci: a tarball of what files lists, which installs in a new project and loads', { timeout: 180_000 }, async () => {
  const { files, app } = await packed()
  // dist/src, built by prepare, and the sources its maps point at; no test, bench or build files.
  for (const f of ['package.json', 'README.md', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/provider.js', 'dist/src/index.js.map', 'src/index.ts']) {
    assert.ok(files.includes(f), `the tarball holds ${f}: ${files.join(' ')}`)
  }
  const stray = files.filter((f) => !/^(package\.json|README\.md|dist\/src\/[^/]+\.(js|d\.ts)(\.map)?|src\/[^/]+\.ts)$/.test(f))
  assert.deepEqual(stray, [], 'the tarball holds nothing else')
  // The peer came in, in the range (the release the registry serves).
  const peer = JSON.parse(readFileSync(path.join(app, 'node_modules', '@tanstack', 'ai-sandbox', 'package.json'), 'utf8')) as { version: string }
  assert.match(peer.version, /^0\.\d+\.\d+/)
  const manifest = JSON.parse(readFileSync(path.join(app, 'node_modules', '@warren', 'sandbox', 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> }
  assert.deepEqual(manifest.peerDependencies, { '@tanstack/ai-sandbox': '>=0.2.4 <1' })
  await checkInstalled(app)

  // Its types: a TypeScript project that strictly checks its own code
  // against them, and the provider is the contract's SandboxProvider, of
  // the one @tanstack/ai-sandbox the project has.
  writeFileSync(
    path.join(app, 'check.mts'),
    `import type { SandboxProvider } from '@tanstack/ai-sandbox'
import { warrenSandbox, WarrenUnreachableError, type WarrenSandboxProvider } from '@warren/sandbox'
const warren: WarrenSandboxProvider = warrenSandbox({ tenant: 'acme' })
export const provider: SandboxProvider = warren
export const isUnreachable = (err: unknown): boolean => err instanceof WarrenUnreachableError && err.code === 'unreachable'
`,
  )
  const tsconfig = {
    compilerOptions: {
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      target: 'ES2022',
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      // The project's own @types/node; here, this folder's.
      typeRoots: [path.join(pkgRoot, 'node_modules', '@types')],
      types: ['node'],
    },
    files: ['check.mts'],
  }
  writeFileSync(path.join(app, 'tsconfig.json'), JSON.stringify(tsconfig))
  try {
    await run(process.execPath, [path.join(pkgRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], { cwd: app })
  } catch (err) {
    const e = err as { stdout?: string; message: string }
    assert.fail(`tsc in the new project: ${e.message}\n${e.stdout ?? ''}`)
  }
})

test('npm install /path/to/clients/typescript on a fresh clone: prepare builds dist, linked or copied', { timeout: 180_000 }, async () => {
  const src = freshCopy('clone')
  assert.equal(existsSync(path.join(src, 'dist')), false)

  const linked = project('linked')
  await npm(linked, 'install', '--prefer-offline', src)
  assert.ok(lstatSync(path.join(linked, 'node_modules', '@warren', 'sandbox')).isSymbolicLink(), 'npm links a folder')
  assert.ok(existsSync(path.join(src, 'dist', 'src', 'index.js')), 'prepare built dist/src in the folder')
  await checkInstalled(linked)

  // --install-links: a copy of what npm pack would ship, its peer in the project.
  const copied = project('copied')
  await npm(copied, 'install', '--prefer-offline', '--install-links', src)
  assert.ok(!lstatSync(path.join(copied, 'node_modules', '@warren', 'sandbox')).isSymbolicLink(), 'a copy')
  assert.ok(existsSync(path.join(copied, 'node_modules', '@tanstack', 'ai-sandbox', 'package.json')), 'the peer is installed in the project')
  await checkInstalled(copied)
})

/** The README's whole file: the js block that begins `// coder.mjs`. */
function wholeFile(readme: string): string {
  const m = /```js\n(\/\/ coder\.mjs[\s\S]*?)```\n/.exec(readme)
  assert.ok(m?.[1], 'the README shows coder.mjs')
  return m[1]
}

test("the README's whole file runs as it is, from the installed tarball, on a daemon", { timeout: 180_000 }, async (t) => {
  const own = readFileSync(path.join(pkgRoot, 'README.md'), 'utf8')
  const main = readFileSync(path.join(repoRoot, 'README.md'), 'utf8')
  const file = wholeFile(own)
  assert.equal(wholeFile(main), file, "README.md's harness section shows the package README's coder.mjs")
  if (!requireDaemons(t)) return
  const { app } = await packed()
  writeFileSync(path.join(app, 'coder.mjs'), file)
  const d = await startDaemon(t)
  const repo = makeRepo(t, { 'src/app.ts': 'export const login = () => false\n' })

  const out = await node(app, ['coder.mjs', repo], { WARREN_SOCKET: d.socket })
  assert.equal(out, ' src/app.ts | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n')
  const c = new WarrenClient(d.socket)
  t.after(() => c.close())
  const threads = await c.threads('acme')
  assert.equal(threads.length, 1, 'one sandbox: one thread of tenant acme')
  const mount = threads[0]?.mountPath ?? ''
  assert.equal(readFileSync(path.join(mount, 'src', 'app.ts'), 'utf8'), 'export const login = () => true\n')
  assert.equal(readFileSync(path.join(mount, '.setup-done'), 'utf8'), 'first\n')
})
