/**
 * The wire types of warren's API, as docs/openapi.yaml describes them
 * (test/spec.test.ts holds these names against it). Fields are as the
 * daemon sends them: optional ones may be absent.
 */

/** A thread's settings; a missing field means the daemon's default. */
export interface Settings {
  network?: 'none' | 'host'
  memoryBytes?: number
  maxProcs?: number
  cpuMillis?: number
  env?: Record<string, string>
  maxJobs?: number
  diskBytes?: number
  checkpoints?: number
}

/** A thread's record, as the daemon shows it. */
export interface ThreadInfo {
  tenant: string
  thread: string
  kind: string
  hostId?: string
  root: string
  mountPath: string
  boundAt: string
  state: 'bound' | 'closed' | 'gone' | 'deleting'
  closedAt?: string
  settings?: Settings
  revision: number
  mounted: boolean
  error?: string
  owner?: string
}

export interface BindResponse {
  binding: ThreadInfo
  mountPath: string
}

export interface ExecRequest {
  command: string
  cwd?: string
  env?: Record<string, string>
  run?: string
  stdin?: string
  timeoutSeconds?: number
  openStdin?: boolean
  tty?: boolean
  rows?: number
  cols?: number
}

/** One line of an exec's answer. */
export interface ExecFrame {
  id?: string
  stream?: 'stdout' | 'stderr' | 'tty'
  data?: string
  exit?: number
  timedOut?: boolean
  background?: string
  error?: string
}

export interface SpawnRequest {
  command: string
  label?: string
  user?: string
  cwd?: string
  env?: Record<string, string>
  run?: string
}

/** A background job. */
export interface JobInfo {
  id: string
  tenant: string
  thread: string
  seq: number
  label: string
  user?: string
  hostId?: string
  instance?: string
  backendId?: string
  startedAt: string
  running: boolean
  ended: boolean
  exitCode?: number
  endedAt?: string
  note?: string
  outputBytes?: number
  droppedBytes?: number
  revision: number
}

/** One line of a job's output. */
export interface JobFrame {
  offset: number
  stream?: 'stdout' | 'stderr'
  data?: string
  dropped?: number
  end?: boolean
  exit?: number
}

export interface ReadFileResponse {
  path: string
  content: string
  encoding?: 'base64'
  size: number
  version: number
}

export interface WriteFileResponse {
  path: string
  size: number
  version: number
}

/** An entry of a workspace folder. */
export interface EntryInfo {
  name?: string
  path: string
  type: 'file' | 'dir' | 'symlink' | 'other'
  size: number
  mode: number
  mtime: string
  version: number
  target?: string
}

export interface ListResponse {
  path: string
  entries: EntryInfo[]
}

export interface ExistsResponse {
  path: string
  exists: boolean
  type?: EntryInfo['type']
}

export interface RemoveResponse {
  path: string
  removed: number
}

export interface RenameResponse {
  from: string
  to: string
  version: number
}

/** A checkpoint of a thread's workspace. */
export interface Checkpoint {
  id: string
  seq: number
  label?: string
  turn?: number
  run?: string
  tree: string
  parent?: string
  auto?: boolean
  hostId?: string
  createdAt: string
  files: number
  bytes: number
  head?: boolean
}

export interface CheckpointResponse {
  checkpoint: Checkpoint
  cost: { full: boolean; read: number; newObjects: number; newBytes: number; millis: number }
}

export interface CheckpointsResponse {
  checkpoints: Checkpoint[]
  head?: string
  redo?: string[]
}

export interface RestoreResponse {
  op: 'undo' | 'redo' | 'revert'
  to: string
  saved?: string
  changed: string[]
  stopped?: string[]
  head: string
  redo?: string[]
}

export interface ForkResponse {
  binding: ThreadInfo
  mountPath: string
  checkpoint: string
  from: string
}

export interface DiffResponse {
  from: string
  to: string
  added: string[]
  removed: string[]
  modified: string[]
  diffs?: { path: string; diff: string }[]
}

/** One line of the event stream. */
export interface WarrenEvent {
  seq: number
  time: string
  type: string
  tenant: string
  thread: string
  actor?: string
  path?: string
  message?: string
  missed?: number
  job?: string
  label?: string
  user?: string
  exit?: number
  data?: string
  stream?: 'stdout' | 'stderr'
  checkpoint?: string
  op?: string
  paths?: string[]
}
