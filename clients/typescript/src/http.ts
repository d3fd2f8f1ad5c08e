/**
 * HTTP/1.1 over the daemon's Unix socket, with node:http: keep-alive
 * connections, AbortSignal on every call, JSON and raw bodies, and error
 * answers turned into {@link WarrenError}s.
 *
 * The error rule: a call rejects with the signal's reason once its signal
 * fired, at any point (before the answer, or while its body streams);
 * with a {@link WarrenUnreachableError} when the socket cannot be reached
 * or the connection breaks; with the daemon's own error otherwise.
 */
import http from 'node:http'
import { homedir, tmpdir } from 'node:os'
import { isAbsolute, join } from 'node:path'
import { Readable } from 'node:stream'
import { errorFor, WarrenError, WarrenUnreachableError } from './errors.js'

/** What a request sends. */
export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>
  /** A JSON body. */
  json?: unknown
  /** A raw body (application/octet-stream). */
  raw?: Uint8Array | string | AsyncIterable<Uint8Array> | Readable
  signal?: AbortSignal | undefined
  /** Statuses besides 200 whose answer is returned, not thrown (a readiness's 503). */
  alsoOk?: number[]
}

/** The bound of an error answer the client reads. */
const maxErrorBytes = 64 << 10

/** What a body being read belongs to: the call's signal, and the call, for messages. */
interface Pending {
  signal: AbortSignal | undefined
  what: string
}

/** The call each answer send returned belongs to. */
const pending = new WeakMap<Readable, Pending>()

/**
 * The error a failure while an answer's body is read stands for: the
 * signal's reason when it fired (node reports an aborted body as a bare
 * "aborted"), else the broken connection.
 */
function bodyError(res: Readable, err: unknown): unknown {
  const p = pending.get(res)
  if (p?.signal?.aborted) return p.signal.reason
  if (err instanceof WarrenError) return err
  const msg = err instanceof Error ? err.message : String(err)
  return new WarrenUnreachableError(`${p?.what ?? 'a call'}: the connection broke while its answer came: ${msg}`, err)
}

/**
 * Escapes one id as one path segment: every byte of its UTF-8 but letters,
 * digits, `-`, `_` and `~` is `%XX`, `.` too, so `.` and `..` never appear as
 * segments a library might clean away.
 */
export function escapeId(id: string): string {
  let out = ''
  for (const b of new TextEncoder().encode(id)) {
    const c = String.fromCharCode(b)
    if (/[A-Za-z0-9_~-]/.test(c)) {
      out += c
    } else {
      out += '%' + b.toString(16).toUpperCase().padStart(2, '0')
    }
  }
  return out
}

/**
 * The socket a client uses when it is given none, as the CLI finds it:
 * `WARREN_SOCKET`, else `warren.sock` in the default data folder of
 * `warren serve` (`/var/lib/warren` as root, else
 * `$XDG_STATE_HOME/warren` or `~/.local/state/warren`).
 */
export function defaultSocket(env: NodeJS.ProcessEnv = process.env): string {
  if (env.WARREN_SOCKET) return env.WARREN_SOCKET
  let data: string
  if (process.geteuid?.() === 0) data = '/var/lib/warren'
  else if (env.XDG_STATE_HOME && isAbsolute(env.XDG_STATE_HOME)) data = join(env.XDG_STATE_HOME, 'warren')
  else if (env.HOME) data = join(env.HOME, '.local', 'state', 'warren')
  else {
    try {
      data = join(homedir(), '.local', 'state', 'warren')
    } catch {
      data = join(tmpdir(), `warren-${process.geteuid?.() ?? 0}`)
    }
  }
  return join(data, 'warren.sock')
}

/**
 * The error of a connection that could not be made, worded as the CLI
 * words it: what was being done, the socket, and what to check.
 */
function unreachable(doing: string, socketPath: string, err: NodeJS.ErrnoException): WarrenUnreachableError {
  switch (err.code) {
    case 'ENOENT':
    case 'ECONNREFUSED':
      return new WarrenUnreachableError(
        `${doing}: no daemon answers on ${socketPath} (is 'warren serve' running? set socketPath or WARREN_SOCKET): ${err.message}`,
        err,
      )
    case 'EACCES':
      return new WarrenUnreachableError(`${doing}: no permission to use the daemon's socket ${socketPath}: ${err.message}`, err)
  }
  return new WarrenUnreachableError(`${doing} on ${socketPath}: ${err.message}`, err)
}

/** One daemon's socket, and the connections to it. */
export class Transport {
  readonly socketPath: string
  private readonly agent: http.Agent

