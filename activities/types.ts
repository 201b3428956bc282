/**
 * The activity interfaces, as types only: workflows import this file with
 * `import type`, so no activity code can enter the sandbox.
 */
import type { ProxyPoolStatus, ProxyStatus } from '../resources/proxy-schema.js';
import type { PoolObservation, PoolRef, RotationReason } from '../workflows/pool/types.js';
import type { InstanceState, Placement } from '../providers/types.js';
import type {
  CloudInitRef,
  ProxyRef,
  ProxyState,
  RecordedStatus,
  WorkerTiming,
} from '../workflows/proxy/types.js';

export interface CreateInstanceInput {
  ref: ProxyRef;
  provider: string;
  placement: Placement;
  port: number;
  cloudInit?: CloudInitRef;
  /** The Secret with the proxy's generated credentials, read inside the activity (never in history). */
  credentialsSecret?: string;
}

export interface CreateInstanceResult {
  id: string;
  /** The spec hash of what was actually created (the cloud-init as resolved at this moment). */
  specHash: string;
  /**
   * The provider's first answer about the new instance, asked in the same
   * activity; absent when that Get failed (the workflow then asks itself).
   */
  seen?: GetInstanceResult;
}

export interface InstanceRef {
  provider: string;
  id: string;
}

export type GetInstanceResult =
  | { found: false }
  /**
   * `port`: the port the provider chose for the instance (absent: the
   * Proxy's own). `expiresAt` (RFC 3339): when the provider ends a Running
   * instance by itself (a vendor session's lifetime).
   */
  | { found: true; state: InstanceState; ip?: string; port?: number; expiresAt?: string };

export interface ProviderActivities {
  createInstance(input: CreateInstanceInput): Promise<CreateInstanceResult>;
  getInstance(input: InstanceRef): Promise<GetInstanceResult>;
  deleteInstance(input: InstanceRef): Promise<void>;
  /** The instance carrying this Proxy UID's mark, if any (a run that never learned its ID). */
  findInstanceByUid(input: { provider: string; uid: string }): Promise<{ id?: string }>;
}

export interface KubeActivities {
  /** Replaces status on the Proxy with this UID; 'gone' when it no longer exists (or was recreated). */
  writeProxyStatus(input: {
    ref: ProxyRef;
    status: ProxyStatus;
    /**
     * The status the workflow knows to be recorded (what it last wrote, or
     * what its run started from): the Events are computed against it
     * without a read. Absent when the workflow does not know; then it reads.
     */
    previous?: ProxyStatus;
    /**
     * Write only if the Proxy is still at this resourceVersion ('stale'
     * when not): for a write that may land after a newer one.
     */
    resourceVersion?: string;
  }): Promise<'written' | 'gone' | 'stale'>;
  /**
   * What the status of the Proxy with this UID records about its instance
   * (empty when it records none, or the Proxy is gone): read by a run that
   * starts afresh.
   */
  readRecordedStatus(input: { ref: ProxyRef }): Promise<RecordedStatus>;
  /** Removes our finalizer from the Proxy with this UID. */
  removeProxyFinalizer(input: { ref: ProxyRef }): Promise<'removed' | 'absent' | 'gone'>;
}

export interface TimingActivities {
  /**
   * The worker's timing for a Proxy of this provider: the local activity
   * every run starts with. Given `create` (a fresh Proxy whose first step is
   * its create) and a quick provider, it also creates the instance, so a
   * provisioning needs one local activity and one activation fewer; given
   * `report` too, it then writes the status that create leaves (one more of
   * each fewer). `created` is absent when it did not create, whatever the
   * reason: the workflow then creates as it always does, and meets any
   * failure there; `reported` is absent when it did not write (the workflow
   * then writes).
   */
  proxyTiming(input: ProxyTimingInput): Promise<RunStart>;
}

export interface ProxyTimingInput {
  provider: string;
  create?: CreateInstanceInput;
  /**
   * The run's state as the create finds it (a copy), the status the Proxy
   * holds (for its Events) and the resourceVersion it was read at (the
   * write is pinned to it): the status the create leaves is built from them
   * by the workflow's own rules (`applyCreated`, `buildStatus`).
   */
  report?: { state: ProxyState; previous?: ProxyStatus; resourceVersion: string };
}

/** What a run starts with: the worker's timing, and the instance a quick create at the start made. */
export interface RunStart extends WorkerTiming {
  created?: CreateInstanceResult;
  /** The status written for that instance, and the write's outcome. */
  reported?: { outcome: 'written' | 'gone'; status: ProxyStatus };
}

/** One provider's part of a drift sweep. */
export interface ProviderDriftSweep {
  provider: string;
  /** Instances listByTag returned; undefined when the list failed. */
  listed?: number;
  /** Steady Proxies of this provider whose recorded instance was compared. */
  compared: number;
  /** Compared Proxies whose instance differed (gone, not running, another address). */
  drifted: number;
  /** Of those, workflows that took the signal (a stopped workflow does not). */
  signalled: number;
  /** Why the list failed (the provider's own message). */
  error?: string;
  /** listByTag's error class when it failed. */
  errorClass?: string;
  /** Targets (kvm hosts) the listing left out: their Proxies were not compared. */
  unlisted?: string[];
}

export interface DriftSweepReport {
  providers: ProviderDriftSweep[];
  /** Providers skipped because their listByTag is not cheap; their Proxies poll on their own. */
  notSwept: string[];
  /** Set when the Proxies could not be listed: nothing was compared. */
  proxyListError?: string;
}

export interface DriftActivities {
  /** Lists every swept provider's instances and the Proxies, and signals only the Proxies whose instance drifted. */
  sweepDrift(input: { listTimeoutMs: number }): Promise<DriftSweepReport>;
}

/** What the ProxyPool workflow does to the apiserver: its members and its status. */
export interface PoolActivities {
  /** The pool (does it still exist with this UID, its template hash) and every Proxy it controls. */
  listPoolMembers(input: { pool: PoolRef }): Promise<PoolObservation>;
  /**
   * Makes a member per name from the pool's template as read now; nothing
   * when the pool's template hash is no longer `templateHash` (the bridge
   * brings the new one). A name already taken by the pool's own member
   * (a retried call) counts as made; one taken by anything else is skipped.
   */
  createPoolMembers(input: {
    pool: PoolRef;
    templateHash: string;
    names: string[];
  }): Promise<{ created: number }>;
  /** Deletes these members (each drains first when its spec asks); gone ones are skipped. */
  deletePoolMembers(input: {
    pool: PoolRef;
    /** `rotation`: why a member is rotated out (reason `Rotated`), said in the Event. */
    members: Array<{ name: string; uid: string; rotation?: RotationReason }>;
    reason: 'ScalingDown' | 'RollingOut' | 'PoolDeleted' | 'Rotated';
  }): Promise<{ deleted: number }>;
  /** Puts members edited by hand back to the template (spec, labels, annotations). */
  restorePoolMembers(input: {
    pool: PoolRef;
    templateHash: string;
    members: Array<{ name: string; uid: string }>;
  }): Promise<{ restored: number }>;
  /** Replaces the pool's status (UID tested); 'gone' when the pool no longer exists. */
  writePoolStatus(input: {
    pool: PoolRef;
    status: ProxyPoolStatus;
    /** An Event to record once the status is written (a condition that just turned, such as BudgetLimited). */
    event?: { type: 'Normal' | 'Warning'; reason: string; note: string };
  }): Promise<'written' | 'gone'>;
}
