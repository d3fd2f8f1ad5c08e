/**
 * The harness's network policy on warren: `capabilities.network` (or the
 * policy's `default`) mapped onto the thread's network, and the
 * provider's egress rules, on a real daemon whose default network is
 * egress.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { SandboxPolicy } from '@tanstack/ai-sandbox'
import { networkSettings, warrenSandbox } from '../src/provider.js'
import { requireDaemons, startDaemon } from './daemon.js'

test('networkSettings: the policy onto the thread network', () => {
  const rules = { allow: ['*.npmjs.org', '198.51.100.0/24'], deny: ['evil.test'] }
  const cases: Array<[string, SandboxPolicy | undefined, object]> = [
    ['allow', { capabilities: { network: 'allow' } }, { network: 'egress', egress: { default: 'allow', ...rules } }],
    ['deny', { capabilities: { network: 'deny' } }, { network: 'none' }],
    ['ask', { capabilities: { network: 'ask' } }, { egress: { default: 'allow', ...rules } }],
    ['no policy', undefined, { egress: { default: 'allow', ...rules } }],
    ['the policy default', { default: 'deny' }, { network: 'none' }],
    ['network over default', { default: 'deny', capabilities: { network: 'allow' } }, { network: 'egress', egress: { default: 'allow', ...rules } }],
  ]
  for (const [name, policy, want] of cases) assert.deepEqual(networkSettings(policy, rules), want, name)
  assert.deepEqual(networkSettings({ capabilities: { network: 'allow' } }, undefined), { network: 'egress', egress: { default: 'allow' } })
  assert.deepEqual(networkSettings({ capabilities: { network: 'allow' } }, { default: 'deny', allow: ['a.test'] }), {
    network: 'egress',
    egress: { default: 'deny', allow: ['a.test'] },
  })
  assert.deepEqual(networkSettings(undefined, undefined), {})
})

test('warrenSandbox: the network policy on a real daemon', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  // The jails' resolver asks a name server on loopback that does not
  // answer: no test traffic leaves the host.
  const d = await startDaemon(t, ['--jail-network', 'egress', '--egress-dns', '127.0.0.1:9'])
  const egress = { allow: ['*.npmjs.org'], deny: ['blocked.test', '203.0.113.0/24'] }
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme', egress })
  t.after(() => warren.close())
  assert.equal(warren.capabilities().networkPolicy, true)

  /** The jail's links besides loopback, as its own /proc says. */
  const links = async (h: { process: { exec: (c: string) => Promise<{ stdout: string; exitCode: number }> } }) => {
    const r = await h.process.exec(`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | grep -vx lo || true`)
    assert.equal(r.exitCode, 0)
    return r.stdout.trim().split('\n').filter((s) => s !== '')
  }

  await t.test('allow: egress under the provider rules', async (st) => {
    const h = await warren.create({ policy: { capabilities: { network: 'allow' } } })
    st.after(() => h.destroy())
    const info = await warren.client.threadInfo('acme', h.id)
    assert.equal(info.settings?.network, 'egress')
    assert.deepEqual(info.settings?.egress, { default: 'allow', ...egress })
    assert.deepEqual(await links(h), ['eth0'])
    // A denied name does not resolve, at once: the rules reached the jail.
    const start = Date.now()
    const r = await h.process.exec('getent hosts blocked.test')
    assert.notEqual(r.exitCode, 0, r.stdout)
    assert.ok(Date.now() - start < 5_000, `a denied name took ${Date.now() - start} ms`)
  })

  await t.test('deny: loopback only', async (st) => {
    const h = await warren.create({ policy: { capabilities: { network: 'deny' } } })
    st.after(() => h.destroy())
    assert.equal((await warren.client.threadInfo('acme', h.id)).settings?.network, 'none')
    assert.deepEqual(await links(h), [])
  })

  await t.test("ask, no policy: the server's default", async (st) => {
    for (const policy of [{ capabilities: { network: 'ask' as const } }, undefined]) {
      const h = await warren.create({ policy })
      st.after(() => h.destroy())
      const s = (await warren.client.threadInfo('acme', h.id)).settings
      assert.ok(!s?.network, `network ${s?.network}`)
      assert.deepEqual(s?.egress, { default: 'allow', ...egress })
      assert.deepEqual(await links(h), ['eth0'], 'the server default is egress')
    }
  })

  await t.test("the policy's default stands for an unset network", async (st) => {
    const h = await warren.create({ policy: { default: 'deny', commands: { allow: ['npm *'] } } })
    st.after(() => h.destroy())
    assert.equal((await warren.client.threadInfo('acme', h.id)).settings?.network, 'none')
  })

  await t.test('a snapshot restored under a policy gets its network', async (st) => {
    const h = await warren.create({ policy: { capabilities: { network: 'allow' } } })
    st.after(() => h.destroy())
    const snap = await h.snapshot('net')
    const r = await warren.restoreSnapshot({ snapshotId: snap.id, policy: { capabilities: { network: 'deny' } } })
    st.after(() => r.destroy())
    assert.equal((await warren.client.threadInfo('acme', r.id)).settings?.network, 'none')
  })
})
