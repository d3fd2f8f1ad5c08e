/**
 * warrenSandbox under @tanstack/ai-sandbox's own defineSandbox +
 * withSandbox, driven by @tanstack/ai's chat().
 *
 * chat() needs a text adapter. No model is reached here: the adapter is a
 * fake written below, shaped as a harness adapter is (kind 'text', a
 * chatStream yielding AG-UI events, `requires: [SandboxCapability]`, which
 * chat() checks the middleware provides). chat() hands a chatStream
 * `options.capabilities` (the middleware context, TextEngine's
 * `capabilities: this.middlewareCtx` in @tanstack/ai 0.42's
 * activities/chat/index.ts), so the fake reads the sandbox withSandbox set
 * up with getSandbox, works in it as a harness CLI would, and streams one
 * text message and RUN_FINISHED with finishReason 'stop'; with no tool
 * call the agent loop ends there and the middleware's onFinish runs.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import * as path from 'node:path'
import { test } from 'node:test'
import { chat, defineChatMiddleware, EventType } from '@tanstack/ai'
import type { AnyTextAdapter, StreamChunk, TextOptions } from '@tanstack/ai'
import {
  defineSandbox,
  defineWorkspace,
  getSandbox,
  gitSource,
  InMemorySandboxStore,
  provideSandboxStore,
  SandboxCapability,
  SandboxStoreCapability,
  withSandbox,
} from '@tanstack/ai-sandbox'
import type { SandboxHandle } from '@tanstack/ai-sandbox'
import * as pkg from '../src/index.js'
import { WarrenPinnedError } from '../src/errors.js'
import { warrenSandbox } from '../src/provider.js'
import type { WarrenSandboxProvider } from '../src/provider.js'
import { repoRoot, requireDaemons, startDaemon, startEtcd } from './daemon.js'
import { eventually, makeRepo, warrenError } from './helpers.js'

/**
 * A harness adapter without a model: act works in the sandbox the
 * middleware provides, and its answer is the run's one text message.
 */
function fakeHarness(act: (sandbox: SandboxHandle, options: TextOptions) => Promise<string>): AnyTextAdapter {
  return {
    kind: 'text',
    name: 'fake-harness',
    model: 'fake',
    requires: [SandboxCapability],
    '~types': undefined as never,
    async *chatStream(options: TextOptions): AsyncIterable<StreamChunk> {
      if (!options.capabilities) throw new Error('chat() gave the adapter no capabilities')
      const text = await act(getSandbox(options.capabilities), options)
      const ids = { threadId: options.threadId ?? '', runId: options.runId ?? 'run' }
      const at = { model: 'fake', timestamp: Date.now() }
      yield { type: EventType.RUN_STARTED, ...ids, ...at }
      yield { type: EventType.TEXT_MESSAGE_START, messageId: 'm1', role: 'assistant', ...at }
      yield { type: EventType.TEXT_MESSAGE_CONTENT, messageId: 'm1', delta: text, ...at }
      yield { type: EventType.TEXT_MESSAGE_END, messageId: 'm1', ...at }
      yield { type: EventType.RUN_FINISHED, ...ids, finishReason: 'stop', ...at }
    },
    structuredOutput: () => Promise.reject(new Error('the fake harness has no structured output')),
  }
}

/** The text of a run, and its CUSTOM events by name. */
async function drain(stream: AsyncIterable<StreamChunk>): Promise<{ text: string; custom: Map<string, unknown[]> }> {
  let text = ''
  const custom = new Map<string, unknown[]>()
  for await (const chunk of stream) {
    if (chunk.type === EventType.TEXT_MESSAGE_CONTENT) text += chunk.delta
    if (chunk.type === EventType.CUSTOM) custom.set(chunk.name, [...(custom.get(chunk.name) ?? []), chunk.value])
  }
  return { text, custom }
}

