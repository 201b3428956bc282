/**
 * What the lease API knows about Proxies: a read-only snapshot, refreshed by
 * whoever owns the source (an informer in the api process, a fixed list in
 * tests). The API never writes Proxies.
 */
import {
  credentialsRefOf,
  type CredentialsLookup,
  type CredentialsRef,
  type ProxyCredentials,
} from '../credentials/proxy-credentials.js';
import {
  ANNOTATION_CORDONED,
  DEFAULT_MAX_LEASES,
  DEFAULT_PORT,
  LABEL_POOL,
  type Proxy,
} from '../resources/proxy-schema.js';

export interface ProxyView {
  /** `namespace/name`, the key used everywhere. */
  id: string;
  /** metadata.uid; lease stores key state by it (absent only in hand-made fixtures). */
  uid?: string;
  /** Effective host: spec.endpoint.host for External, status.ip for Managed; '' until known. */
  host: string;
  port: number;
  attributes: Readonly<Record<string, string>>;
  /** status.phase, '' before the first status write. */
  phase: string;
  /** The Healthy condition is True. */
  healthy: boolean;
  latencyMillis: number;
  maxLeases: number;
  /** Has a deletionTimestamp: never leased, and listed only while draining; still counted in the phase gauge. */
  deleting: boolean;
  /** The Draining condition is True: held leases keep working, no new lease is granted. */
  draining: boolean;
  /** Cordoned by an operator (the ANNOTATION_CORDONED annotation): like draining for new leases, nothing else. */
  cordoned: boolean;
  /** The ProxyPool that made it (its pool label), '' for a standalone Proxy. */
  pool: string;
  /** Where its credentials are (a Secret reference, never the values); absent: it has none. */
  credentialsRef?: CredentialsRef;
  /** spec.provider: the providers-config entry of a Managed Proxy; absent for an External one. */
  provider?: string;
  /** spec.placement.machineType: which of its entry's hourly prices applies (api/cost-meter.ts). */
  machineType?: string;
}

export interface ProxyCatalog {
  /**
   * Current snapshot, sorted by id, including proxies being deleted. Cheap to call per request.
   * A change yields a new array (never an in-place edit): the API caches what it derives from
   * the snapshot by the array's identity.
   */
  list(): readonly ProxyView[];
  /** False until the first complete listing has been loaded. */
  synced(): boolean;
}

/**
 * Accepts what the apiserver sends: typed as `Proxy`, but a watch delivers
 * plain JSON, so every status field may be absent and deletionTimestamp may
 * be a string (or a Date if a typed client produced it).
 */
export function proxyViewFromResource(proxy: Proxy): ProxyView {
  const { metadata, spec } = proxy;
  const status = proxy.status ?? {};
  const external = spec.mode === 'External';
  const host = external ? (spec.endpoint?.host ?? '') : (status.ip ?? '');
  const port = external
    ? (spec.endpoint?.port ?? DEFAULT_PORT)
    : (proxy.status?.port ?? spec.port ?? DEFAULT_PORT);
  const conditions = status.conditions ?? [];
  const healthy = conditions.some((c) => c.type === 'Healthy' && c.status === 'True');
  const draining = conditions.some((c) => c.type === 'Draining' && c.status === 'True');
  return {
    id: `${metadata.namespace ?? ''}/${metadata.name}`,
    ...(metadata.uid ? { uid: metadata.uid } : {}),
    host,
    port,
    attributes: spec.attributes ?? {},
    phase: status.phase ?? '',
    healthy,
    latencyMillis: status.latencyMillis ?? 0,
    maxLeases: spec.maxLeases ?? DEFAULT_MAX_LEASES,
    deleting: Boolean(metadata.deletionTimestamp),
    draining,
    cordoned: metadata.annotations?.[ANNOTATION_CORDONED] === 'true',
    pool: metadata.labels?.[LABEL_POOL] ?? '',
    ...credentialsOf(proxy),
    ...(spec.provider ? { provider: spec.provider } : {}),
    ...(spec.placement?.machineType ? { machineType: spec.placement.machineType } : {}),
  };
}

function credentialsOf(proxy: Proxy): { credentialsRef?: CredentialsRef } {
  const ref = credentialsRefOf(proxy);
  return ref ? { credentialsRef: ref } : {};
}

/** The namespace of a view's id (`namespace/name`). */
export function namespaceOf(view: Pick<ProxyView, 'id'>): string {
  return view.id.slice(0, view.id.indexOf('/'));
}

/** A proxy's readable credentials (none when it has none, or they cannot be read: the prober says why). */
export function credentialsOfView(
  lookup: CredentialsLookup | undefined,
  view: Pick<ProxyView, 'id' | 'credentialsRef'>,
): ProxyCredentials | undefined {
  const read = view.credentialsRef && lookup?.(namespaceOf(view), view.credentialsRef);
  return read && 'credentials' in read ? read.credentials : undefined;
}

/** Byte-wise order on ids, the same order selection uses for its final tie-break. */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function sortedViews(proxies: Iterable<Proxy>): ProxyView[] {
  return [...proxies].map(proxyViewFromResource).sort((a, b) => compareIds(a.id, b.id));
}

export interface StaticProxyCatalog extends ProxyCatalog {
  /** Replaces the whole snapshot, as a relist would. */
  replace(proxies: readonly Proxy[]): void;
}

/** A catalog over a fixed set of Proxy objects: for tests, benchmarks and embedding. */
export function createStaticProxyCatalog(proxies: readonly Proxy[] = []): StaticProxyCatalog {
  let snapshot = sortedViews(proxies);
  return {
    list: () => snapshot,
    synced: () => true,
    replace(next) {
      snapshot = sortedViews(next);
    },
  };
}
