/**
 * Classification of everything a Compute call can throw, in one place
 * (contract §5), the class of a failed operation, and the check() reason.
 *
 * What reaches here: the REST transport's errors for an HTTP answer from
 * Compute (`code`/`status` is the HTTP status; the message is the response
 * body, whose `error.errors[].reason` and the resource named in
 * `error.message` we read and never keep), `CredentialsError` for anything
 * raised while obtaining credentials or a token (auth.ts: never an answer
 * from Compute, whatever HTTP status the token source gave), network errors
 * (`code` ECONNREFUSED...), and anything a bug may throw.
 *
 * | What                                                       | Class         |
 * |------------------------------------------------------------|---------------|
 * | a CredentialsError                                         | its own: Permanent for a refused or unparseable credential, else Transient |
 * | 404 naming an instance (`.../instances/<name>`)            | NotFound (get and delete check it is *their* instance) |
 * | 404 naming the project, the zone, an image, a machine type, a network... | Permanent, naming the field to check |
 * | 404 naming an operation, or nothing we can read            | Transient     |
 * | 404 on insert (any)                                        | Permanent     |
 * | 412 (conditionNotMet: an organization policy)              | Permanent, naming the constraint |
 * | 429; 403 with reason rateLimitExceeded / userRateLimitExceeded | Transient (rate limits pass in seconds: retried with backoff) |
 * | 403 with reason quotaExceeded                              | QuotaExceeded |
 * | 400 with reason resourceNotReady (busy with an op)         | Transient     |
 * | 400, 401, any other 403                                    | Permanent     |
 * | any other status (408, 409, 5xx...)                        | Transient     |
 * | no HTTP status at all                                      | Transient     |
 *
 * The raw status and reasons are logged at debug by the provider, because
 * the class collapses them.
 */
import { httpCheckReason, isAbortError, systemErrorCode } from '../shared/http-failure.js';
import type { ErrorClass } from '../types.js';
import { CredentialsError } from './auth.js';

export interface Classification {
  errorClass: ErrorClass;
  status?: number;
  /** `error.errors[].reason` of the body, identifiers only. */
  reasons: string[];
  /** For the error message: composed from the fields above, the resource kind and our own hints only. */
  summary: string;
}

/** 403 reasons that mean "no quota": QuotaExceeded, waited out. */
export const QUOTA_REASONS = ['quotaExceeded'];
/** 403 reasons that mean "too many requests now": Transient, retried with backoff. */
export const RATE_LIMIT_REASONS = ['rateLimitExceeded', 'userRateLimitExceeded'];

/** The HTTP status of an API answer, or undefined for anything else (a CredentialsError never has one). */
export function httpStatus(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null || err instanceof CredentialsError) return undefined;
  const e = err as { status?: unknown; code?: unknown; response?: { status?: unknown } };
  for (const v of [e.status, e.response?.status, e.code]) {
    if (typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 599) return v;
  }
  return undefined;
}

const IDENTIFIER = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

interface ApiBody {
  reasons: string[];
  /** `error.message` and `error.errors[].message`: read for patterns, never kept. */
  messages: string[];
}

function apiBody(err: unknown): ApiBody {
  const none = { reasons: [], messages: [] };
  const message = (err as { message?: unknown } | null)?.message;
  if (typeof message !== 'string' || !message.startsWith('{')) return none;
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return none;
  }
  const error = (parsed as { error?: { message?: unknown; errors?: unknown } } | null)?.error;
  const items = Array.isArray(error?.errors) ? (error.errors as unknown[]) : [];
  const texts = [error?.message, ...items.map((i) => (i as { message?: unknown } | null)?.message)];
  return {
    reasons: items
      .map((i) => (i as { reason?: unknown } | null)?.reason)
      .filter((r): r is string => typeof r === 'string' && IDENTIFIER.test(r)),
    messages: texts.filter((t): t is string => typeof t === 'string').map((t) => t.slice(0, 2_000)),
  };
}

/** `error.errors[].reason` from the JSON body gaxios puts in the message; only identifiers survive. */
export function apiReasons(err: unknown): string[] {
  return apiBody(err).reasons;
}