test('withSandbox: a workspace bootstrapped from a local git source, set up in the jail, snapshot, resumed', { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const d = await startDaemon(t)
  const warren = warrenSandbox({ socketPath: d.socket, tenant: 'acme' })
  t.after(() => warren.close())
  const repo = makeRepo(t, {
    'README.md': '# app\n',
    'src/app.ts': 'export const login = () => false\n',
    'package.json': '{"name":"app"}\n',
  })

  const events: string[] = []
  const sandbox = defineSandbox({
    id: 'acme/coder',
    provider: warren,
    workspace: defineWorkspace({
      source: gitSource({ url: repo }),
      // Serial steps run in one shell (spawned, fed over stdin): the cd holds.
      setup: ['cd src', 'echo "$(id -u) $PWD $(git rev-parse --abbrev-ref HEAD)" >> ../.setup-ran'],
      instructions: 'Run the tests before you propose a change.',
    }),
    lifecycle: { reuse: 'thread', snapshot: 'after-setup' },
    hooks: { onFileChange: (e) => void events.push(`change ${e.path}`) },
  })

  // Run 1: create + bootstrap; the harness fixes a file and waits until
  // the middleware's watcher saw it.
  const harness = fakeHarness(async (sb) => {
    const before = await sb.fs.read('/workspace/src/app.ts')
    await sb.fs.write('/workspace/src/app.ts', before.replace('false', 'true'))
    await eventually('the watcher sees the change', 10_000, async () =>
      events.includes('change /workspace/src/app.ts') ? true : undefined,
    )
    const diff = await sb.process.exec('git diff --stat')
    return `fixed in ${sb.id}: ${diff.stdout.trim()}`
  })
  const run1 = await drain(chat({ adapter: harness, threadId: 'fix-login', messages: [{ role: 'user', content: 'Fix the login.' }], middleware: [withSandbox(sandbox)] }))

  const key = sandbox.key({ threadId: 'fix-login', runId: '' })
  const h = await warren.resume({ id: key })
  assert.ok(h, 'the sandbox is warren thread <key>')
  assert.equal(run1.text, `fixed in ${key}: src/app.ts | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)`)
  // The file events reached the stream as the runtime emits them.
  assert.ok((run1.custom.get('sandbox.file') ?? []).length > 0, `custom events: ${[...run1.custom.keys()].join(', ')}`)

  // The workspace holds the repository, cloned in the jail from the bundle the provider carried in.
  assert.deepEqual(
    (await h.fs.list('/workspace')).map((e) => e.name),
    ['.git', '.setup-ran', 'AGENTS.md', 'CLAUDE.md', 'GEMINI.md', 'README.md', 'package.json', 'src'],
  )
  assert.equal(await h.fs.read('README.md'), '# app\n')
  assert.equal(readFileSync(path.join(h.workspaceRoot, 'src', 'app.ts'), 'utf8'), 'export const login = () => true\n')
  assert.equal((await h.fs.lstat('CLAUDE.md'))?.type, 'symlink')
  assert.match(await h.fs.read('CLAUDE.md'), /^Run the tests before you propose a change\./)
  // The setup ran in the jail: as its unprivileged user, in /workspace, in the clone.
  assert.equal(await h.fs.read('.setup-ran'), '65534 /workspace/src main\n')

  // The lifecycle: a snapshot after setup, a checkpoint of the workspace before the harness's fix.
  const cps = await warren.client.checkpoints('acme', key)
  assert.deepEqual(cps.checkpoints.map((c) => c.label), ['after-setup'])
  const diff = await warren.client.diff('acme', key, { from: cps.checkpoints[0]?.id })
  assert.deepEqual(diff.modified, ['src/app.ts'])

  // Run 2: the same thread resumes the sandbox: no second bootstrap.
  const seen: string[] = []
  const again = fakeHarness(async (sb) => {
    seen.push(sb.id, await sb.fs.read('src/app.ts'))
    return 'nothing to do'
  })
  assert.equal((await drain(chat({ adapter: again, threadId: 'fix-login', messages: [{ role: 'user', content: 'Go on.' }], middleware: [withSandbox(sandbox)] }))).text, 'nothing to do')
  assert.deepEqual(seen, [key, 'export const login = () => true\n'])
  assert.equal(await h.fs.read('.setup-ran'), '65534 /workspace/src main\n')

  // An aborted run tears its sandbox down (withSandbox's onAbort destroys it).
  const ac = new AbortController()
  const aborts = fakeHarness(async (sb) => {
    await sb.fs.write('partial.txt', 'half')
    ac.abort()
    return 'aborted'
  })
  // (with the run's signal, which fired: the teardown goes on all the same)
  await drain(chat({ adapter: aborts, threadId: 'abandoned', abortController: ac, messages: [{ role: 'user', content: 'x' }], middleware: [withSandbox(sandbox)] }))
  const abandoned = sandbox.key({ threadId: 'abandoned', runId: '' })
  // The run's stream may end before its abort hook's teardown does (the
  // hook runs as the chat unwinds): wait for the state, not the stream.
  await eventually('the aborted run\'s sandbox destroyed', 30_000, async () =>
    (await warren.resume({ id: abandoned })) === null ? true : undefined,
  )
  assert.ok(await warren.resume({ id: key }), 'the other thread stays')
})

// The README's example ("Use it from a TanStack AI harness"): the code
// between the README markers below is the README's, line for line (a test
// below holds them together), run on two servers.

/** The fake harness the README's `harness` stands for: it fixes the login. */
const harness = fakeHarness(async (sb) => {
  const app = await sb.fs.read('src/app.ts')
  await sb.fs.write('src/app.ts', app.replace('false', 'true'))
  return (await sb.process.exec('git diff --stat')).stdout.trim()
})

