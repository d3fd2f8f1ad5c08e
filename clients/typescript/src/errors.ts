/**
 * Errors of warren's API. Every error answer of the daemon is
 * `{"error":{"code","message"}}` with an HTTP status; the client turns it
 * into a {@link WarrenError} carrying both, and into one of its subclasses
 * for the refusals a harness branches on. `code` is stable and meant for
 * programs; `message` is for people (and for the model: the pinned, gone
 * and stale messages are the ones the product page promises, word for
 * word).
 */

/** An error answer of the daemon, or a failure to reach it. */
export class WarrenError extends Error {
  /** The HTTP status, or 0 when no answer came (the daemon is gone). */
  readonly status: number
  /** The API's error code (`not_found`, `pinned`, `stale`...), or `unreachable`. */
  readonly code: string

  constructor(status: number, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'WarrenError'
    this.status = status
    this.code = code
  }
}

/** `409 pinned`: another live server owns the thread's workspace. */
export class WarrenPinnedError extends WarrenError {
  constructor(status: number, message: string) {
    super(status, 'pinned', message)
    this.name = 'WarrenPinnedError'
  }
}

/** `410 gone`: the thread's workspace no longer exists. */
export class WarrenGoneError extends WarrenError {
  constructor(status: number, message: string) {
    super(status, 'gone', message)
    this.name = 'WarrenGoneError'
  }
}

/** `409 stale`: a write based on a read older than the file. */
export class WarrenStaleError extends WarrenError {
  constructor(status: number, message: string) {
    super(status, 'stale', message)
    this.name = 'WarrenStaleError'
  }
}

/** `404 not_found`: no such thread, file, job or checkpoint. */
export class WarrenNotFoundError extends WarrenError {
  constructor(status: number, message: string) {
    super(status, 'not_found', message)
    this.name = 'WarrenNotFoundError'
  }
}

/** The daemon could not be reached: no socket, or the connection broke. */
export class WarrenUnreachableError extends WarrenError {
  constructor(message: string, cause: unknown) {
    super(0, 'unreachable', message, { cause })
    this.name = 'WarrenUnreachableError'
  }
}

/** The error for an error answer with status, code and message. */
export function errorFor(status: number, code: string, message: string): WarrenError {
  switch (code) {
    case 'pinned':
      return new WarrenPinnedError(status, message)
    case 'gone':
      return new WarrenGoneError(status, message)
    case 'stale':
      return new WarrenStaleError(status, message)
    case 'not_found':
      return new WarrenNotFoundError(status, message)
  }
  return new WarrenError(status, code, message)
}

/** Whether err is a WarrenError with code. */
export function isWarrenError(err: unknown, code?: string): err is WarrenError {
  return err instanceof WarrenError && (code === undefined || err.code === code)
}
