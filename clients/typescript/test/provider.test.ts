/**
 * warrenSandbox against a real daemon: every method of the
 * @tanstack/ai-sandbox 0.2.4 contract (and the newer killableProcesses and
 * fs.lstat), two runs editing one file, a spawn fed over stdin and
 * killed, snapshots and forks, and bad input.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { promises as fsp, readFileSync } from 'node:fs'
import * as path from 'node:path'
import { test } from 'node:test'
import { localSource } from '@tanstack/ai-sandbox'
import type { SandboxHandle, SandboxProvider } from '@tanstack/ai-sandbox'
import {
  WarrenError,
  WarrenGoneError,
  WarrenNotFoundError,
  WarrenStaleError,
  WarrenUnreachableError,
} from '../src/errors.js'
import { warrenSandbox } from '../src/provider.js'
import type { WarrenSandboxHandle } from '../src/provider.js'
import { requireDaemons, startDaemon } from './daemon.js'
import { collect, eventually, makeRepo, tempDir, warrenError, within } from './helpers.js'

// The provider is a SandboxProvider, and its handles SandboxHandles, of
// the contract as the package declares it: a harness typed against 0.2.4
// takes it as it is.
const asContract = (p: ReturnType<typeof warrenSandbox>): SandboxProvider => p
const handleAsContract = (h: WarrenSandboxHandle): SandboxHandle => h

/** How many processes of the jail have a command line starting with prefix. */
async function running(h: SandboxHandle, prefix: string): Promise<number> {
  const r = await h.process.exec(
    `n=0; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in ${JSON.stringify(prefix)}*) n=$((n+1));; esac; done; echo $n`,
  )
  return Number(r.stdout.trim())
}

