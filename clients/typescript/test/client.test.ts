import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { escapeId } from '../src/http.js'
import { WarrenClient } from '../src/client.js'
import { WarrenNotFoundError, WarrenStaleError, WarrenUnreachableError, isWarrenError } from '../src/errors.js'
import { requireDaemons, startDaemon } from './daemon.js'
import { tempDir, within } from './helpers.js'

test('escapeId keeps every id one segment', () => {
  assert.equal(escapeId('fix-login_2~'), 'fix-login_2~')
  assert.equal(escapeId('..'), '%2E%2E')
  assert.equal(escapeId('.'), '%2E')
  assert.equal(escapeId('a/b'), 'a%2Fb')
  assert.equal(escapeId('é'), '%C3%A9')
  assert.equal(escapeId(''), '')
})

test('the client against a real daemon', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const c = d.client()
  t.after(() => c.close())

  // Hostile ids are ids like any other, each its own thread.
  for (const id of ['..', '.', 'a/b', '../other-tenant/t-1', 'sp ace']) {
    const b = await c.bind('acme', id)
    assert.equal(b.binding.thread, id)
    assert.equal(b.binding.tenant, 'acme')
  }
  const threads = await c.threads('acme')
  assert.equal(threads.length, 5)

  // Pages: two at a time, in order, each thread once, the last with no cursor.
  const paged: string[] = []
  let cursor: string | undefined
  for (let pages = 1; ; pages++) {
    const page = await c.threadsPage({ tenant: 'acme', limit: 2, cursor })
    paged.push(...page.bindings.map((b) => b.thread))
    if (!page.nextCursor) {
      assert.equal(pages, 3)
      break
    }
    cursor = page.nextCursor
  }
  assert.deepEqual(paged, threads.map((b) => b.thread))
  await assert.rejects(c.threadsPage({ limit: 0 }), (err: unknown) => isWarrenError(err) && err.code === 'invalid')
  await assert.rejects(c.threadsPage({ cursor: 'garbage' }), (err: unknown) => isWarrenError(err) && err.code === 'invalid')

  const r = await c.exec('acme', '..', { command: 'echo out; echo err >&2; exit 3' })
  assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['out\n', 'err\n', 3])

  // Two runs, one file: the second's write is based on a stale read.
  await c.writeFile('acme', '..', { path: 'app.ts', content: 'v1\n', run: 'lead' })
  await c.readFile('acme', '..', 'app.ts', 'sub')
  await c.editFile('acme', '..', { path: 'app.ts', old: 'v1', new: 'v2', run: 'lead' })
  await assert.rejects(
    c.writeFile('acme', '..', { path: 'app.ts', content: 'mine\n', run: 'sub' }),
    (err: unknown) =>
      err instanceof WarrenStaleError &&
      err.status === 409 &&
      err.message === 'app.ts changed since it was read. Read it again before you edit it.',
  )

  await assert.rejects(c.threadInfo('acme', 'never'), WarrenNotFoundError)
  await assert.rejects(c.readFile('acme', '..', '../../etc/passwd'), (err: unknown) => isWarrenError(err, 'outside'))

  // Checkpoints.
  const cp = await c.checkpoint('acme', '..', { label: 'one' })
  assert.equal(cp.checkpoint.id, 'cp-1')
  await c.writeFile('acme', '..', { path: 'app.ts', content: 'v3\n', run: 'lead' })
  const diff = await c.diff('acme', '..', { text: true })
  assert.deepEqual(diff.modified, ['app.ts'])
  const u = await c.undo('acme', '..')
  assert.equal(u.to, 'cp-1')
  assert.equal((await c.readFile('acme', '..', 'app.ts')).content, 'v2\n')

  // An aborted call rejects with the signal's reason.
  const ac = new AbortController()
  const pending = c.exec('acme', '..', { command: 'sleep 30' }, { signal: ac.signal })
  setTimeout(() => ac.abort(new Error('enough')), 100)
  await assert.rejects(within(5000, 'the aborted exec', pending), /enough/)
})

