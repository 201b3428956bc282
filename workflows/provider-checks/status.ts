/**
 * Pure logic of the provider checks: the ProviderHealth status built from the
 * previous status and a fresh result, the transitions worth a log line, and
 * the object-name rule. No I/O, no clock: every time comes from the result.
 */
import type { Condition, ProviderHealthStatus, ProviderTarget } from '../../resources/proxy-schema.js';
import {
  CHECKS_REPORT_VERSION,
  type ChecksRoundReport,
  type ProviderCheckResult,
  type Transition,
} from './types.js';

export const CONDITION_READY = 'Ready';
export const ReadyReason = {
  AllTargetsReady: 'AllTargetsReady',
  TargetsNotReady: 'TargetsNotReady',
  ChecksNotImplemented: 'ChecksNotImplemented',
  NoTargets: 'NoTargets',
} as const;

/** The CRD's limit on a target's message. */
export const MAX_MESSAGE_CHARS = 1024;

/** Labels on every object we write; cleanup deletes only objects carrying both with our values. */
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const MANAGED_BY_VALUE = 'egress-proxies';
export const LABEL_INSTALLATION = 'crawl.example.com/installation';

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Whether `name` can name a cluster-scoped object (DNS-1123 subdomain). */
export function isValidObjectName(name: string): boolean {
  return name.length > 0 && name.length <= 253 && DNS_SUBDOMAIN.test(name);
}

/** Label values: at most 63 characters, alphanumeric at both ends. Longer or odd identities are hashed by the caller. */
export function isValidLabelValue(value: string): boolean {
  return value.length <= 63 && /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/.test(value);
}

/** Cuts to at most `n` characters (code points, as the apiserver counts maxLength), marking the cut. */
export function truncate(s: string, n: number): string {
  const chars = Array.from(s);
  return chars.length <= n ? s : chars.slice(0, n - 1).join('') + '…';
}

/**
 * The status for one round. A target keeps its lastTransitionTime while its
 * `ready` does not flip; the Ready condition keeps its lastTransitionTime
 * while its status does not change (Kubernetes condition semantics).
 */
export function buildProviderHealthStatus(
  prev: ProviderHealthStatus | undefined,
  r: ProviderCheckResult,
): ProviderHealthStatus {
  const now = r.checkedAt;
  const before = new Map((prev?.targets ?? []).map((t) => [t.name, t]));
  let ready = 0;
  const failing: string[] = [];
  const targets: ProviderTarget[] = r.targets.map((ts) => {
    const b = before.get(ts.name);
    const t: ProviderTarget = {
      name: ts.name,
      ready: ts.ready,
      reason: ts.reason,
      lastTransitionTime: b !== undefined && b.ready === ts.ready ? b.lastTransitionTime : now,
    };
    if (ts.address) t.address = ts.address;
    if (ts.message) t.message = truncate(ts.message, MAX_MESSAGE_CHARS);
    if (ts.latencyMillis !== undefined) t.latencyMillis = Math.round(ts.latencyMillis);
    if (ts.details && Object.keys(ts.details).length > 0) t.details = { ...ts.details };
    if (ts.ready) ready++;
    else failing.push(`${ts.name}: ${ts.reason}`);
    return t;
  });

  let cond: Pick<Condition, 'status' | 'reason' | 'message'>;
  if (!r.supported) {
    cond = {
      status: 'Unknown',
      reason: ReadyReason.ChecksNotImplemented,
      message: `${r.type} providers have no health check`,
    };
  } else if (r.targets.length === 0) {
    cond = { status: 'Unknown', reason: ReadyReason.NoTargets, message: 'the provider has nothing to check' };
  } else if (failing.length === 0) {
    cond = {
      status: 'True',
      reason: ReadyReason.AllTargetsReady,
      message: `${ready} of ${r.targets.length} targets ready`,
    };
  } else {
    cond = {
      status: 'False',
      reason: ReadyReason.TargetsNotReady,
      message: truncate(failing.join('; '), MAX_MESSAGE_CHARS),
    };
  }
  const prevReady = prev?.conditions?.find((c) => c.type === CONDITION_READY);
  const readyCondition: Condition = {
    type: CONDITION_READY,
    ...cond,
    lastTransitionTime:
      prevReady !== undefined && prevReady.status === cond.status ? prevReady.lastTransitionTime : now,
  };
  const conditions = [...(prev?.conditions ?? []).filter((c) => c.type !== CONDITION_READY), readyCondition];

  const status: ProviderHealthStatus = { type: r.type, conditions, targets, lastCheckTime: now };
  if (r.supported) status.targetsReady = `${ready}/${r.targets.length}`;
  return status;
}

export type Verdicts = ChecksRoundReport['verdicts'];

/** The previous round's verdicts from `workflowInfo().lastResult`; empty when there is none we know. */
export function previousVerdicts(
  lastResult: unknown,
  installation: string,
): { verdicts: Verdicts; invalidNames: string[] } {
  const none = { verdicts: [], invalidNames: [] };
  if (typeof lastResult !== 'object' || lastResult === null) return none;
  const r = lastResult as Partial<ChecksRoundReport>;
  if (r.version !== CHECKS_REPORT_VERSION || r.installation !== installation || !Array.isArray(r.verdicts))
    return none;
  const verdicts = r.verdicts.filter(
    (v): v is Verdicts[number] =>
      typeof v === 'object' &&
      v !== null &&
      typeof v.provider === 'string' &&
      typeof v.target === 'string' &&
      typeof v.ready === 'boolean' &&
      typeof v.reason === 'string',
  );
  const invalidNames = Array.isArray(r.invalidNames)
    ? r.invalidNames.filter((n): n is string => typeof n === 'string')
    : [];
  return { verdicts, invalidNames };
}

export function verdictsOf(results: readonly ProviderCheckResult[]): Verdicts {
  return results.flatMap((r) =>
    r.targets.map((t) => ({ provider: r.provider, target: t.name, ready: t.ready, reason: t.reason })),
  );
}

/**
 * What is worth a log line: a target going down or staying down for a new
 * reason (a WARNING), coming back (info), or ready the first time it is seen
 * (debug). A steady target yields nothing.
 */
export function transitions(previous: Verdicts, results: readonly ProviderCheckResult[]): Transition[] {
  const before = new Map(previous.map((v) => [`${v.provider}\u0000${v.target}`, v]));
  const out: Transition[] = [];
  for (const r of results) {
    for (const t of r.targets) {
      const prev = before.get(`${r.provider}\u0000${t.name}`);
      let kind: Transition['kind'] | undefined;
      if (!t.ready) {
        if (prev === undefined || prev.ready) kind = 'down';
        else if (prev.reason !== t.reason) kind = 'reason-changed';
      } else if (prev === undefined) {
        kind = 'first-ready';
      } else if (!prev.ready) {
        kind = 'up';
      }
      if (kind === undefined) continue;
      const tr: Transition = { kind, provider: r.provider, target: t.name, reason: t.reason };
      if (t.address) tr.address = t.address;
      if (t.message) tr.message = truncate(t.message, MAX_MESSAGE_CHARS);
      if (t.latencyMillis !== undefined) tr.latencyMillis = t.latencyMillis;
      out.push(tr);
    }
  }
  return out;
}