// README: harness begin
const store = new InMemorySandboxStore() // every server's: a database in production
const sharedStore = defineChatMiddleware({
  name: 'sandbox-store',
  provides: [SandboxStoreCapability],
  setup: (ctx) => provideSandboxStore(ctx, store),
})

function coder(warren: WarrenSandboxProvider, repo: string) {
  return defineSandbox({
    id: 'acme/coder',
    provider: warren,
    workspace: defineWorkspace({
      source: gitSource({ url: repo }),
      setup: ['git log -1 --format=%s > .setup-done'],
    }),
    lifecycle: { reuse: 'thread', snapshot: 'after-setup' },
  })
}

async function turn(warren: WarrenSandboxProvider, repo: string, threadId: string, content: string) {
  let text = ''
  for await (const chunk of chat({
    adapter: harness,
    threadId,
    messages: [{ role: 'user', content }],
    middleware: [sharedStore, withSandbox(coder(warren, repo))],
  })) {
    if (chunk.type === EventType.TEXT_MESSAGE_CONTENT) text += chunk.delta
  }
  return text
}
// README: harness end

// README: reattach begin
async function reattach(warren: WarrenSandboxProvider, sandboxId: string) {
  try {
    return (await warren.resume({ id: sandboxId })) ?? 'gone'
  } catch (err) {
    if (err instanceof WarrenPinnedError) return 'pinned'
    throw err
  }
}
// README: reattach end

test("the README's harness example, on two servers: pinned, then resumed after the owner dies", { timeout: 120_000 }, async (t) => {
  if (!requireDaemons(t)) return
  const etcd = await startEtcd(t)
  const flags = ['--store', 'etcd', '--etcd-endpoints', etcd.endpoint, '--renew-every', '200ms', '--expires-after', '2s']
  const a = await startDaemon(t, [...flags, '--host-id', 'a'])
  const b = await startDaemon(t, [...flags, '--host-id', 'b'])
  const onA = warrenSandbox({ socketPath: a.socket, tenant: 'acme' })
  const onB = warrenSandbox({ socketPath: b.socket, tenant: 'acme' })
  t.after(() => {
    onA.close()
    onB.close()
  })
  const repo = makeRepo(t, { 'src/app.ts': 'export const login = () => false\n' })

  assert.equal(await turn(onA, repo, 'fix-login', 'Fix the login.'), 'src/app.ts | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)')
  const sandboxId = coder(onA, repo).key({ threadId: 'fix-login', runId: '' })
  const root = (await onA.client.threadInfo('acme', sandboxId)).root

  // While A lives, a turn on B is refused with the page's words.
  await assert.rejects(
    turn(onB, repo, 'fix-login', 'Go on.'),
    warrenError(WarrenPinnedError, 'pinned', `The workspace of this thread is ${root} on the host a. Only that host can continue the thread.`),
  )
  assert.equal(await reattach(onB, sandboxId), 'pinned')

  await a.stop('SIGKILL')
  const moved = await eventually('reattach on B', 12_000, async () => {
    const r = await reattach(onB, sandboxId)
    return r === 'pinned' ? undefined : r
  })
  assert.notEqual(moved, 'gone')
  if (moved === 'gone') return
  assert.equal(await moved.fs.read('src/app.ts'), 'export const login = () => true\n')
  assert.equal(await moved.fs.read('.setup-done'), 'first\n')
  // The next turn on B resumes the same sandbox: the fix is there already.
  assert.equal(await turn(onB, repo, 'fix-login', 'Go on.'), 'src/app.ts | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)')
  assert.equal((await onB.client.threads('acme')).length, 1)
  assert.equal(await reattach(onB, 'never-made'), 'gone')
})

test("the README's harness example is this file's code", () => {
  const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8')
  const self = readFileSync(path.join(repoRoot, 'clients', 'typescript', 'test', 'harness.test.ts'), 'utf8')
  for (const name of ['harness', 'reattach']) {
    const region = new RegExp(`// README: ${name} begin\\n([\\s\\S]*?)// README: ${name} end\\n`).exec(self)?.[1]
    assert.ok(region, `the ${name} region of the test`)
    assert.ok(readme.includes(region), `README.md holds the ${name} region of test/harness.test.ts as it is:\n${region}`)
  }
  // What the README imports from the package, the package exports.
  const names = /import \{([^}]*)\} from '@warren\/sandbox'/.exec(readme)?.[1]
  assert.ok(names, "README.md imports from '@warren/sandbox'")
  for (const n of names.split(',').map((s) => s.trim()).filter((s) => s !== '' && !s.startsWith('type '))) {
    assert.ok(n in pkg, `the package exports ${n}`)
  }
})
