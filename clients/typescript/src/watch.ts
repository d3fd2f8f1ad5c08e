/**
 * fs.watch over warren's file events: every change to a thread's files,
 * by an agent through the mount or the file API, another run, a restore
 * or a process of the host, told in order from the daemon's event stream
 * (`file.*`, filtered by a path prefix, and the paths of
 * `thread.restored`), without polling. The stream is
 * resumed from the last event seen (its seq, the cursor) after a broken
 * connection or a daemon restart, so nothing is missed or told twice;
 * where changes may have gone untold (the daemon no longer keeps the
 * events after the cursor, the reader fell behind, the daemon restarted
 * or the watcher was away longer than the daemon builds file events for a
 * reader that left), a `resync` event says so, for the harness to look at
 * the files again.
 */
import type { WarrenClient } from './client.js'
import type { WarrenEvent } from './api.js'

/** One change of the watched tree, as fs.watch tells it. */
export interface WarrenFileEvent {
  /**
   * `create`, `change`, `delete` (a rename is a `delete` of the old path
   * and a `create` of the new one, with `from` set on the latter; each
   * path a restore changed is a `change`: it may have made, changed or
   * removed the entry), or
   * `resync`: changes may have gone untold; `path` is the watched root,
   * `reason` says why.
   */
  type: 'create' | 'change' | 'delete' | 'resync'
  /** The entry, as the harness names it (under the path it watches). */
  path: string
  /** The old path of a renamed entry. */
  from?: string
  /** Who made the change: an agent run, `uid:N` for an API caller; none for a change behind the filesystem's back. */
  actor?: string
  /** The entry's version after the change. */
  version?: number
  /** The event's seq: pass it as `since` to a later watch to resume after it. */
  cursor: number
  /** Why a resync. */
  reason?: string
}

/** How a watch starts. */
export interface WatchOptions {
  /** Resume after this cursor (a {@link WarrenFileEvent.cursor} of an earlier watch) rather than from now. */
  since?: number
  /** Stops the watch when it fires. */
  signal?: AbortSignal
}

/** A running watch. */
export interface WarrenWatch {
  /** Stops the watch; no event is told after it resolves. */
  stop: () => Promise<void>
  /** The cursor of the last event told, or where the watch began. */
  cursor: () => number
}

/**
 * How long the daemon goes on building a thread's file events after its
 * last reader left (10 minutes, docs/api.md "Follow events"), with a
 * margin: a watcher away longer may have missed changes.
 */
const followLinger = 9 * 60_000

/** How long a (re)connection waits for the daemon's answer. */
const answerMs = 5_000

/** Reconnection pauses: from the first to the longest. */
const retryFirstMs = 50
const retryMaxMs = 2_000

/**
 * Watches the files of thread under prefix (workspace-relative, "/src";
 * "" for all), telling each change to onEvent with its path made by
 * name(eventPath). It resolves once the daemon follows the thread: every
 * change after that is told.
 */
