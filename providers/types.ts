/**
 * The provider contract (the seed's docs/provider-contract.md, in
 * TypeScript). Pure types and constants: safe to import anywhere, including
 * (with `import type`) the workflow sandbox.
 */

import type { ProxyCredentials } from '../credentials/proxy-credentials.js';

export const INSTANCE_STATES = ['Provisioning', 'Running', 'Stopped', 'Terminated'] as const;
export type InstanceState = (typeof INSTANCE_STATES)[number];

/** The four error classes. Every error a provider throws is a ProviderError with one of them. */
export const ERROR_CLASSES = ['NotFound', 'QuotaExceeded', 'Permanent', 'Transient'] as const;
export type ErrorClass = (typeof ERROR_CLASSES)[number];

export type ProviderOperation = 'create' | 'get' | 'delete' | 'list' | 'check';

/** GC marks, written by create in the same backend call that makes the instance. */
export const MARK_MANAGED = 'crawl.example.com/managed';
export const MARK_MANAGED_VALUE = 'true';
export const MARK_UID = 'crawl.example.com/uid';
/** Which control-plane installation created the instance; GC deletes only its own. */
export const MARK_INSTALLATION = 'crawl.example.com/installation';

export interface Placement {
  region?: string;
  zone?: string;
  machineType?: string;
  image?: string;
}

export interface CreateRequest {
  /** Deterministic instance name from the Proxy UID (`instanceNameFromUid`). */
  name: string;
  /** The owning Proxy's UID; written as the UID mark. */
  uid: string;
  namespace: string;
  proxyName: string;
  placement: Placement;
  /** Already resolved from inline text or a Secret. Never logged, never in an error. */
  cloudInit?: string;
  /**
   * The credentials the proxy must require (Proxy-Authorization: Basic),
   * read from the Proxy's Secret; absent: it requires none. Never logged,
   * never in an error, never in a label or anything a backend lists.
   */
  credentials?: ProxyCredentials;
  /**
   * The Proxy's `spec.attributes`, for a provider that says it uses them
   * (`capabilities.usesAttributes`: a vendor session's country); absent
   * otherwise.
   */
  attributes?: Record<string, string>;
  port: number;
  /** The installation identity mark's value. */
  installation: string;
}

export interface Instance {
  /** The providerID: opaque, self-contained, accepted by get and delete. */
  id: string;
  /**
   * Non-empty exactly when state is Running (Running without an IP is
   * Provisioning). A host name where the provider hands out a shared
   * endpoint (a vendor's super-proxy).
   */
  ip?: string;
  /** The port to reach it on, when the provider chose it (a super-proxy's, a list entry's); absent: the request's. */
  port?: number;
  state: InstanceState;
  /** Read back from the backend's UID mark; '' when the mark is empty. */
  uid: string;
  /** Read back from the backend's installation mark; '' when absent. */
  installation: string;
  /** Read back from the backend; undefined counts as very old for GC. */
  createdAt?: Date;
  /**
   * When the provider ends the instance by itself (a vendor session's
   * lifetime, a Spot interruption EC2 announced), for a Running one; absent: it runs until deleted. A pool
   * replaces such a member, drained, before then.
   */
  expiresAt?: Date;
}

export const CHECK_REASONS = [
  'Reachable',
  'Unreachable',
  'Unauthorized',
  'Forbidden',
  'Timeout',
  'APIError',
] as const;

/** A part of a provider's fleet that one listByTag could not list (a hypervisor that is down). */
export interface UnlistedScope {
  /** The target's name, as check() names it. */
  target: string;
  /** Every instance ID of this part starts with it. */
  idPrefix: string;
  /** Why it could not be listed (the provider's own summary, no secrets). */
  message: string;
}

/**
 * listByTag's answer: the instances, and, when some part could not be
 * listed, which (absent or empty: the listing is complete). Callers that act
 * on an instance's absence must not do so for an ID under an unlisted prefix.
 */
export type Listing = Instance[] & { unlisted?: UnlistedScope[] };

/** The unlisted parts of a listing (none for a complete one or a plain array). */
export function unlistedOf(listing: Listing): UnlistedScope[] {
  return Array.isArray(listing.unlisted) ? listing.unlisted : [];
}

/** Whether `id` lies in a part the listing could not list. */
export function isUnlisted(listing: Listing, id: string | undefined): boolean {
  return id !== undefined && unlistedOf(listing).some((u) => id.startsWith(u.idPrefix));
}

