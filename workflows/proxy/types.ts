/**
 * Serialisable types of the Proxy workflow: its input, the desired spec the
 * bridge sends, the health verdict the prober sends, and the state carried
 * across continue-as-new. Nothing here may hold secret material: cloud-init
 * appears only as a reference and a content hash.
 */
import type { Condition, ProxyPhase } from '../../resources/proxy-schema.js';
import type { InstanceState, Placement } from '../../providers/types.js';
import type { ProxyRef } from '../../resources/proxy-ref.js';
import type { RecordedStatus } from '../../resources/recorded-status.js';

export type { ProxyRef };

export type CloudInitRef = { source: 'inline' } | { source: 'secret'; name: string; key: string };

/** The desired spec, as the bridge saw it. Idempotent by (generation, specHash, flags). */
export interface DesiredSpec {
  generation: number;
  mode: 'Managed' | 'External';
  provider?: string;
  placement: Placement;
  port: number;
  endpoint?: { host: string; port: number };
  cloudInit?: CloudInitRef;
  /**
   * The name of the Secret (in the Proxy's namespace) that holds a Managed
   * proxy's generated credentials; the create activity reads it. Absent
   * for a run started without one (before credentials existed, and in
   * tests): the instance then asks for none.
   */
  credentialsSecret?: string;
  /** Versioned spec hash of placement, port, the resolved cloud-init's content hash and the credentials' digest. */
  specHash: string;
  /**
   * The hashes of the same input under every older hash version. A recorded
   * hash found here means only the algorithm changed: adopt, don't replace.
   */
  legacySpecHashes: string[];
  /** Set when the bridge could not resolve the referenced Secret (missing or unlabelled). */
  cloudInitProblem?: string;
  /**
   * Set when the Secret named for the generated credentials is not usable
   * (someone else's, unlabelled, a key missing): no instance is made open
   * instead, and a running one is kept, as for cloudInitProblem.
   */
  credentialsProblem?: string;
  skipCleanup: boolean;
  deletionRequested: boolean;
  /** spec.drainTimeoutSeconds: replacing or deleting a running instance drains its leases first. */
  drainTimeoutSeconds?: number;
}

/** The lease API found no lease left on the draining proxy at this address. */
export interface LeasesDrainedReport {
  ip: string;
}

/** A running instance that takes no new leases while the ones held end, before it is replaced or deleted. */
export interface DrainState {
  why: 'replacing' | 'deleting';
  /** The address being drained: a report about another address is stale. */
  ip: string;
  /** RFC 3339, when the drain began. */
  since: string;
  /** Workflow time (ms) when the drain gives up waiting for leases. */
  untilMs: number;
  /** The lease API said no lease is left. */
  drained: boolean;
}

export type HealthVerdict = 'Unknown' | 'Healthy' | 'Unhealthy';

export interface HealthReport {
  /** The address that was probed; a verdict for another address (an old instance) is ignored. */
  ip: string;
  healthy: boolean;
  latencyMillis?: number;
  /** RFC 3339. */
  checkedAt: string;
  reason?: string;
  message?: string;
}

export interface ProxyTiming {
  provisioningPollMs: number;
  deletionPollMs: number;
  /**
   * Per-proxy steady poll for a provider the drift sweep does not cover (its
   * listByTag is not cheap, or the sweep is off).
   */
  driftPollMs: number;
  /**
   * Per-proxy steady poll for a provider the drift sweep covers: the safety
   * net for a missed sweep. Also an upper bound on every steady wait.
   */
  safetyPollMs: number;
  quotaRetryMs: number;
  /** Slow retry after a transient failure exhausted its activity retries, or an unconfigured provider. */
  errorRetryMs: number;
}

export const DEFAULT_TIMING: ProxyTiming = {
  provisioningPollMs: 10_000,
  deletionPollMs: 10_000,
  driftPollMs: 10 * 60_000,
  safetyPollMs: 6 * 3_600_000,
  quotaRetryMs: 300_000,
  errorRetryMs: 60_000,
};