/** A resource path as Compute writes it in "The resource '...' was not found". */
const RESOURCE_PATH =
  /^(?:https:\/\/[a-z0-9.-]+\/compute\/(?:v1|beta|alpha)\/)?(projects\/[a-z0-9._:-]+(?:\/[A-Za-z0-9._-]+)*)$/;

/**
 * The resource a 404 body names ("The resource 'projects/p/zones/z' was not
 * found"), or undefined when it names none we can read. A path of
 * identifiers only: safe to match on, and never put in a message.
 */
export function notFoundResource(err: unknown): string | undefined {
  for (const text of apiBody(err).messages) {
    const m = /The resource '([^'\s]{1,400})' was not found/.exec(text);
    const path = m === null ? undefined : RESOURCE_PATH.exec(m[1]!)?.[1];
    if (path !== undefined) return path;
  }
  return undefined;
}

/** What kind of resource a path is, with the field a user checks for it. */
export function resourceKind(path: string): { kind: string; check?: string } {
  const seg = path.split('/');
  // projects/<p>[/zones/<z>|/global|/regions/<r>][/<collection>/<name>...]
  if (seg.length === 2)
    return { kind: 'project', check: 'gcp.project (and that the Compute API is enabled)' };
  const scoped = seg[2] === 'zones' || seg[2] === 'regions';
  if (scoped && seg.length === 4) {
    return seg[2] === 'zones'
      ? { kind: 'zone', check: 'placement.zone' }
      : { kind: 'region', check: 'placement.region' };
  }
  const collection = seg[scoped ? 4 : 3] ?? '';
  switch (collection) {
    case 'instances':
      return { kind: 'instance' };
    case 'operations':
      return { kind: 'operation' };
    case 'images':
      return { kind: 'image', check: 'placement.image' };
    case 'machineTypes':
      return { kind: 'machine type', check: 'placement.machineType' };
    case 'networks':
      return { kind: 'network', check: 'gcp.network' };
    case 'subnetworks':
      return { kind: 'subnetwork', check: 'gcp.subnetwork' };
    case 'diskTypes':
      return { kind: 'disk type', check: 'gcp.diskType' };
    case 'serviceAccounts':
      return { kind: 'service account', check: 'gcp.serviceAccount.email' };
    default:
      return { kind: 'resource' };
  }
}

/**
 * Whether an error is Compute's own 404 for this very instance: the only
 * answer get and delete may read as "gone". A 404 for the project or the
 * zone, one naming nothing, or any error from a token source is not.
 */
export function isInstanceNotFound(err: unknown, project: string, zone: string, name: string): boolean {
  if (httpStatus(err) !== 404) return false;
  return notFoundResource(err) === `projects/${project}/zones/${zone}/instances/${name}`;
}

/** The organization-policy constraint a 412 body names (`constraints/compute.vmExternalIpAccess`). */
export function policyConstraint(err: unknown): string | undefined {
  for (const text of apiBody(err).messages) {
    const m = /\b(constraints\/[A-Za-z][A-Za-z0-9_.]{0,99})\b/.exec(text);
    if (m !== null) return m[1];
  }
  return undefined;
}

/** The Compute request the error answers, where the class depends on it. */
export type ClassifyCall = 'insert' | 'other';