/** What a caller of listByTag asks of it besides the listing. */
export interface ListOptions {
  /**
   * How fresh the listing must be. Absent: a listing made for this call (a
   * lookup that must see an instance made a moment ago). A periodic reader
   * (the drift sweep, orphan GC) may instead accept a listing the provider
   * made recently: one still fresh by the provider's own read budget (the gcp
   * provider's `listCallsPerVmHour`; none without one), or up to
   * `reuse.withinMs` older than that. A provider that keeps no listing
   * ignores this and lists.
   */
  reuse?: { withinMs: number };
  /**
   * GC's listing: a provider may also delete what it made besides
   * instances whose owner entry is gone (the gcp provider's firewall rules
   * of entries no longer configured). Only orphan GC sets it; a provider
   * that makes nothing besides instances ignores it. What it collects never
   * changes the listing it answers, and a failure to collect never fails it.
   */
  collectOrphans?: boolean;
}

export interface TargetStatus {
  name: string;
  address?: string;
  ready: boolean;
  /** One of CHECK_REASONS, or a provider-specific reason documented in its guide. */
  reason: string;
  /** At most 1,024 characters. */
  message?: string;
  latencyMillis?: number;
  details?: Record<string, string>;
}

/**
 * What the control plane may assume about a provider's costs. Drift is found
 * per provider by one sweep that calls listByTag every drift period: that is
 * only sound when one listByTag costs a bounded number of backend calls
 * whatever the fleet size (one paged list, one call per host).
 */
export interface ProviderCapabilities {
  /**
   * listByTag answers for the whole fleet in a bounded number of paged
   * backend calls. When false, the drift sweep skips this provider and each
   * Proxy workflow keeps polling its own instance with `get`, at the slower
   * per-proxy drift rate.
   */
  readonly cheapListByTag: boolean;
  /**
   * create is one short backend call (an object written, a process started;
   * nothing waited for): the Proxy workflow runs it as a local activity in
   * the workflow task that decided on it, so a provisioning is one workflow
   * task instead of two. A create that can take long (an image copied, a
   * boot waited for) must not say so: a local activity cannot heartbeat,
   * and holds its workflow task while it runs.
   */
  readonly quickCreate?: boolean;
  /** create reads `CreateRequest.attributes` (the activity reads the Proxy for them). */
  readonly usesAttributes?: boolean;
}

export interface Provider {
  /** The configured name (what spec.provider refers to), not the type. */
  readonly name: string;
  readonly type: string;
  /** Absent means nothing is assumed: `{ cheapListByTag: false }`. */
  readonly capabilities?: ProviderCapabilities;
  /** Idempotent by req.name; adopts an existing instance only if its UID mark matches req.uid. */
  create(req: CreateRequest, signal: AbortSignal): Promise<string>;
  /** Throws a NotFound ProviderError when, and only when, the instance is gone. */
  get(id: string, signal: AbortSignal): Promise<Instance>;
  /** Idempotent; deleting something gone resolves. */
  delete(id: string, signal: AbortSignal): Promise<void>;
  /**
   * Only instances carrying the managed mark. Throws rather than return a
   * list it cannot vouch for. A provider made of independent parts (the kvm
   * provider's hosts) may answer for the parts it reached and name the others
   * in `unlisted`: their instances are unknown, never gone.
   */
  listByTag(signal: AbortSignal, options?: ListOptions): Promise<Listing>;
  /** Never throws: every failure is a target with ready=false. One entry per target, stable order. */
  check?(signal: AbortSignal): Promise<TargetStatus[]>;
  /**
   * Other providerIDs naming the same instance as `id` (an ID as listByTag
   * lists it): an older ID form still recorded on Proxies. The drift sweep
   * matches recorded IDs against these too. Pure; absent means none.
   */
  idAliases?(id: string): string[];
  /**
   * The credentials a client presents to instance `id`, where the provider
   * sets them (a vendor session's username, a list entry's pair) rather
   * than the proxy requiring the Proxy's own. undefined: the Proxy's own
   * apply. Never logged, never in an error.
   */
  credentialsOf?(id: string, signal: AbortSignal): Promise<ProxyCredentials | undefined>;
  /** Releases connections and listeners. */
  close?(): Promise<void>;
}
