/**
 * The wire types of warren's API, under the names the client uses. Every one
 * is the schema docs/openapi.yaml gives it: src/openapi.ts is generated from
 * that file (`npm run gen`), and test/spec.test.ts fails when the two drift
 * apart, so a change to the API reaches this package as a type error rather
 * than as a field silently missing at run time.
 */
import type { components } from './openapi.js'

type S = components['schemas']

/** A thread's settings; a missing field means the daemon's default. */
export type Settings = S['Settings']
export type Egress = S['Egress']
/** A thread's record, as the daemon shows it. */
export type ThreadInfo = S['ThreadInfo']
export type BindRequest = S['BindRequest']
export type BindResponse = S['BindResponse']
export type ThreadResponse = S['ThreadResponse']
/** One page of GET /v1/threads: nextCursor is set when more follow. */
export type ThreadsResponse = S['ThreadsResponse']
/** A daemon, as its heartbeats show it. */
export type Usage = S['Usage']
export type UsageResponse = S['UsageResponse']
export type Health = S['Health']
export type Version = S['Version']
export type KernelFeature = S['KernelFeature']
export type Readiness = S['Readiness']
export type ReadyCheck = S['ReadyCheck']
export type Host = S['Host']
export type HostsResponse = S['HostsResponse']
export type MountRequest = S['MountRequest']
/** An inspection mount. */
export type MountInfo = S['MountInfo']
export type MountResponse = S['MountResponse']
export type MountsResponse = S['MountsResponse']
export type UnmountResponse = S['UnmountResponse']
export type RunResponse = S['RunResponse']
export type BackgroundRequest = S['BackgroundRequest']
export type JobResponse = S['JobResponse']
export type ExecRequest = S['ExecRequest']
/** One line of an exec's answer. */
export type ExecFrame = S['ExecFrame']
/** Why a command or a job ended as it did, where the daemon or the kernel ended it. */
export type EndReason = S['EndReason']
export type SpawnRequest = S['SpawnRequest']
/** A background job. */
export type JobInfo = S['JobInfo']
/** One line of a job's output. */
export type JobFrame = S['JobFrame']
export type ReadFileResponse = S['ReadFileResponse']
export type WriteFileResponse = S['WriteFileResponse']
export type EditFileResponse = S['EditFileResponse']
/** An entry of a workspace folder. */
export type EntryInfo = S['Entry']
export type ListResponse = S['ListResponse']
export type StatResponse = S['StatResponse']
export type ExistsResponse = S['ExistsResponse']
export type MkdirResponse = S['MkdirResponse']
export type RemoveResponse = S['RemoveResponse']
export type RenameResponse = S['RenameResponse']
export type SignalExecResponse = S['SignalExecResponse']
export type SignalJobResponse = S['SignalJobResponse']
/** A checkpoint of a thread's workspace. */
export type Checkpoint = S['Checkpoint']
export type CheckpointRequest = S['CheckpointRequest']
export type CheckpointResponse = S['CheckpointResponse']
export type CheckpointsResponse = S['CheckpointsResponse']
export type RestoreResponse = S['RestoreResponse']
export type ForkResponse = S['ForkResponse']
export type PortChannel = S['PortChannel']
export type PortClosed = S['PortClosed']
export type Image = S['Image']
export type ImagesResponse = S['ImagesResponse']
export type ImageResponse = S['ImageResponse']
export type DiffResponse = S['DiffResponse']
/** One line of the event stream. */
export type WarrenEvent = S['Event']
/** The body of every error answer. */
export type APIError = S['APIError']
/** A code of the API's errors. */
export type ErrorCode = S['APIError']['code']
