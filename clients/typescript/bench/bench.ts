/**
 * What the TypeScript provider costs, against a running daemon:
 *
 *   - exec('true'): warrenSandbox's process.exec of `true` in a warm jail,
 *     from node (the call, its NDJSON answer read to the exit), beside the
 *     Go client's warm `true` that bench/execbench measured on the same
 *     daemon (given with --go-warm);
 *   - fs.read of a 4 KiB file through the provider (GET files/raw, with
 *     the handle's run), against node's fs.readFile of the same file on
 *     the thread's mount path.
 *
 * The measures take turns within each round, so drift hits them alike.
 * It prints median, p10 and p90 of each. bench/exec.sh runs it after the
 * Go benches:
 *
 *   node dist/bench/bench.js --socket DATA/warren.sock [--runs 200] [--go-warm "MEDIAN P10 P90"]
 */
import { readFile } from 'node:fs/promises'
import * as path from 'node:path'
import { parseArgs } from 'node:util'
import { warrenSandbox } from '../src/provider.js'

const { values } = parseArgs({
  options: {
    socket: { type: 'string' },
    runs: { type: 'string', default: '200' },
    'go-warm': { type: 'string' },
    tenant: { type: 'string', default: 'bench' },
  },
})
if (!values.socket) {
  console.error('bench: --socket is required')
  process.exit(2)
}
const runs = Number(values.runs)

/** A duration as Go prints one rounded to the microsecond ("1.234ms", "987µs"), in ms. */
function goMillis(s: string): number {
  const m = /^([0-9.]+)(ns|µs|us|ms|s)$/.exec(s)
  if (!m) throw new Error(`bench: ${JSON.stringify(s)} is not a Go duration`)
  const n = Number(m[1])
  return n * { ns: 1e-6, µs: 1e-3, us: 1e-3, ms: 1, s: 1000 }[m[2] as 'ns' | 'µs' | 'us' | 'ms' | 's']
}

/** p10, median and p90 of samples in ms. */
function percentiles(samples: number[]): [number, number, number] {
  const s = [...samples].sort((a, b) => a - b)
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN
  return [at(0.1), at(0.5), at(0.9)]
}

const fmt = (ms: number) => (ms >= 1 ? `${ms.toFixed(3)}ms` : `${(ms * 1000).toFixed(0)}µs`)

const warren = warrenSandbox({ socketPath: values.socket, tenant: values.tenant })
const h = await warren.create({ id: `ts-bench-${process.pid}` })
try {
  const file = 'bench/4k.bin'
  const data = new Uint8Array(4096).map((_, i) => (i * 7) & 0xff)
  await h.fs.write(file, data)
  const onMount = path.join(h.workspaceRoot, file)

  const measures: Array<{ name: string; f: () => Promise<unknown>; d: number[] }> = [
    {
      name: "provider exec('true')",
      f: async () => {
        const r = await h.process.exec('true')
        if (r.exitCode !== 0) throw new Error(`exec true: exit ${r.exitCode}`)
      },
      d: [],
    },
    {
      name: 'provider fs.read 4 KiB',
      f: async () => {
        if ((await h.fs.readBytes(file)).length !== 4096) throw new Error('fs.read: not 4 KiB')
      },
      d: [],
    },
    {
      name: 'node fs.readFile 4 KiB',
      f: async () => {
        if ((await readFile(onMount)).length !== 4096) throw new Error('readFile: not 4 KiB')
      },
      d: [],
    },
  ]
  // Warm: the jail is made by the first command; connections, JIT.
  for (let i = 0; i < 20; i++) for (const m of measures) await m.f()
  for (let i = 0; i < runs; i++) {
    for (const m of measures) {
      const start = performance.now()
      await m.f()
      m.d.push(performance.now() - start)
    }
  }

  const rows: Array<[string, number, number, number, string]> = []
  let goMedian: number | undefined
  if (values['go-warm']) {
    const [med, p10, p90] = values['go-warm'].trim().split(/\s+/).map(goMillis)
    if (med === undefined || p10 === undefined || p90 === undefined) throw new Error('bench: --go-warm wants "MEDIAN P10 P90"')
    goMedian = med
    rows.push(['Go client exec true', med, p10, p90, '(execbench, warm jail)'])
  }
  const med: Record<string, number> = {}
  for (const m of measures) {
    const [p10, p50, p90] = percentiles(m.d)
    med[m.name] = p50
    rows.push([m.name, p50, p10, p90, ''])
  }
  console.log(`\n${'TypeScript provider'.padEnd(26)} ${'median'.padStart(12)} ${'p10'.padStart(12)} ${'p90'.padStart(12)}   (${runs} runs, node ${process.version})`)
  for (const [name, p50, p10, p90, note] of rows) {
    console.log(`${name.padEnd(26)} ${fmt(p50).padStart(12)} ${fmt(p10).padStart(12)} ${fmt(p90).padStart(12)}   ${note}`.trimEnd())
  }
  console.log()
  const exec = med["provider exec('true')"] ?? NaN
  if (goMedian !== undefined) {
    console.log(`provider exec / Go client exec:   ${(exec / goMedian).toFixed(2)}x (the same command, the same daemon; node's HTTP client against Go's)`)
  }
  const read = med['provider fs.read 4 KiB'] ?? NaN
  const native = med['node fs.readFile 4 KiB'] ?? NaN
  console.log(`provider fs.read / fs.readFile:   ${(read / native).toFixed(2)}x (one API call against a read through the mount, the kernel's cache warm)`)
} finally {
  await h.destroy().catch((err: unknown) => console.error(`bench: destroy ${h.id}: ${String(err)}`))
  warren.close()
}