test('warrenSandbox: the contract on a real daemon', { timeout: 240_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme', settings: { maxJobs: 4 } })
  t.after(() => warren.close())
  assert.equal(asContract(warren).name, 'warren')

  await t.test('capabilities are declared honestly', async () => {
    const caps = warren.capabilities()
    assert.deepEqual(caps, {
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
    })
    const h = handleAsContract(await warren.create({ id: 'caps' }))
    assert.deepEqual(h.capabilities, caps)
    assert.equal(h.provider, 'warren')
  })

  await t.test('create binds the id given, idempotently, and mints one when none is given', async () => {
    const a = await warren.create({ id: 'fix-login' })
    assert.equal(a.id, 'fix-login')
    assert.equal(a.workspaceRoot, path.join(d.data, 'mnt', 'acme', 'fix-login'))
    await a.fs.write('kept.txt', 'kept\n')
    const again = await warren.create({ id: 'fix-login' })
    assert.equal(again.workspaceRoot, a.workspaceRoot)
    assert.equal(await again.fs.read('kept.txt'), 'kept\n')
    // The provider's settings are the thread's.
    assert.equal((await warren.client.threadInfo('acme', 'fix-login')).settings?.maxJobs, 4)

    const fresh = await warren.create({})
    assert.match(fresh.id, /^sbx-[0-9a-f]{12}$/)
    assert.notEqual(fresh.workspaceRoot, a.workspaceRoot)
  })

  await t.test('workspaceRoot is the mount path on this host, /workspace in the jail', async () => {
    const h = await warren.create({ id: 'root' })
    await h.fs.write('/workspace/hello.txt', 'hi\n')
    assert.equal(readFileSync(path.join(h.workspaceRoot!, 'hello.txt'), 'utf8'), 'hi\n')
    const r = await h.process.exec('pwd; cat hello.txt')
    assert.equal(r.stdout, '/workspace\nhi\n')
    // The mount path is the workspace too, for paths and for a cwd.
    assert.equal(await h.fs.read(path.join(h.workspaceRoot!, 'hello.txt')), 'hi\n')
    await h.fs.mkdir('sub')
    assert.equal((await h.process.exec('pwd', { cwd: path.join(h.workspaceRoot!, 'sub') })).stdout, '/workspace/sub\n')
  })

  await t.test('create with env and a localSource workspace copied in', async () => {
    const src = tempDir(t)
    await fsp.mkdir(path.join(src, 'src', 'lib'), { recursive: true })
    await fsp.mkdir(path.join(src, 'empty'))
    await fsp.writeFile(path.join(src, 'src', 'app.ts'), 'export const a = 1\n')
    await fsp.writeFile(path.join(src, 'run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 })
    await fsp.writeFile(path.join(src, 'bin.dat'), Buffer.from([0, 1, 2, 255]))
    await fsp.symlink('src/app.ts', path.join(src, 'app-link'))
    const h = await warren.create({ id: 'local', env: { STAGE: 'test' }, workspace: { source: localSource(src) } })
    assert.equal(await h.fs.read('src/app.ts'), 'export const a = 1\n')
    assert.deepEqual([...(await h.fs.readBytes('bin.dat'))], [0, 1, 2, 255])
    assert.equal(await h.fs.exists('empty'), true)
    assert.equal((await h.fs.lstat('app-link'))?.type, 'symlink')
    assert.equal(await h.fs.read('app-link'), 'export const a = 1\n')
    const r = await h.process.exec('./run.sh && echo "$STAGE"')
    assert.equal(r.stdout, 'ran\ntest\n')
    assert.equal(r.exitCode, 0)
    // A second create of the thread keeps what the agent made of it.
    await h.fs.write('src/app.ts', 'export const a = 2\n')
    const again = await warren.create({ id: 'local', workspace: { source: localSource(src) } })
    assert.equal(await again.fs.read('src/app.ts'), 'export const a = 2\n')
    assert.equal((await again.process.exec('echo "$STAGE"')).stdout, 'test\n')
  })

  await t.test('resume re-binds a thread that exists, null when it is not there', async () => {
    const h = await warren.create({ id: 'resumable' })
    await h.fs.write('a.txt', 'a')
    await warren.client.closeThread('acme', 'resumable')
    const r = await warren.resume({ id: 'resumable' })
    assert.ok(r)
    assert.equal(r.id, 'resumable')
    assert.equal(await r.fs.read('a.txt'), 'a')
    assert.equal((await warren.client.threadInfo('acme', 'resumable')).state, 'bound')
    assert.equal(await warren.resume({ id: 'never-made' }), null)
  })

  await t.test('destroy deletes the thread; its handle refuses after', async () => {
    const h = await warren.create({ id: 'doomed' })
    await h.fs.write('x', 'x')
    await h.destroy()
    assert.equal(await warren.resume({ id: 'doomed' }), null)
    await assert.rejects(warren.client.threadInfo('acme', 'doomed'), WarrenNotFoundError)
    await assert.rejects(h.fs.read('x'), warrenError(WarrenNotFoundError, 'not_found', 'The sandbox doomed was destroyed.'))
    // Not there: destroyed already.
    await warren.destroy({ id: 'doomed' })
    await assert.rejects(warren.client.threadInfo('acme', 'doomed'), WarrenNotFoundError)
    // A command whose thread is deleted under it fails as such.
    const busy = await warren.create({ id: 'busy' })
    const cmd = busy.process.exec('sleep 2004')
    cmd.catch(() => {}) // settled before assert.rejects looks at it
    await eventually('it runs', 5000, async () => ((await running(busy, 'sleep 2004')) === 1 ? true : undefined))
    await warren.destroy({ id: 'busy' })
    await assert.rejects(cmd, warrenError(WarrenError, 'internal', /^command exec-\d+: /))
    // A run aborted tears its sandbox down with its signal, which fired.
    await warren.create({ id: 'aborted-run' })
    await warren.destroy({ id: 'aborted-run', signal: AbortSignal.abort() })
    assert.equal(await warren.resume({ id: 'aborted-run' }), null)
  })

  await t.test('fs: read, readBytes, write, list, mkdir, remove, rename, exists, lstat', async () => {
    const h = await warren.create({ id: 'files' })
    // write makes the missing folders on the way; strings and bytes.
    await h.fs.write('/workspace/src/deep/app.ts', 'let a = 1\n')
    await h.fs.write('data/blob.bin', new Uint8Array([0xff, 0, 0x80]))
    assert.equal(await h.fs.read('src/deep/app.ts'), 'let a = 1\n')
    assert.deepEqual([...(await h.fs.readBytes('/workspace/data/blob.bin'))], [0xff, 0, 0x80])
    await assert.rejects(h.fs.read('missing.ts'), warrenError(WarrenNotFoundError, 'not_found', 'missing.ts: no such file.'))

    await h.fs.mkdir('/workspace/empty/inner')
    await h.fs.mkdir('empty/inner') // there already: fine
    await h.process.exec('ln -s src/deep linkdir; ln -s nothing dangling')

    // list: entries at `${p}/${name}`, as given, so a walker lists them in turn.
    assert.deepEqual(await h.fs.list('/workspace'), [
      { name: 'dangling', path: '/workspace/dangling', type: 'file' },
      { name: 'data', path: '/workspace/data', type: 'dir' },
      { name: 'empty', path: '/workspace/empty', type: 'dir' },
      { name: 'linkdir', path: '/workspace/linkdir', type: 'file' },
      { name: 'src', path: '/workspace/src', type: 'dir' },
    ])
    assert.deepEqual(await h.fs.list('src/'), [{ name: 'deep', path: 'src/deep', type: 'dir' }])
    assert.deepEqual(await h.fs.list(path.join(h.workspaceRoot, 'src', 'deep')), [
      { name: 'app.ts', path: path.join(h.workspaceRoot, 'src', 'deep', 'app.ts'), type: 'file' },
    ])
    assert.deepEqual(await h.fs.list('linkdir'), [{ name: 'app.ts', path: 'linkdir/app.ts', type: 'file' }])

    // exists follows links as test -e does: a dangling link does not exist.
    assert.equal(await h.fs.exists('src/deep/app.ts'), true)
    assert.equal(await h.fs.exists('src'), true)
    assert.equal(await h.fs.exists('linkdir/app.ts'), true)
    assert.equal(await h.fs.exists('dangling'), false)
    assert.equal(await h.fs.exists('nothing/here'), false)
    assert.equal(await h.fs.exists('src/deep/app.ts/below'), false)

    // lstat: the entry itself, st_mode as lstat(2) has it.
    assert.deepEqual(await h.fs.lstat('src/deep/app.ts'), { type: 'file', mode: 0o100644, size: 10 })
    assert.deepEqual(await h.fs.lstat('/workspace/dangling'), { type: 'symlink', mode: 0o120777, size: 7 })
    assert.equal((await h.fs.lstat('empty'))?.type, 'dir')
    assert.equal(((await h.fs.lstat('empty'))?.mode ?? 0) & 0o170000, 0o040000)
    assert.equal(await h.fs.lstat('no/such'), undefined)
    await h.process.exec('chmod 755 src/deep/app.ts')
    assert.equal((await h.fs.lstat('src/deep/app.ts'))?.mode, 0o100755)

    // rename, over what is there.
    await h.fs.write('notes.md', 'old')
    await h.fs.rename('src/deep/app.ts', '/workspace/notes.md')
    assert.equal(await h.fs.read('notes.md'), 'let a = 1\n')
    assert.equal(await h.fs.exists('src/deep/app.ts'), false)

    // remove: as rm -rf.
    await h.fs.remove('src')
    await h.fs.remove('dangling')
    await h.fs.remove('not-there')
    assert.equal(await h.fs.exists('src'), false)
    assert.equal((await h.fs.lstat('dangling')), undefined)
  })

  await t.test('process.exec: output, exit, cwd, env, and a signal that ends the command', async () => {
    const h = await warren.create({ id: 'exec' })
    const r = await h.process.exec('echo out; echo err >&2; exit 3')
    assert.deepEqual(r, { stdout: 'out\n', stderr: 'err\n', exitCode: 3 })
    await h.fs.mkdir('a/b')
    assert.equal((await h.process.exec('pwd', { cwd: 'a/b' })).stdout, '/workspace/a/b\n')
    assert.equal((await h.process.exec('pwd', { cwd: '/workspace/a' })).stdout, '/workspace/a\n')
    assert.equal((await h.process.exec('echo "$ONE $TWO"', { env: { ONE: '1', TWO: '2' } })).stdout, '1 2\n')

    const ac = new AbortController()
    const pending = h.process.exec('sleep 1234', { signal: ac.signal })
    await eventually('the command runs', 5000, async () => ((await running(h, 'sleep 1234')) === 1 ? true : undefined))
    ac.abort(new Error('enough'))
    await assert.rejects(within(5000, 'the aborted exec', pending), /enough/)
    // The daemon ended the command when its client hung up.
    await eventually('the command ends', 5000, async () => ((await running(h, 'sleep 1234')) === 0 ? true : undefined))
    // An aborted signal ends nothing that has not started.
    await assert.rejects(h.process.exec('true', { signal: AbortSignal.abort(new Error('never')) }), /never/)
  })

  await t.test('process.spawn: a short job is read whole; wait gives its exit', async () => {
    const h = await warren.create({ id: 'spawn-short' })
    const p = await h.process.spawn('echo first; echo second >&2; exit 5')
    assert.ok(p.pid > 0)
    assert.equal(await p.wait(), 5)
    // Read after its end: nothing of its first bytes is missed.
    assert.equal(await collect(p.stdout), 'first\n')
    assert.equal(await collect(p.stderr), 'second\n')
    assert.equal(await p.wait(), 5)
    // A job that ended is killed enough.
    await p.kill()
    await p.kill('SIGTERM')

    // Read while it runs, from its first byte on.
    const q = await h.process.spawn('printf one; sleep 0.3; printf two; sleep 0.3; printf three', { cwd: '/workspace' })
    const [out, code] = await Promise.all([collect(q.stdout), q.wait()])
    assert.equal(out, 'onetwothree')
    assert.equal(code, 0)
  })

  await t.test('process.spawn: fed over stdin, then killed with its whole tree', async () => {
    const h = await warren.create({ id: 'spawn-stdin' })
    const p = await h.process.spawn('sleep 2001 & while read line; do echo "got $line"; done')
    const lines = p.stdout[Symbol.asyncIterator]()
    let seen = ''
    const until = async (text: string) => {
      while (!seen.includes(text)) {
        const next = await within(10_000, `stdout to hold ${JSON.stringify(text)}`, lines.next())
        if (next.done) assert.fail(`stdout ended before ${JSON.stringify(text)}: ${JSON.stringify(seen)}`)
        seen += next.value
      }
    }
    await p.stdin.write('one\n')
    await until('got one\n')
    await p.stdin.write('two\n')
    await until('got two\n')
    assert.equal(seen, 'got one\ngot two\n')
    assert.equal(await running(h, 'sleep 2001'), 1)
    // kill() ends the tree: the shell and the sleep it left behind.
    await p.kill()
    assert.equal(await p.wait(), 143)
    assert.equal(await running(h, 'sleep 2001'), 0)
    await lines.return?.()

    // stdin.end ends the input.
    const c = await h.process.spawn('cat; echo done')
    await c.stdin.write('abc\n')
    await c.stdin.end()
    assert.equal(await c.wait(), 0)
    assert.equal(await collect(c.stdout), 'abc\ndone\n')

    // kill() ends even a job that ignores SIGTERM (SIGKILL after the grace).
    const stubborn = await h.process.spawn("trap '' TERM; sleep 2003 & wait; wait")
    await eventually('it runs', 5000, async () => ((await running(h, 'sleep 2003')) === 1 ? true : undefined))
    await stubborn.kill()
    assert.equal(await stubborn.wait(), 137)
    assert.equal(await running(h, 'sleep 2003'), 0)

    // kill(signal) sends that signal to the tree.
    const k = await h.process.spawn('trap "echo hup; exit 7" HUP; while :; do sleep 0.05; done')
    await eventually('the trap is set', 5000, async () => ((await running(h, 'sleep 0.05')) > 0 ? true : undefined))
    await k.kill('SIGHUP')
    assert.equal(await k.wait(), 7)
    assert.equal(await collect(k.stdout), 'hup\n')
  })

  await t.test('process.spawn: a signal ends the job', async () => {
    const h = await warren.create({ id: 'spawn-abort' })
    const ac = new AbortController()
    const p = await h.process.spawn('sleep 2002', { signal: ac.signal })
    ac.abort()
    assert.equal(await within(10_000, 'the end of the aborted job', p.wait()), 137)
    assert.equal(await running(h, 'sleep 2002'), 0)
    await assert.rejects(h.process.spawn('true', { signal: AbortSignal.abort(new Error('never')) }), /never/)
  })

  await t.test('many followed outputs hold no other call back', async () => {
    const h = await warren.create({ id: 'many' })
    await warren.client.bind('acme', 'many', { maxJobs: 12 })
    const jobs = await Promise.all(Array.from({ length: 7 }, (_, i) => h.process.spawn(`echo ${i}; sleep 2005`)))
    const its = jobs.flatMap((j) => [j.stdout[Symbol.asyncIterator](), j.stderr[Symbol.asyncIterator]()])
    // 14 connections follow an output (with the exec beside them, just
    // under a thread's bound of 16 streams at once); the first lines come.
    const firsts = await Promise.all(its.filter((_, i) => i % 2 === 0).map((it) => it.next()))
    assert.deepEqual(firsts.map((f) => f.value), Array.from({ length: 7 }, (_, i) => `${i}\n`))
    const pendingErr = its.filter((_, i) => i % 2 === 1).map((it) => it.next())
    const r = await within(10_000, 'an exec beside 14 followed outputs', h.process.exec('echo through'))
    assert.equal(r.stdout, 'through\n')
    await Promise.all(jobs.map((j) => j.kill('SIGKILL')))
    await Promise.all(its.map((it) => it.return?.()))
    await Promise.allSettled(pendingErr)
  })

  await t.test("env.set joins the thread's settings", async () => {
    const h = await warren.create({ id: 'env', env: { FROM_CREATE: 'c' } })
    await h.env.set({ ONE: '1' })
    await Promise.all([h.env.set({ TWO: '2' }), h.env.set({ THREE: '3' })])
    await h.env.set({ ONE: 'one' })
    const r = await h.process.exec('echo "$FROM_CREATE $ONE $TWO $THREE"')
    assert.equal(r.stdout, 'c one 2 3\n')
    // The other settings stay.
    const s = (await warren.client.threadInfo('acme', 'env')).settings
    assert.equal(s?.maxJobs, 4)
    // A call's own variables win.
    assert.equal((await h.process.exec('echo $ONE', { env: { ONE: 'call' } })).stdout, 'call\n')
  })

  await t.test('git: a clone of a repository on this host, and the rest through the jail', async () => {
    const repo = makeRepo(t, { 'README.md': '# app\n', 'src/app.ts': 'export const login = () => false\n' })
    execFileSync('git', ['-C', repo, 'branch', 'feature'])
    const h = await warren.create({ id: 'git' })
    await h.env.set({
      GIT_AUTHOR_NAME: 'agent',
      GIT_AUTHOR_EMAIL: 'agent@example.com',
      GIT_COMMITTER_NAME: 'agent',
      GIT_COMMITTER_EMAIL: 'agent@example.com',
    })
    await h.git.clone({ url: repo })
    assert.equal(await h.fs.read('README.md'), '# app\n')
    assert.equal(await h.git.branch(), 'main')
    assert.equal(await h.git.status(), '')
    assert.equal((await h.process.exec('git remote get-url origin')).stdout.trim(), repo)
    assert.deepEqual(await h.fs.list('/workspace').then((l) => l.map((e) => e.name)), ['.git', 'README.md', 'src'])

    await h.fs.write('src/app.ts', 'export const login = () => true\n')
    assert.equal(await h.git.status(), ' M src/app.ts\n')
    await h.git.add(['src/app.ts'])
    await h.git.commit('fix login')
    assert.equal(await h.git.status(), '')
    assert.equal((await h.process.exec('git log --format=%s -1')).stdout, 'fix login\n')

    // push and pull, to and from a repository the jail reaches.
    await h.process.exec('git init -q --bare /workspace/remote.git && git remote add mirror /workspace/remote.git && git push -q mirror main && git branch -u mirror/main')
    await h.git.push()
    await h.git.pull()

    // A clone into a folder, of a ref, given as the mount path.
    await h.git.clone({ url: `file://${repo}`, dir: path.join(h.workspaceRoot, 'copy'), ref: 'feature' })
    assert.equal(await h.git.branch('/workspace/copy'), 'feature')
    // A failed git command rejects with git's message.
    await assert.rejects(h.git.clone({ url: repo, dir: 'copy' }), /already exists and is not an empty directory/)
    await assert.rejects(h.git.status('/workspace/src'.replace('src', 'nowhere')), /git status failed \(exit \d+\)/)
    await assert.rejects(h.git.clone({ url: 'https://example.invalid/x.git', dir: 'net' }), /git clone failed/)
  })

  await t.test('ports.connect: a server in the jail, through its channel, with its token only', async () => {
    const h = await warren.create({ id: 'ports' })
    await h.fs.write('site/index.html', 'hello from the jail\n')
    const server = await h.process.spawn('exec python3 -m http.server 8000 --bind 127.0.0.1 --directory site')
    const ch = await h.ports.connect(8000)
    assert.match(ch.url, /^http:\/\/127\.0\.0\.1:\d+$/)
    assert.ok(ch.token && ch.token.length >= 40)
    assert.deepEqual(ch.headers, { Authorization: `Bearer ${ch.token}` })
    // node's own fetch, as a harness would (the server may take a moment).
    const body = await eventually('the server answers through the channel', 30_000, async () => {
      const r = await fetch(`${ch.url}/index.html`, { headers: ch.headers })
      return r.status === 200 ? await r.text() : undefined
    })
    assert.equal(body, 'hello from the jail\n')
    const refused = await fetch(`${ch.url}/index.html`)
    assert.equal(refused.status, 401)
    await refused.body?.cancel()
    const wrong = await fetch(`${ch.url}/index.html`, { headers: { Authorization: 'Bearer nope' } })
    assert.equal(wrong.status, 401)
    await wrong.body?.cancel()
    // The same port, the same channel.
    assert.deepEqual(await h.ports.connect(8000), ch)
    await assert.rejects(h.ports.connect(0), (err: unknown) => err instanceof WarrenError && err.code === 'invalid')
    await server.kill()
    // Destroying the sandbox closes its channels.
    await warren.destroy({ id: 'ports' })
    await assert.rejects(fetch(`${ch.url}/index.html`, { headers: ch.headers }), /fetch failed/)
  })

  await t.test('snapshot, restoreSnapshot and fork', async () => {
    const h = await warren.create({ id: 'snap', env: { KEPT: 'yes' } })
    await h.fs.write('app.ts', 'v1\n')
    const s1 = await h.snapshot('first')
    assert.equal(s1.id, 'snap@cp-1')
    assert.equal(s1.label, 'first')
    await h.fs.write('app.ts', 'v2\n')
    await h.fs.write('new.ts', 'new\n')

    // restoreSnapshot: a new thread at the checkpoint, the original as it is.
    const r = await warren.restoreSnapshot({ snapshotId: s1.id, env: { MORE: 'more' } })
    assert.notEqual(r.id, h.id)
    assert.equal(await r.fs.read('app.ts'), 'v1\n')
    assert.equal(await r.fs.exists('new.ts'), false)
    assert.equal((await r.process.exec('echo "$KEPT $MORE"')).stdout, 'yes more\n')
    assert.equal(await h.fs.read('app.ts'), 'v2\n')

    // fork: a new thread from the workspace as it is now.
    await h.fs.write('app.ts', 'v3\n')
    const f = await h.fork()
    assert.notEqual(f.id, h.id)
    assert.equal(await f.fs.read('app.ts'), 'v3\n')
    assert.equal(await f.fs.read('new.ts'), 'new\n')
    assert.equal((await f.process.exec('echo "$KEPT"')).stdout, 'yes\n')
    await f.fs.write('app.ts', 'forked\n')
    assert.equal(await h.fs.read('app.ts'), 'v3\n')
    // A provider without settings of its own carries the thread's too.
    const bare = warrenSandbox({ socketPath: d.socket, tenant: 'acme' })
    t.after(() => bare.close())
    const b = await bare.restoreSnapshot({ snapshotId: s1.id })
    assert.equal((await b.process.exec('echo "$KEPT"')).stdout, 'yes\n')
    const fromFork = await f.snapshot()
    assert.equal((await warren.restoreSnapshot({ snapshotId: fromFork.id })).id === f.id, false)

    await assert.rejects(warren.restoreSnapshot({ snapshotId: 'snap@cp-99' }), WarrenNotFoundError)
    await assert.rejects(warren.restoreSnapshot({ snapshotId: 'no-at-sign' }), warrenError(WarrenError, 'invalid'))
  })

  await t.test('two runs editing one file: the second gets the stale refusal', async () => {
    const lead = await warren.create({ id: 'shared' })
    const sub = await warren.resume({ id: 'shared' })
    assert.ok(sub)
    assert.notEqual(lead.run, sub.run)
    await lead.fs.write('src/app.ts', 'let a = 1\n')
    assert.equal(await sub.fs.read('src/app.ts'), 'let a = 1\n')
    assert.equal(await lead.fs.read('src/app.ts'), 'let a = 1\n')
    await lead.fs.write('src/app.ts', 'let a = 2\n')
    await assert.rejects(
      sub.fs.write('/workspace/src/app.ts', 'let a = 3\n'),
      warrenError(WarrenStaleError, 'stale', 'src/app.ts changed since it was read. Read it again before you edit it.'),
    )
    await sub.fs.write('tmp.ts', 'let a = 3\n')
    await assert.rejects(sub.fs.rename('tmp.ts', 'src/app.ts'), warrenError(WarrenStaleError, 'stale'))
    assert.equal(await lead.fs.read('src/app.ts'), 'let a = 2\n')
    // A fresh read clears it.
    assert.equal(await sub.fs.read('src/app.ts'), 'let a = 2\n')
    await sub.fs.write('src/app.ts', 'let a = 3\n')

    // The same rule for the run's commands in the jail, for every program.
    const reviewer = lead.forRun('reviewer')
    assert.equal((await reviewer.process.exec('cat src/app.ts')).stdout, 'let a = 3\n')
    await lead.fs.read('src/app.ts')
    await lead.fs.write('src/app.ts', 'let a = 4\n')
    const r = await reviewer.process.exec('echo mine > src/app.ts')
    assert.notEqual(r.exitCode, 0)
    assert.match(r.stderr, /Stale file handle/)
    assert.equal(await lead.fs.read('src/app.ts'), 'let a = 4\n')
  })

  await t.test('bad input: a hostile id, a path outside, a missing thread', async () => {
    // A hostile id is an id like any other: a thread of its own, inside the tenant.
    const other = await warren.create({ id: 'victim' })
    await other.fs.write('secret.txt', 'secret')
    const h = await warren.create({ id: '../other-tenant/t-1' })
    assert.equal(h.id, '../other-tenant/t-1')
    assert.equal(path.dirname(h.workspaceRoot), path.join(d.data, 'mnt', 'acme'))
    assert.deepEqual(await h.fs.list('/workspace'), [])
    for (const id of ['..', '.', 'victim/..', '%2e%2e']) {
      const x = await warren.create({ id })
      assert.equal(x.id, id)
      assert.equal(await x.fs.exists('secret.txt'), false)
    }

    // A path outside the workspace is refused, as outside.
    for (const p of ['../../etc/passwd', '/etc/passwd', '../victim/secret.txt']) {
      await assert.rejects(h.fs.read(p), warrenError(WarrenError, 'outside', `${p} is outside the workspace.`))
      await assert.rejects(h.fs.write(p, 'x'), warrenError(WarrenError, 'outside'))
      await assert.rejects(h.fs.exists(p), warrenError(WarrenError, 'outside'))
    }
    await assert.rejects(h.process.exec('true', { cwd: '/etc' }), warrenError(WarrenError, 'outside', 'cwd "/etc" is outside the workspace.'))
    // A link made in the jail cannot lead out either.
    const ln = await h.process.exec('ln -s /etc/passwd leak')
    assert.notEqual(ln.exitCode, 0)
    assert.equal(await h.fs.lstat('leak'), undefined)

    // A missing thread: resume says null, a snapshot of it is not found.
    assert.equal(await warren.resume({ id: 'missing' }), null)
    await assert.rejects(warren.restoreSnapshot({ snapshotId: 'missing@cp-1' }), WarrenNotFoundError)

    // A thread whose workspace is gone: resume says null, a call says why.
    const g = await warren.create({ id: 'gone' })
    await warren.client.closeThread('acme', 'gone')
    const root = (await warren.client.threadInfo('acme', 'gone')).root
    execFileSync('rm', ['-rf', root])
    assert.equal(await warren.resume({ id: 'gone' }), null)
    await assert.rejects(
      g.fs.read('x'),
      warrenError(WarrenGoneError, 'gone', `The workspace of this thread, ${root} on the host (unpinned), is gone, so the tools cannot work on it.`),
    )
    await assert.rejects(warren.create({ id: 'gone' }), WarrenGoneError)
  })
})

test('warrenSandbox: process.exec says why a command ended', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({
    socketPath: d.socket,
    settings: { memoryBytes: 64 << 20 },
    execTimeoutSeconds: 3,
  })
  t.after(() => warren.close())
  const h = await warren.create({ id: 'why' })

  // The note is stderr's last line, after the command's own output.
  const late = await h.process.exec('echo started >&2; sleep 30')
  assert.deepEqual(late, {
    stdout: '',
    stderr: "started\nwarren: timed out after 3s (the command's timeout)\n",
    exitCode: 124,
    reason: 'timeout',
  })
  const hog = await h.process.exec(`x=$(head -c 300000000 /dev/zero | tr '\\0' a)`)
  assert.equal(hog.exitCode, 137)
  assert.equal(hog.reason, 'oom')
  assert.equal(hog.stderr.split('\n').at(-2), "warren: killed: out of memory (the thread's limit is 64 MiB)")
  // Exit 137 by itself: no reason, and stderr is the command's alone.
  assert.deepEqual(await h.process.exec('echo mine >&2; exit 137'), { stdout: '', stderr: 'mine\n', exitCode: 137 })
})

test('warrenSandbox: the daemon gone', { timeout: 60_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({ socketPath: d.socket })
  t.after(() => warren.close())
  const h = await warren.create({ id: 't1' })
  await h.fs.write('a.txt', 'a')
  const job = await h.process.spawn('sleep 100')
  const exited = job.wait().then(
    (code) => code,
    (err: unknown) => err,
  )
  await d.stop()
  // A daemon that stops ends its jobs (SIGKILL) and says so to a wait
  // that reached it; a wait whose requests were still on their way when
  // the daemon stopped finds it gone (seen in CI: write EPIPE). Nothing
  // tells this test which came first, so either is right; nothing else is.
  const outcome = await exited
  if (typeof outcome === 'number') assert.equal(outcome, 137)
  else assert.ok(outcome instanceof WarrenUnreachableError, `wait: ${String(outcome)}`)
  for (const call of [
    () => h.fs.read('a.txt'),
    () => h.process.exec('true'),
    () => h.process.spawn('true'),
    () => h.env.set({ A: '1' }),
    () => h.snapshot(),
    () => warren.create({ id: 't2' }),
    () => warren.resume({ id: 't1' }),
    () => warren.destroy({ id: 't1' }),
  ]) {
    await assert.rejects(call(), warrenError(WarrenUnreachableError, 'unreachable', /warren\.sock/))
  }
})