export function classify(err: unknown, call: ClassifyCall = 'other'): Classification {
  if (err instanceof CredentialsError) {
    return { errorClass: err.errorClass, reasons: [], summary: err.message };
  }
  const status = httpStatus(err);
  if (status === undefined) {
    if (isAbortError(err)) return { errorClass: 'Transient', reasons: [], summary: 'request aborted' };
    const code = systemErrorCode(err);
    return {
      errorClass: 'Transient',
      reasons: [],
      summary:
        code === undefined
          ? 'Compute API call failed before an answer (network)'
          : `Compute API unreachable (${code})`,
    };
  }
  const reasons = apiReasons(err);
  const answered = `Compute API answered ${status}${reasons.length > 0 ? ` ${reasons.join(',')}` : ''}`;
  const out = (errorClass: ErrorClass, hint = ''): Classification => ({
    errorClass,
    status,
    reasons,
    summary: `${answered}${hint}`,
  });
  if (status === 404) {
    const path = notFoundResource(err);
    const { kind, check } = path === undefined ? { kind: undefined, check: undefined } : resourceKind(path);
    const hint = kind === undefined ? '' : ` for the ${kind}${check === undefined ? '' : `; check ${check}`}`;
    if (call === 'insert') {
      // Nothing an insert names can be "the instance": whatever is missing, the spec or config must change.
      return out(
        'Permanent',
        check !== undefined
          ? hint
          : `${hint}; check placement.image, placement.machineType, placement.zone and gcp.network`,
      );
    }
    if (kind === 'instance') return out('NotFound', hint);
    if (check !== undefined) return out('Permanent', hint);
    // An operation that aged out, or a 404 naming nothing we can read: cannot tell.
    return out('Transient', hint);
  }
  if (status === 412) {
    const constraint = policyConstraint(err);
    return out(
      'Permanent',
      constraint === undefined
        ? ': a precondition failed'
        : `: refused by organization policy ${constraint}; ask for an exception or change the provider config`,
    );
  }
  if (status === 429) return out('Transient', ' (rate limited; retried with backoff)');
  if (status === 403 && reasons.some((r) => RATE_LIMIT_REASONS.includes(r)))
    return out('Transient', ' (rate limited; retried with backoff)');
  if (status === 403 && reasons.some((r) => QUOTA_REASONS.includes(r))) return out('QuotaExceeded');
  if (status === 400 && reasons.includes('resourceNotReady')) return out('Transient');
  if (status === 400) {
    const check = invalidFieldCheck(err);
    if (check !== undefined) return out('Permanent', `; check ${check}`);
  }
  if (status === 400 || status === 401 || status === 403) return out('Permanent');
  return out('Transient');
}

/**
 * Operation error codes that mean "no capacity or quota now": the API
 * accepted the request and the operation failed later for want of room.
 */
/**
 * The setting behind a 400 "Invalid value for field 'resource.<field>'" of
 * an insert (GCE names the field; an unknown machine type is such a 400,
 * not a 404), or undefined.
 */
export function invalidFieldCheck(err: unknown): string | undefined {
  for (const text of apiBody(err).messages) {
    const m = /Invalid value for field 'resource\.([A-Za-z][A-Za-z0-9_.[\]]{0,99})'/.exec(text);
    if (m === null) continue;
    const field = m[1]!;
    if (field.startsWith('machineType')) return 'placement.machineType';
    if (field.includes('sourceImage')) return 'placement.image';
    if (field.includes('diskType')) return 'gcp.diskType';
    if (field.startsWith('disks')) return 'gcp.diskSizeGb and placement.image';
    if (field.startsWith('metadata')) return 'cloudInit (GCE metadata: 256 KiB a value, 512 KiB in all)';
    if (field.startsWith('networkInterfaces')) return 'gcp.network and gcp.subnetwork';
    if (field.startsWith('scheduling')) return 'gcp.provisioningModel and gcp.instanceTerminationAction';
    if (field.startsWith('serviceAccounts')) return 'gcp.serviceAccount';
    if (field.startsWith('labels')) return 'the installation name';
    return `the request field resource.${field}`;
  }
  return undefined;
}

export const QUOTA_OPERATION_CODES = [
  'QUOTA_EXCEEDED',
  'ZONE_RESOURCE_POOL_EXHAUSTED',
  'ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS',
  'RESOURCE_OPERATION_RATE_EXCEEDED',
  'RATE_LIMIT_EXCEEDED',
];

/**
 * The class of a finished operation's error: quota codes are QuotaExceeded;
 * otherwise the operation's HTTP status decides as for a call, except that
 * 404 (an image or machine type that does not exist) is Permanent, never
 * NotFound: the instance was never made.
 */
export function classifyOperationError(codes: string[], httpStatusCode: number | undefined): ErrorClass {
  if (codes.some((c) => QUOTA_OPERATION_CODES.includes(c))) return 'QuotaExceeded';
  if (httpStatusCode === 429) return 'QuotaExceeded';
  if (httpStatusCode !== undefined && httpStatusCode >= 400 && httpStatusCode < 500 && httpStatusCode !== 408)
    return 'Permanent';
  return 'Transient';
}

/** check()'s reason for a failed probe (the shared set, contract §8). */
export function checkReason(err: unknown, aborted: boolean): string {
  if (err instanceof CredentialsError) return err.checkReason;
  return httpCheckReason(err, httpStatus(err), aborted);
}
