/**
 * The package against docs/openapi.yaml: src/openapi.ts is what the
 * generator makes of the spec today (src/api.ts takes every wire type from
 * it), and every operation of the spec has a method of the client.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { WarrenClient } from '../src/client.js'
import type { operations } from '../src/openapi.js'
import { repoRoot } from './daemon.js'
import { tempDir } from './helpers.js'

const pkg = path.join(repoRoot, 'clients', 'typescript')

test('src/openapi.ts is generated from docs/openapi.yaml as it is now', (t) => {
  const out = path.join(tempDir(t), 'openapi.ts')
  execFileSync(path.join(pkg, 'node_modules', '.bin', 'openapi-typescript'), [path.join(repoRoot, 'docs', 'openapi.yaml'), '-o', out], {
    cwd: pkg,
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const committed = readFileSync(path.join(pkg, 'src', 'openapi.ts'), 'utf8')
  assert.ok(committed === readFileSync(out, 'utf8'), 'src/openapi.ts is out of date with docs/openapi.yaml: run `npm run gen` in clients/typescript')
})

// Each operation of the spec, by its operationId, and the method of the
// client that makes it. The type makes a new operation without a method,
// or a method that is gone, a compile error; the test below checks the
// methods are there at run time too.
const methodOf: Record<keyof operations, keyof WarrenClient> = {
  bind: 'bind',
  showThread: 'threadInfo',
  deleteThread: 'deleteThread',
  closeThread: 'closeThread',
  listThreads: 'threads',
  unpin: 'unpin',
  listHosts: 'hosts',
  usage: 'usage',
  health: 'health',
  version: 'version',
  ready: 'ready',
  metrics: 'metrics',
  listMounts: 'mounts',
  mount: 'mount',
  unmount: 'unmount',
  events: 'events',
  readFile: 'readFile',
  writeFile: 'writeFile',
  editFile: 'editFile',
  listFiles: 'list',
  statFile: 'stat',
  fileExists: 'exists',
  makeFolder: 'mkdir',
  removeFile: 'remove',
  renameFile: 'rename',
  readRaw: 'readRaw',
  writeRaw: 'writeRaw',
  registerRun: 'registerRun',
  endRun: 'endRun',
  exec: 'exec',
  execStdin: 'execStdin',
  execResize: 'execResize',
  execBackground: 'execBackground',
  execSignal: 'execSignal',
  listJobs: 'jobs',
  spawn: 'spawn',
  showJob: 'job',
  jobOutput: 'jobOutput',
  stopJob: 'stopJob',
  jobStdin: 'jobStdin',
  jobSignal: 'jobSignal',
  listCheckpoints: 'checkpoints',
  checkpoint: 'checkpoint',
  diff: 'diff',
  undo: 'undo',
  redo: 'redo',
  revert: 'revert',
  fork: 'fork',
  openPort: 'openPort',
  closePort: 'closePort',
  setNetwork: 'setNetwork',
  listImages: 'listImages',
  pullImage: 'pullImage',
  loadImage: 'loadImage',
  removeImage: 'removeImage',
}

test('every operation of the spec has a method of the client', () => {
  const spec = readFileSync(path.join(repoRoot, 'docs', 'openapi.yaml'), 'utf8')
  const ids = [...spec.matchAll(/^\s+operationId:\s*(\S+)\s*$/gm)].map((m) => m[1]).sort()
  assert.deepEqual(Object.keys(methodOf).sort(), ids)
  for (const [op, method] of Object.entries(methodOf)) {
    assert.equal(typeof WarrenClient.prototype[method], 'function', `${op}: WarrenClient.${method}`)
  }
})
