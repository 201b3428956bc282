/**
 * What the prober probes: one target per Proxy that has an address and is
 * not being deleted. The source is an interface so the prober does not care
 * whether targets come from an informer (the api process) or are set by
 * hand (tests, benchmarks, `dev`).
 */
import { DEFAULT_HEALTH_CHECK, DEFAULT_PORT, type Proxy } from '../resources/proxy-schema.js';
import { proxyKey } from '../resources/proxy-ref.js';
import { credentialsRefOf, type CredentialsRef } from '../credentials/proxy-credentials.js';
import type { HealthVerdict, ProxyRef } from '../workflows/proxy/types.js';

export interface HealthCheckSettings {
  probeURL: string;
  intervalSeconds: number;
  timeoutSeconds: number;
  failureThreshold: number;
  successThreshold: number;
  expectedStatusCodes: readonly number[];
}

export interface ProbeTarget {
  /** `namespace/name`: the metric label and the prober's key. */
  key: string;
  ref: ProxyRef;
  /** The address the workflow knows the proxy by: status.ip (Managed) or spec.endpoint.host (External). */
  host: string;
  port: number;
  healthCheck: HealthCheckSettings;
  /** The verdict in the Proxy's Healthy condition right now (the seed on first sight). */
  condition: HealthVerdict;
  /** status.latencyMillis, when the status has one. */
  latencyMillis?: number;
  /** Where the proxy's credentials are (a Secret reference, never the values). */
  credentialsRef?: CredentialsRef;
}

export interface ProbeTargetSource {
  /** Loads the current targets and follows changes from then on. */
  start(): Promise<void>;
  stop(): Promise<void>;
  get(key: string): ProbeTarget | undefined;
  list(): Iterable<ProbeTarget>;
  /** The listener hears about every key whose target appeared, changed or went away. Returns an unsubscribe. */
  subscribe(listener: (key: string) => void): () => void;
}

export { proxyKey };

/** Probe settings a providers-config entry gives its Proxies (its `health:` block). */
export interface EntryHealth {
  probeURL?: string;
  intervalSeconds?: number;
}

/** The `health:` block of the providers-config entry named `provider`, if it has one. */
export type EntryHealthLookup = (provider: string) => EntryHealth | undefined;

/**
 * The settings with the entry's applied: each of the entry's values
 * replaces the Proxy's where the Proxy holds the shipped default (what the
 * apiserver writes for a field left out), so a Proxy that says otherwise
 * keeps its own.
 */
export function withEntryHealth(
  hc: HealthCheckSettings,
  entry: EntryHealth | undefined,
): HealthCheckSettings {
  if (!entry) return hc;
  const out = { ...hc };
  if (entry.probeURL !== undefined && hc.probeURL === DEFAULT_HEALTH_CHECK.probeURL)
    out.probeURL = entry.probeURL;
  if (entry.intervalSeconds !== undefined && hc.intervalSeconds === DEFAULT_HEALTH_CHECK.intervalSeconds)
    out.intervalSeconds = entry.intervalSeconds;
  return out;
}

function positiveInt(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 ? value : fallback;
}

/** The apiserver materialises every default; this only guards against objects written before a default existed. */
export function healthCheckSettings(spec: Partial<HealthCheckSettings> | undefined): HealthCheckSettings {
  const hc: Partial<HealthCheckSettings> = spec ?? {};
  const codes =
    Array.isArray(hc.expectedStatusCodes) && hc.expectedStatusCodes.length > 0
      ? hc.expectedStatusCodes
      : undefined;
  return {
    probeURL:
      typeof hc.probeURL === 'string' && hc.probeURL !== '' ? hc.probeURL : DEFAULT_HEALTH_CHECK.probeURL,
    intervalSeconds: positiveInt(hc.intervalSeconds, DEFAULT_HEALTH_CHECK.intervalSeconds),
    timeoutSeconds: positiveInt(hc.timeoutSeconds, DEFAULT_HEALTH_CHECK.timeoutSeconds),
    failureThreshold: positiveInt(hc.failureThreshold, DEFAULT_HEALTH_CHECK.failureThreshold),
    successThreshold: positiveInt(hc.successThreshold, DEFAULT_HEALTH_CHECK.successThreshold),
    expectedStatusCodes: codes ?? [...DEFAULT_HEALTH_CHECK.expectedStatusCodes],
  };
}

export function conditionVerdict(proxy: Proxy): HealthVerdict {
  const healthy = proxy.status?.conditions?.find((c) => c.type === 'Healthy');
  if (healthy?.status === 'True') return 'Healthy';
  if (healthy?.status === 'False') return 'Unhealthy';
  return 'Unknown';
}

