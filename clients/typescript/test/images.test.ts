/**
 * Images on warren: `warrenSandbox({ image })` as `dockerSandbox({ image })`
 * takes it, and warren's own per-create override, on a real daemon whose
 * images are loaded from archives the test makes (no registry, no
 * internet): the jail's root is the image's filesystem.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import * as path from 'node:path'
import { test } from 'node:test'
import { warrenSandbox } from '../src/provider.js'
import { repoRoot, requireDaemons, startDaemon } from './daemon.js'
import { tempDir } from './helpers.js'

/** Writes a busybox test image, as an OCI layout tar, whose /marker says marker. */
function makeImage(dir: string, name: string, marker: string): string {
  const file = path.join(dir, `${marker}.tar`)
  execFileSync('go', ['run', './internal/imagetest/mkimage', '-o', file, '-name', name, '-marker', marker], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  return file
}

test('warrenSandbox: images', { timeout: 180_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const dir = tempDir(t)
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme', image: 'example.test/team/one:1' })
  t.after(() => warren.close())
  const images: Array<[string, string]> = [
    ['example.test/team/one:1', 'one'],
    ['example.test/team/two:1', 'two'],
  ]
  for (const [name, marker] of images) {
    const img = await warren.client.loadImage(makeImage(dir, name, marker))
    assert.equal(img.ref, name)
    assert.equal(img.loaded, true)
  }

  await t.test("the provider's image", async (st) => {
    const h = await warren.create({})
    st.after(() => h.destroy())
    const r = await h.process.exec('cat /marker; echo "$IMAGE_NAME $HOME"; test ! -e /usr/bin/python3 || echo host')
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.stdout, 'one\none /home/agent\n')
    const info = await warren.client.threadInfo('acme', h.id)
    assert.equal(info.settings?.image, 'example.test/team/one:1')
    assert.match(info.settings?.imageDigest ?? '', /^sha256:[0-9a-f]{64}$/)
    // The workspace is the image root's /workspace, as everywhere.
    await h.fs.write('hello.txt', 'hi\n')
    assert.equal((await h.process.exec('cat /workspace/hello.txt')).stdout, 'hi\n')
  })

  await t.test('a per-create image', async (st) => {
    const h = await warren.create({ image: 'example.test/team/two:1' })
    st.after(() => h.destroy())
    assert.equal((await h.process.exec('cat /marker')).stdout, 'two\n')
    const list = await warren.client.listImages()
    const two = list.images.find((i) => i.ref === 'example.test/team/two:1')
    assert.deepEqual(two?.threads?.map((s) => s.replaceAll('"', '')), [`acme/${h.id}`])
  })

  await t.test('an image the server lacks is a clear error', async () => {
    await assert.rejects(warren.create({ image: 'no-such-registry.invalid/x:1' }), /no-such-registry\.invalid/)
  })
})