test('the rest of the API: a terminal resized, a command sent to the background, runs, inspection mounts', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const c = d.client()
  t.after(() => c.close())
  await c.bind('acme', 't')

  // A terminal's size as the command sees it, before and after a resize.
  let out = ''
  let tty = ''
  let resized = false
  for await (const f of c.execFrames('acme', 't', { command: 'stty size; read x; stty size', tty: true, rows: 24, cols: 80 })) {
    if (f.id !== undefined) tty = f.id
    if (f.data !== undefined) out += f.data
    if (!resized && out.includes('\n')) {
      resized = true
      await c.execResize('acme', 't', tty, 40, 100)
      await c.execStdin('acme', 't', tty, '\n')
    }
  }
  assert.match(out, /^24 80\r\n/)
  assert.match(out, /40 100\r\n$/)

  // A running command made a job: its exec ends naming the job, which
  // gets the rest of its output and keeps its input.
  let id = ''
  let before = ''
  let background: string | undefined
  let job: Awaited<ReturnType<WarrenClient['execBackground']>> | undefined
  for await (const f of c.execFrames('acme', 't', { command: 'echo before; read x; echo "after $x"', openStdin: true })) {
    if (f.id !== undefined) id = f.id
    if (f.data !== undefined) before += f.data
    if (before === 'before\n' && job === undefined) job = await c.execBackground('acme', 't', id, { label: 'waits' })
    if (f.background !== undefined) background = f.background
  }
  assert.equal(before, 'before\n')
  assert.ok(job, 'the command became a job')
  assert.equal(background, job.id)
  assert.equal(job.label, 'waits')
  await c.jobStdin('acme', 't', job.id, 'now\n', true)
  let rest = ''
  for await (const f of c.jobOutput('acme', 't', job.id, { follow: true })) if (f.data !== undefined) rest += f.data
  assert.match(rest, /after now\n$/)

  // A run registered for a process, then forgotten.
  assert.deepEqual(await c.registerRun('acme', 't', 'lead', process.pid), { run: 'lead', pid: process.pid })
  await c.endRun('acme', 't', 'lead')

  // The workspace served again, read-only, at a folder of ours.
  await c.writeFile('acme', 't', { path: 'seen.txt', content: 'inspected\n' })
  const at = path.join(tempDir(t), 'inspect')
  mkdirSync(at)
  const m = await c.mount({ tenant: 'acme', thread: 't', path: at })
  let mounted = true
  t.after(async () => {
    if (mounted) await c.unmount(at).catch(() => {})
  })
  assert.equal(m.path, at)
  assert.equal(readFileSync(path.join(at, 'seen.txt'), 'utf8'), 'inspected\n')
  assert.throws(() => writeFileSync(path.join(at, 'seen.txt'), 'no'), { code: 'EROFS' })
  assert.deepEqual((await c.mounts()).map((x) => x.path), [at])
  assert.equal((await c.unmount(at)).unmounted, at)
  mounted = false
  assert.deepEqual(await c.mounts(), [])
  // Without a host id this daemon pins nothing, so it cannot take a thread over.
  await assert.rejects(c.unpin('acme', 't'), (err: unknown) => isWarrenError(err, 'invalid'))

  // What the thread uses: its jail ran commands, its workspace holds seen.txt.
  const u = await c.usage('acme', 't')
  assert.equal(u.jail, true)
  assert.ok(u.cpuSeconds > 0 && u.processes >= 1 && u.memoryPeakBytes > 0, JSON.stringify(u))
  assert.ok(u.diskFiles >= 1 && u.diskBytes >= 'inspected\n'.length && u.jobs >= 1, JSON.stringify(u))

  // The probes and the metrics.
  const h = await c.health()
  assert.equal(h.status, 'ok')
  const v = await c.version()
  assert.equal(h.revision, v.revision)
  assert.ok(v.goVersion.startsWith('go') && v.version !== '', `version ${JSON.stringify(v)}`)
  assert.deepEqual(v.kernel?.map((f) => f.name), ['passthrough', 'fuse io_uring', 'landlock', 'cgroups'])
  const rd = await c.ready()
  assert.equal(rd.ready, true)
  assert.deepEqual(rd.checks.map((x) => [x.name, x.ok]), [['serving', true], ['store', true], ['lease', true], ['disk', true], ['descriptors', true], ['admission', true], ['restore', true]])
  assert.match(await c.metrics(), /^warren_execs_total [1-9]/m)
})

test('a daemon that is gone', async () => {
  const c = new WarrenClient('/nonexistent/warren.sock')
  await assert.rejects(c.threads(), (err: unknown) => err instanceof WarrenUnreachableError && err.code === 'unreachable')
  c.close()
})