export async function watchFiles(
  client: WarrenClient,
  tenant: string,
  thread: string,
  prefix: string,
  name: (p: string) => string,
  onEvent: (e: WarrenFileEvent) => void,
  opts: WatchOptions = {},
): Promise<WarrenWatch> {
  const stopper = new AbortController()
  const signal = stopper.signal
  if (opts.signal) {
    if (opts.signal.aborted) stopper.abort()
    else opts.signal.addEventListener('abort', () => stopper.abort(), { once: true, signal })
  }
  const under = (p: string | undefined) => p !== undefined && (prefix === '' || p === prefix || p.startsWith(prefix + '/'))
  const root = name(prefix === '' ? '/' : prefix)

  let cursor = opts.since ?? 0
  let run = ''
  let away = 0 // when the stream broke, 0 while it runs
  const tell = (e: WarrenFileEvent) => {
    if (!signal.aborted) onEvent(e)
  }
  const resync = (reason: string) => tell({ type: 'resync', path: root, cursor, reason })

  const open = async () => {
    // Each connection has a signal of its own: the watch's stop ends it,
    // and so does a daemon that does not answer in time (a stopping one
    // may take the connection and never serve it).
    const conn = new AbortController()
    const stop = () => conn.abort(signal.reason)
    signal.addEventListener('abort', stop, { once: true })
    const timer = setTimeout(() => conn.abort(new Error('the daemon did not answer in time')), answerMs)
    let s: Awaited<ReturnType<WarrenClient['openEvents']>>
    try {
      s = await client.openEvents({ tenant, thread, prefix: prefix || undefined, since: cursor || undefined, signal: conn.signal })
    } catch (err) {
      signal.removeEventListener('abort', stop)
      throw err
    } finally {
      clearTimeout(timer)
    }
    if (cursor === 0) cursor = s.seq // from now: resumed from here
    if (run !== '' && s.run !== run) {
      resync(`the daemon restarted: changes made before this watch followed the thread again may have no event`)
    } else if (away !== 0 && Date.now() - away > followLinger) {
      resync(`the watch was away ${Math.round((Date.now() - away) / 1000)}s, longer than the daemon builds file events for a reader that left`)
    }
    run = s.run
    away = 0
    return s.events
  }

  const handle = (ev: WarrenEvent) => {
    if (ev.type === 'missed') {
      resync(ev.message ? `the daemon no longer keeps the events: ${ev.message}` : `${ev.missed ?? 'some'} events were dropped`)
      return
    }
    if (ev.seq <= cursor) return // told already, before a reconnect
    const base = { actor: ev.actor, version: ev.version, cursor: ev.seq }
    switch (ev.type) {
      case 'file.created':
        if (under(ev.path)) tell({ type: 'create', path: name(ev.path!), ...base })
        break
      case 'file.changed':
        if (under(ev.path)) tell({ type: 'change', path: name(ev.path!), ...base })
        break
      case 'file.removed':
        if (under(ev.path)) tell({ type: 'delete', path: name(ev.path!), ...base })
        break
      case 'file.renamed':
        if (under(ev.from)) tell({ type: 'delete', path: name(ev.from!), ...base })
        if (under(ev.path)) tell({ type: 'create', path: name(ev.path!), ...(under(ev.from) ? { from: name(ev.from!) } : {}), ...base })
        break
      case 'thread.restored': {
        // A restore (undo, redo, revert) makes no file events: its event
        // lists the paths it changed, each told as a change (it may have
        // made, changed or removed the entry), or, when it lists only
        // the first of them, a resync.
        if (/the first \d+ listed/.test(ev.message ?? '')) {
          cursor = ev.seq
          resync(`a restore (${ev.op} to ${ev.checkpoint}) changed more paths than its event lists: ${ev.message}`)
          return
        }
        for (const p of ev.paths ?? []) {
          const ep = p.startsWith('/') ? p : '/' + p
          if (under(ep)) tell({ type: 'change', path: name(ep), ...base })
        }
        break
      }
    }
    cursor = ev.seq
  }

  let events = await open()
  const loop = (async () => {
    let pause = retryFirstMs
    while (!signal.aborted) {
      try {
        for await (const ev of events) {
          handle(ev)
          pause = retryFirstMs
        }
      } catch {
        // The stream broke (the daemon stopped, the connection failed):
        // resumed below from the cursor.
      }
      if (signal.aborted) break
      if (away === 0) away = Date.now()
      for (;;) {
        await sleep(pause, signal)
        if (signal.aborted) return
        pause = Math.min(pause * 2, retryMaxMs)
        try {
          events = await open()
          break
        } catch {
          // Not back yet.
        }
      }
    }
  })()

  return {
    stop: async () => {
      stopper.abort()
      await loop
    },
    cursor: () => cursor,
  }
}

/** Resolves after ms, or at once when signal fires. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })
}