/** What the worker running this workflow says about its timing, read at the start of every run. */
export interface WorkerTiming extends ProxyTiming {
  /** The drift sweep lists this Proxy's provider: the steady wait is the safety poll. */
  swept: boolean;
  /**
   * The provider's create is one short call (ProviderCapabilities.quickCreate):
   * run it as a local activity. Absent in runs from before it: those create
   * through a regular activity, as they did.
   */
  quickCreate?: boolean;
}

/**
 * What the drift sweep saw for an instance whose recorded state it
 * contradicts. The workflow looks for itself before acting on it.
 */
export interface DriftReport {
  /** The providerID the Proxy's status recorded; a report about another instance is stale and ignored. */
  instanceId: string;
  /** Gone, or its listed state and address. */
  observed: { found: false } | { found: true; state: InstanceState; ip?: string };
}

export type { RecordedStatus };

/** A failure the workflow holds on to until something changes. */
export interface LatchedFailure {
  /** The ApplicationFailure type: Permanent, ProviderNotConfigured, CloudInitError, QuotaExceeded, Transient. */
  type: string;
  message: string;
  generation: number;
  /** RFC 3339 */
  at: string;
}

export interface ProxyState {
  ref: ProxyRef;
  desired: DesiredSpec;
  /** The providerID, once create returned. */
  instanceId?: string;
  /** Spec hash the current instance was created with. */
  instanceSpecHash?: string;
  instanceState?: InstanceState;
  ip?: string;
  /** The port the provider chose for the instance (a vendor's super-proxy, a list entry); absent: the spec's. */
  port?: number;
  /** RFC 3339: when the provider ends the running instance by itself (a vendor session's lifetime). */
  expiresAt?: string;
  /** The instance is being deleted to be replaced (spec change, or Stopped/Terminated). */
  replacing?: 'spec-changed' | 'stopped';
  /** The instance is draining before its replacement or deletion. */
  drain?: DrainState;
  failure?: LatchedFailure;
  /**
   * Set when this run's deletion began under the `deletion-shows-error`
   * patch: a deletion held up by a provider error shows that error in the
   * Provisioned condition instead of "Deleting", and the error is cleared
   * once a delete call succeeds again.
   */
  deletionShowsError?: boolean;
  health: {
    verdict: HealthVerdict;
    latencyMillis?: number;
    checkedAt?: string;
    reason?: string;
    message?: string;
  };
  /** Last status written to the apiserver, canonical JSON, for transition-only writes. */
  lastWrittenStatus?: string;
  conditions: Condition[];
  phase: ProxyPhase;
  /** Phase last written to the search attribute (upsert only on change). */
  indexedPhase?: ProxyPhase;
  /** RFC 3339 of the next scheduled poll, for the query. */
  nextPollAt?: string;
  /**
   * Workflow time (ms) before which the provider need not be asked about the
   * instance again; undefined means a look is due now. Used from the
   * drift-by-sweep rule on: wake-ups that only change health leave it alone.
   */
  nextLookAtMs?: number;
}

export interface ProxyWorkflowInput {
  ref: ProxyRef;
  desired: DesiredSpec;
  /** Continue-as-new once history has this many events (the server's suggestion also counts). */
  maxHistoryEvents?: number;
  /** Present when continuing as new. */
  carried?: ProxyState;
  /**
   * What the Proxy's status recorded when the starter last saw it (the
   * bridge's informer cache): a fresh run then needs no read of its own.
   * Absent from starts older than it, which read.
   */
  recorded?: RecordedStatus;
  /**
   * The Proxy's resourceVersion when `recorded` was read: a status written
   * at the start is pinned to it, so it never replaces a newer write.
   */
  recordedVersion?: string;
  /** The ProxyPhase search attribute the starter set at the start, so the run does not set it again. */
  indexedPhase?: ProxyPhase;
}

/** What the `state` query returns. */
export interface ProxyStateView {
  phase: ProxyPhase;
  providerID?: string;
  ip?: string;
  port?: number;
  expiresAt?: string;
  instanceState?: InstanceState;
  replacing?: string;
  observedGeneration: number;
  specHash: string;
  instanceSpecHash?: string;
  conditions: Condition[];
  lastError?: LatchedFailure;
  health: ProxyState['health'];
  nextPollAt?: string;
  deletionRequested: boolean;
  drain?: DrainState;
}