/**
 * The probe target of a Proxy, or undefined when it has nothing to probe:
 * no address yet (a Managed proxy before Running, or between instances), or
 * a deletionTimestamp. Accepts plain JSON from a watch, so every status
 * field may be missing. A Managed Proxy's settings take its providers-config
 * entry's `health:` block (`entryHealth`) where it holds the defaults.
 */
export function targetFromProxy(proxy: Proxy, entryHealth?: EntryHealthLookup): ProbeTarget | undefined {
  const { metadata, spec } = proxy;
  if (!metadata?.namespace || !metadata.name || !metadata.uid || !spec) return undefined;
  if (metadata.deletionTimestamp) return undefined;
  let host: string | undefined;
  let port: number;
  if (spec.mode === 'External') {
    host = spec.endpoint?.host;
    port = spec.endpoint?.port ?? DEFAULT_PORT;
  } else {
    host = proxy.status?.ip;
    port = proxy.status?.port ?? spec.port ?? DEFAULT_PORT;
  }
  if (!host) return undefined;
  const ref = { namespace: metadata.namespace, name: metadata.name, uid: metadata.uid };
  const target: ProbeTarget = {
    key: proxyKey(ref),
    ref,
    host,
    port,
    healthCheck: withEntryHealth(
      healthCheckSettings(spec.healthCheck),
      spec.mode === 'Managed' && spec.provider ? entryHealth?.(spec.provider) : undefined,
    ),
    condition: conditionVerdict(proxy),
  };
  if (typeof proxy.status?.latencyMillis === 'number') target.latencyMillis = proxy.status.latencyMillis;
  const credentialsRef = credentialsRefOf(proxy);
  if (credentialsRef) target.credentialsRef = credentialsRef;
  return target;
}

/** True when two targets probe the same instance: same object (UID) at the same address. */
export function sameInstance(a: ProbeTarget, b: ProbeTarget): boolean {
  return a.ref.uid === b.ref.uid && a.host === b.host && a.port === b.port;
}

export function sameHealthCheck(a: HealthCheckSettings, b: HealthCheckSettings): boolean {
  return (
    a.probeURL === b.probeURL &&
    a.intervalSeconds === b.intervalSeconds &&
    a.timeoutSeconds === b.timeoutSeconds &&
    a.failureThreshold === b.failureThreshold &&
    a.successThreshold === b.successThreshold &&
    a.expectedStatusCodes.length === b.expectedStatusCodes.length &&
    a.expectedStatusCodes.every((c, i) => c === b.expectedStatusCodes[i])
  );
}

function sameTarget(a: ProbeTarget, b: ProbeTarget): boolean {
  return (
    sameInstance(a, b) &&
    sameHealthCheck(a.healthCheck, b.healthCheck) &&
    a.condition === b.condition &&
    a.latencyMillis === b.latencyMillis &&
    JSON.stringify(a.credentialsRef) === JSON.stringify(b.credentialsRef)
  );
}

/**
 * A keyed target map with change notification: the storage both sources
 * share. `put(key, undefined)` removes. Notifies only on a real change.
 */
export class TargetMap {
  private readonly targets = new Map<string, ProbeTarget>();
  private readonly listeners = new Set<(key: string) => void>();

  get(key: string): ProbeTarget | undefined {
    return this.targets.get(key);
  }

  list(): Iterable<ProbeTarget> {
    return this.targets.values();
  }

  get size(): number {
    return this.targets.size;
  }

  put(key: string, target: ProbeTarget | undefined): void {
    const before = this.targets.get(key);
    if (target === undefined) {
      if (before === undefined) return;
      this.targets.delete(key);
    } else {
      if (before !== undefined && sameTarget(before, target)) return;
      this.targets.set(key, target);
    }
    for (const listener of this.listeners) listener(key);
  }

  subscribe(listener: (key: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

export interface StaticProbeTargets extends ProbeTargetSource {
  set(target: ProbeTarget): void;
  remove(key: string): void;
}

/** Targets set by hand: tests, benchmarks, and anything that already has its own Proxy cache. */
export function createStaticProbeTargets(initial: Iterable<ProbeTarget> = []): StaticProbeTargets {
  const map = new TargetMap();
  for (const t of initial) map.put(t.key, t);
  return {
    start: () => Promise.resolve(),
    stop: () => Promise.resolve(),
    get: (key) => map.get(key),
    list: () => map.list(),
    subscribe: (listener) => map.subscribe(listener),
    set: (target) => map.put(target.key, target),
    remove: (key) => map.put(key, undefined),
  };
}
