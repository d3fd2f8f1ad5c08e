/**
 * No daemon on the socket: every call, of the client and of the provider,
 * rejects with a WarrenUnreachableError that says what to check, in the
 * CLI's words (cmd/warren's callError), and a client given no socket
 * finds it as the CLI does (WARREN_SOCKET). No daemon runs here.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import * as path from 'node:path'
import { test } from 'node:test'
import { WarrenClient } from '../src/client.js'
import { WarrenUnreachableError } from '../src/errors.js'
import { defaultSocket } from '../src/http.js'
import { warrenSandbox } from '../src/provider.js'
import { tempDir, warrenError } from './helpers.js'

const hint = "(is 'warren serve' running? set socketPath or WARREN_SOCKET)"

test('no daemon on the socket: WarrenUnreachableError with the CLI’s hint', async (t) => {
  const dir = tempDir(t)
  // No file at all (ENOENT), and a file that no daemon listens on (ECONNREFUSED).
  const missing = path.join(dir, 'none.sock')
  const stale = path.join(dir, 'stale.sock')
  writeFileSync(stale, '')
  for (const socket of [missing, stale]) {
    const c = new WarrenClient(socket)
    t.after(() => c.close())
    await assert.rejects(
      c.threads('acme'),
      warrenError(WarrenUnreachableError, 'unreachable', `GET /v1/threads: no daemon answers on ${socket} ${hint}: connect ${socket === missing ? 'ENOENT' : 'ECONNREFUSED'} ${socket}`),
    )
    const warren = warrenSandbox({ socketPath: socket, tenant: 'acme' })
    t.after(() => warren.close())
    await assert.rejects(warren.create({ id: 'fix-login' }), (err: unknown) => {
      assert.ok(err instanceof WarrenUnreachableError, `got ${String(err)}`)
      assert.ok(err.message.includes(`no daemon answers on ${socket} ${hint}`), err.message)
      return true
    })
  }
})

test('a client given no socket takes WARREN_SOCKET, as the CLI does', async (t) => {
  const socket = path.join(tempDir(t), 'from-env.sock')
  const saved = process.env.WARREN_SOCKET
  t.after(() => {
    if (saved === undefined) delete process.env.WARREN_SOCKET
    else process.env.WARREN_SOCKET = saved
  })
  process.env.WARREN_SOCKET = socket
  const c = new WarrenClient()
  t.after(() => c.close())
  assert.equal(c.socketPath, socket)
  await assert.rejects(c.health(), warrenError(WarrenUnreachableError, 'unreachable', new RegExp(`no daemon answers on ${socket.replace(/[.]/g, '\\.')} `)))
  const warren = warrenSandbox({ tenant: 'acme' })
  t.after(() => warren.close())
  assert.equal(warren.client.socketPath, socket)

  // Without it: the default data folder's socket, as `warren serve` makes it.
  assert.equal(defaultSocket({}), process.getuid?.() === 0 ? '/var/lib/warren/warren.sock' : defaultSocket({ HOME: process.env.HOME }))
  if (process.getuid?.() !== 0) {
    assert.equal(defaultSocket({ XDG_STATE_HOME: '/state' }), '/state/warren/warren.sock')
    assert.equal(defaultSocket({ HOME: '/home/u' }), '/home/u/.local/state/warren/warren.sock')
  }
  assert.throws(() => new WarrenClient(''), /the socket path is empty/)
})
