/**
 * warren for TypeScript: {@link WarrenClient}, a typed client of the
 * daemon's socket API, and {@link warrenSandbox}, a `@tanstack/ai-sandbox`
 * provider whose sandboxes are warren threads.
 */
export { WarrenClient } from './client.js'
export type { CallOptions, ExecResult } from './client.js'
export {
  WarrenError,
  WarrenGoneError,
  WarrenNotFoundError,
  WarrenPinnedError,
  WarrenStaleError,
  WarrenUnreachableError,
  isWarrenError,
} from './errors.js'
export { defaultSocket, escapeId } from './http.js'
export {
  WORKSPACE,
  parseSnapshotId,
  snapshotId,
  networkSettings,
  toWorkspacePath,
  warrenCapabilities,
  warrenSandbox,
} from './provider.js'
export type {
  WarrenCapabilities,
  WarrenExecResult,
  WarrenFs,
  WarrenProcess,
  WarrenSandboxHandle,
  WarrenSandboxOptions,
  WarrenCreateInput,
  WarrenSandboxProvider,
  WarrenStat,
} from './provider.js'
export type * from './api.js'
export { watchFiles } from './watch.js'
export type { WarrenFileEvent, WarrenWatch, WatchOptions } from './watch.js'