  /** socketPath is the daemon's socket; left out, {@link defaultSocket}'s. */
  constructor(socketPath?: string) {
    if (socketPath === '') throw new TypeError('the socket path is empty: give the daemon\'s socket, or leave it out for WARREN_SOCKET')
    this.socketPath = socketPath ?? defaultSocket()
    // No bound on sockets: a followed job output or event stream holds its
    // connection as long as it lasts, and a bound would make every other
    // call wait behind them (8 jobs' stdout and stderr held 16).
    this.agent = new http.Agent({ keepAlive: true, maxFreeSockets: 16 })
  }

  /** Closes idle connections; the transport stays usable. */
  close(): void {
    this.agent.destroy()
  }

  /**
   * Sends one request and resolves with the answer of status 200, for the
   * caller to read; any other status rejects with the daemon's error.
   */
  async send(method: string, path: string, opts: RequestOptions = {}): Promise<http.IncomingMessage> {
    let target = path
    if (opts.query) {
      const q = new URLSearchParams()
      for (const [k, v] of Object.entries(opts.query)) {
        if (v !== undefined) q.set(k, String(v))
      }
      const s = q.toString()
      if (s) target += '?' + s
    }
    const headers: Record<string, string> = { host: 'warren' }
    let body: Uint8Array | undefined
    let stream: Readable | undefined
    if (opts.json !== undefined) {
      body = Buffer.from(JSON.stringify(opts.json))
      headers['content-type'] = 'application/json'
    } else if (opts.raw !== undefined) {
      headers['content-type'] = 'application/octet-stream'
      if (typeof opts.raw === 'string') body = Buffer.from(opts.raw)
      else if (opts.raw instanceof Uint8Array) body = opts.raw
      else stream = opts.raw instanceof Readable ? opts.raw : Readable.from(opts.raw)
    }
    if (body) headers['content-length'] = String(body.byteLength)
    opts.signal?.throwIfAborted()
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(
        { socketPath: this.socketPath, agent: this.agent, method, path: target, headers, signal: opts.signal },
        resolve,
      )
      req.on('error', (err) => {
        if (opts.signal?.aborted) reject(opts.signal.reason)
        else reject(unreachable(`${method} ${path}`, this.socketPath, err))
      })
      if (stream) {
        stream.on('error', (err) => req.destroy(err))
        stream.pipe(req)
      } else {
        req.end(body)
      }
    })
    pending.set(res, { signal: opts.signal, what: `${method} ${path} on ${this.socketPath}` })
    if (res.statusCode === 200 || opts.alsoOk?.includes(res.statusCode ?? 0)) return res
    const data = await readAll(res, maxErrorBytes)
    const status = res.statusCode ?? 0
    try {
      const parsed = JSON.parse(data.toString('utf8')) as { error?: { code?: string; message?: string } }
      if (parsed.error?.code) {
        throw errorFor(status, parsed.error.code, parsed.error.message ?? '')
      }
    } catch (err) {
      if (err instanceof WarrenError) throw err
    }
    throw new WarrenError(status, 'internal', `${method} ${path}: status ${status}: ${data.toString('utf8').trim()}`)
  }

  /** Sends one request and decodes its JSON answer. */
  async call<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.send(method, path, opts)
    const data = await readAll(res, Infinity)
    return JSON.parse(data.toString('utf8')) as T
  }
}

/** Reads a whole answer, at most max bytes of it. */
export async function readAll(res: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let n = 0
  try {
    for await (const chunk of res) {
      const b = chunk as Buffer
      n += b.length
      if (n > max) {
        res.destroy()
        break
      }
      chunks.push(b)
    }
  } catch (err) {
    throw bodyError(res, err)
  }
  return Buffer.concat(chunks)
}

/** Reads an NDJSON answer: one value per line, as they come. */
export async function* ndjson<T>(res: Readable, signal?: AbortSignal): AsyncGenerator<T> {
  res.setEncoding('utf8')
  const it = res[Symbol.asyncIterator]()
  let buf = ''
  try {
    for (;;) {
      let next: IteratorResult<unknown>
      try {
        next = await it.next()
      } catch (err) {
        if (signal?.aborted) throw signal.reason
        throw bodyError(res, err)
      }
      if (next.done) break
      buf += next.value as string
      let nl: number
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl)
        buf = buf.slice(nl + 1)
        if (line.trim() !== '') yield parseLine<T>(line)
      }
    }
    if (buf.trim() !== '') yield parseLine<T>(buf)
  } finally {
    res.destroy()
  }
}

function parseLine<T>(line: string): T {
  try {
    return JSON.parse(line) as T
  } catch {
    throw new WarrenError(0, 'internal', `the daemon sent a line that is not JSON: ${JSON.stringify(line.slice(0, 128))}`)
  }
}
