/**
 * A thread moving to a second server: two daemons on one real etcd, each
 * with a host id and a data folder of its own (the same machine, so B
 * reaches A's workspace folder once A is dead). B refuses the thread
 * while A's lease holds, with the product page's message; once A is
 * killed and its lease expired, B resumes it, in the same files.
 */
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { test } from 'node:test'
import { WarrenPinnedError, WarrenUnreachableError } from '../src/errors.js'
import { warrenSandbox } from '../src/provider.js'
import { requireDaemons, startDaemon, startEtcd } from './daemon.js'
import { eventually, warrenError } from './helpers.js'

/** The lease of the test's daemons: renewed every 200 ms, gone 2 s after its last renewal. */
const lease = ['--renew-every', '200ms', '--expires-after', '2s']

test('a thread moves to a second server: pinned, then resumed after the owner dies', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const etcd = await startEtcd(t)
  const store = ['--store', 'etcd', '--etcd-endpoints', etcd.endpoint, ...lease]
  const a = await startDaemon(t, [...store, '--host-id', 'a'])
  const b = await startDaemon(t, [...store, '--host-id', 'b'])
  const onA = warrenSandbox({ socketPath: a.socket, tenant: 'acme' })
  const onB = warrenSandbox({ socketPath: b.socket, tenant: 'acme' })
  t.after(() => {
    onA.close()
    onB.close()
  })

  const h = await onA.create({ id: 'fix-login', env: { STAGE: 'moved' } })
  await h.fs.write('src/app.ts', 'export const login = () => true\n')
  const root = (await onA.client.threadInfo('acme', 'fix-login')).root
  const job = await h.process.spawn('echo started; sleep 300')
  // Its output followed: the connection is up once the first bytes came.
  const out = job.stdout[Symbol.asyncIterator]()
  assert.deepEqual(await out.next(), { value: 'started\n', done: false })

  // While A lives, B refuses the thread with the page's words.
  const pinned = `The workspace of this thread is ${root} on the host a. Only that host can continue the thread.`
  await assert.rejects(onB.resume({ id: 'fix-login' }), warrenError(WarrenPinnedError, 'pinned', pinned))
  await assert.rejects(onB.create({ id: 'fix-login' }), warrenError(WarrenPinnedError, 'pinned', pinned))
  await assert.rejects(onB.destroy({ id: 'fix-login' }), warrenError(WarrenPinnedError, 'pinned', pinned))
  // Both hosts beat; B cannot take the thread at once either.
  const hosts = (await onB.client.hosts()).map((x) => [x.id, x.alive])
  assert.deepEqual(hosts, [['a', true], ['b', true]])
  await assert.rejects(
    onB.client.unpin('acme', 'fix-login'),
    warrenError(WarrenPinnedError, 'pinned', "The thread is pinned to the live host a; it can move only once that host's lease expires."),
  )

  // A dies at once, as a crash would: its followed output breaks off.
  const next = out.next()
  next.catch(() => {}) // settled before assert.rejects looks at it
  await a.stop('SIGKILL')
  await assert.rejects(next, warrenError(WarrenUnreachableError, 'unreachable', /the connection broke while its answer came/))
  await assert.rejects(job.wait(), warrenError(WarrenUnreachableError, 'unreachable'))
  await assert.rejects(h.fs.read('src/app.ts'), WarrenUnreachableError)

  // Once A's lease expired, B takes the thread over in the same folder.
  const started = Date.now()
  const moved = await eventually('resume on B', 2000 + 10_000, async () => {
    try {
      return (await onB.resume({ id: 'fix-login' })) ?? undefined
    } catch (err) {
      if (err instanceof WarrenPinnedError) return undefined
      throw err
    }
  })
  t.diagnostic(`resumed on B ${Date.now() - started} ms after A was killed`)
  assert.equal(moved.id, 'fix-login')
  assert.ok(moved.workspaceRoot.startsWith(b.data + '/'), `B serves it at ${moved.workspaceRoot}`)
  assert.equal(await moved.fs.read('src/app.ts'), 'export const login = () => true\n')
  assert.equal(readFileSync(`${moved.workspaceRoot}/src/app.ts`, 'utf8'), 'export const login = () => true\n')
  // Its settings moved with it, and its commands run in B's jail.
  assert.equal((await moved.process.exec('echo "$STAGE"; cat src/app.ts')).stdout, 'moved\nexport const login = () => true\n')
  const info = await onB.client.threadInfo('acme', 'fix-login')
  assert.equal(info.root, root)
  assert.equal(info.owner, 'b')
  // The job did not move: B noted it stopped.
  const jobs = await onB.client.jobs('acme', 'fix-login')
  assert.equal(jobs[0]?.running, false)
  assert.equal(jobs[0]?.note, 'Background job bash-1 was stopped: it ran on a host before the session moved to this one.')
  await moved.fs.write('after.txt', 'written on B')
  assert.ok(existsSync(`${root}/after.txt`))
})
