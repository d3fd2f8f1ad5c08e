import assert from 'node:assert/strict'
import { test } from 'node:test'
import { escapeId } from '../src/http.js'
import { WarrenClient } from '../src/client.js'
import { WarrenNotFoundError, WarrenStaleError, WarrenUnreachableError, isWarrenError } from '../src/errors.js'
import { requireDaemons, startDaemon } from './daemon.js'
import { within } from './helpers.js'

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

test('a daemon that is gone', async () => {
  const c = new WarrenClient('/nonexistent/warren.sock')
  await assert.rejects(c.threads(), (err: unknown) => err instanceof WarrenUnreachableError && err.code === 'unreachable')
  c.close()
})
