/**
 * fs.watch against a real daemon: the file events of two writers and a
 * process of the host, in order, through a broken connection in the
 * middle, nothing missed or told twice; a restore's changes; the resync
 * event where changes may have gone untold (a daemon restart, a cursor
 * older than the daemon keeps).
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { test } from 'node:test'
import { WarrenClient } from '../src/client.js'
import { warrenSandbox } from '../src/provider.js'
import type { WarrenFileEvent } from '../src/watch.js'
import { requireDaemons, startDaemon } from './daemon.js'
import { eventually } from './helpers.js'

/** Waits until events has one that passes f, and returns it. */
function seen(events: WarrenFileEvent[], what: string, f: (e: WarrenFileEvent) => boolean): Promise<WarrenFileEvent> {
  return eventually(what, 20_000, async () => events.find(f))
}

test('fs.watch: two writers, a host process, a reconnect in the middle, a restore; nothing missed or doubled', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme' })
  t.after(() => warren.close())
  const a = await warren.create({ id: 'watched' })
  const b = await warren.resume({ id: 'watched' }) // another run of the same thread
  assert.ok(b)
  await a.fs.mkdir('/workspace/src')

  const events: WarrenFileEvent[] = []
  const w = await a.fs.watch('/workspace/src', (e) => events.push(e))
  t.after(() => w.stop())

  const n = 20
  const writes = async (h: typeof a, who: string, from: number, to: number) => {
    for (let i = from; i < to; i++) await h.fs.write(`/workspace/src/${who}${i}.txt`, `${who} ${i}\n`)
  }
  await Promise.all([writes(a, 'a', 0, n / 2), writes(b, 'b', 0, n / 2), a.fs.write('/workspace/outside.txt', 'not watched\n')])
  await seen(events, 'the first half', (e) => e.path === `/workspace/src/b${n / 2 - 1}.txt`)
  // The connection breaks (every socket of the provider's client); the
  // writers go on while the watch is away, and after.
  warren.close()
  await Promise.all([writes(a, 'a', n / 2, n), writes(b, 'b', n / 2, n)])
  await fsp.writeFile(path.join(a.workspaceRoot, 'src', 'host.txt'), 'from the host\n')
  await seen(events, 'the host write', (e) => e.path === '/workspace/src/host.txt' && e.type !== 'delete')

  const want = ['host', ...Array.from({ length: n }, (_, i) => [`a${i}`, `b${i}`]).flat()].map((f) => `/workspace/src/${f}.txt`)
  for (const p of want) await seen(events, `a create of ${p}`, (e) => e.path === p && e.type === 'create')
  assert.deepEqual(
    events.filter((e) => e.type === 'resync'),
    [],
    'no resync: the watch resumed from its cursor',
  )
  assert.ok(!events.some((e) => !e.path.startsWith('/workspace/src/')), `only the watched tree: ${JSON.stringify(events)}`)
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i]!.cursor > events[i - 1]!.cursor, `in order, none twice: ${JSON.stringify(events.slice(i - 1, i + 1))}`)
  }
  for (const p of want) {
    assert.equal(events.filter((e) => e.path === p && e.type === 'create').length, 1, `one create of ${p}`)
  }
  const a0 = events.find((e) => e.path === '/workspace/src/a0.txt')!
  const b0 = events.find((e) => e.path === '/workspace/src/b0.txt')!
  assert.equal(a0.actor, `run ${a.run}`, 'the actor of a write is its run')
  assert.equal(b0.actor, `run ${b.run}`, 'the actor of a write is its run')
  assert.ok((a0.version ?? 0) > 0, 'a version')
  assert.ok(w.cursor() >= events[events.length - 1]!.cursor)

  // A restore's changes are told as well.
  const c = new WarrenClient(d.socket)
  t.after(() => c.close())
  const cp = await c.checkpoint('acme', 'watched', { label: 'before' })
  await a.fs.write('/workspace/src/a0.txt', 'changed\n')
  await a.fs.remove('/workspace/src/a1.txt')
  await seen(events, 'the removal', (e) => e.path === '/workspace/src/a1.txt' && e.type === 'delete')
  const before = events.length
  await c.revert('acme', 'watched', cp.checkpoint.id)
  await seen(events, 'a0 restored', (e) => events.indexOf(e) >= before && e.path === '/workspace/src/a0.txt')
  await seen(events, 'a1 restored', (e) => events.indexOf(e) >= before && e.path === '/workspace/src/a1.txt' && e.type === 'change')
  assert.equal(await a.fs.read('/workspace/src/a1.txt'), 'a 1\n')

  // A rename: the old path deleted, the new one created from it.
  await a.fs.rename('/workspace/src/b0.txt', '/workspace/src/b0-renamed.txt')
  const moved = await seen(events, 'the rename', (e) => e.path === '/workspace/src/b0-renamed.txt')
  assert.equal(moved.type, 'create')
  assert.equal(moved.from, '/workspace/src/b0.txt')
  assert.ok(events.some((e) => e.path === '/workspace/src/b0.txt' && e.type === 'delete' && e.cursor === moved.cursor))

  // Stopped: nothing more.
  await w.stop()
  const count = events.length
  await a.fs.write('/workspace/src/late.txt', 'after the stop\n')
  await a.fs.read('/workspace/src/late.txt')
  assert.equal(events.length, count)
})

test('fs.watch: resync when changes may have gone untold', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t, ['--event-log', '20'])
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme' })
  t.after(() => warren.close())
  const h = await warren.create({ id: 'resync' })

  // A cursor older than the daemon keeps: a resync first, then the changes.
  const first: WarrenFileEvent[] = []
  const w1 = await h.fs.watch('/workspace', (e) => first.push(e))
  await h.fs.write('/workspace/one.txt', '1\n')
  const one = await seen(first, 'one', (e) => e.path === '/workspace/one.txt')
  await w1.stop()
  for (let i = 0; i < 30; i++) await h.fs.write(`/workspace/many/${i}.txt`, `${i}\n`) // past the 20 kept
  const late: WarrenFileEvent[] = []
  const w2 = await h.fs.watch('/workspace', (e) => late.push(e), { since: one.cursor })
  t.after(() => w2.stop())
  const r = await seen(late, 'a resync', (e) => e.type === 'resync')
  assert.equal(r.path, '/workspace')
  assert.match(r.reason ?? '', /no longer keeps/)
  assert.equal(late.indexOf(r), 0, 'the resync comes first')
  await seen(late, 'a kept change', (e) => e.path === '/workspace/many/29.txt')

  // The daemon restarts: file changes before the watch follows again may
  // have no event, so it says resync, and goes on.
  const after = late.length
  await d.stop()
  await d.start()
  await seen(late, 'a resync after the restart', (e) => late.indexOf(e) >= after && e.type === 'resync' && /restarted/.test(e.reason ?? ''))
  await h.fs.write('/workspace/two.txt', '2\n')
  await seen(late, 'a change after the restart', (e) => e.path === '/workspace/two.txt')
})

test('fs.watch: a path outside the workspace is refused', async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme' })
  t.after(() => warren.close())
  const h = await warren.create({ id: 'outside' })
  await assert.rejects(h.fs.watch('/etc', () => {}), /not in the workspace/)
  await assert.rejects(h.fs.watch('/workspace/../etc', () => {}), /not in the workspace/)
})
