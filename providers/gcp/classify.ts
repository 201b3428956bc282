/**
 * Classification of everything a Compute call can throw, in one place
 * (contract §5), the class of a failed operation, and the check() reason.
 *
 * What reaches here: gaxios' `GaxiosError` from the REST transport (`status`
 * is the HTTP status; the message is the response body, whose
 * `error.errors[].reason` we read and never keep), google-auth-library
 * errors when no credentials can be found or a token cannot be fetched
 * (no HTTP status), network errors (`code` ECONNREFUSED...), and anything
 * a bug may throw.
 *
 * | What                                               | Class         |
 * |----------------------------------------------------|---------------|
 * | 404                                                | NotFound      |
 * | 429                                                | QuotaExceeded |
 * | 403 with reason quotaExceeded / rateLimitExceeded  | QuotaExceeded |
 * | 400 with reason resourceNotReady (busy with an op) | Transient     |
 * | 400, 401, any other 403                            | Permanent     |
 * | any other status (408, 409, 5xx...)                | Transient     |
 * | no HTTP status at all                              | Transient     |
 *
 * The raw status and reasons are logged at debug by the provider, because
 * the class collapses them.
 */
import type { ErrorClass } from '../types.js';

export interface Classification {
  errorClass: ErrorClass;
  status?: number;
  /** `error.errors[].reason` of the body, identifiers only. */
  reasons: string[];
  /** For the error message: composed from the fields above only. */
  summary: string;
}

export const QUOTA_REASONS = ['quotaExceeded', 'rateLimitExceeded'];

/** The HTTP status of an API answer, or undefined for anything else. */
export function httpStatus(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { status?: unknown; code?: unknown; response?: { status?: unknown } };
  for (const v of [e.status, e.response?.status, e.code]) {
    if (typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 599) return v;
  }
  return undefined;
}

const IDENTIFIER = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

/** `error.errors[].reason` from the JSON body gaxios puts in the message; only identifiers survive. */
export function apiReasons(err: unknown): string[] {
  const message = (err as { message?: unknown } | null)?.message;
  if (typeof message !== 'string' || !message.startsWith('{')) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return [];
  }
  const items = (parsed as { error?: { errors?: unknown } } | null)?.error?.errors;
  if (!Array.isArray(items)) return [];
  return items
    .map((i) => (i as { reason?: unknown } | null)?.reason)
    .filter((r): r is string => typeof r === 'string' && IDENTIFIER.test(r));
}

function isAbort(err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name;
  return name === 'AbortError' || name === 'TimeoutError';
}

function systemCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

export function classify(err: unknown): Classification {
  const status = httpStatus(err);
  if (status === undefined) {
    if (isAbort(err)) return { errorClass: 'Transient', reasons: [], summary: 'request aborted' };
    const code = systemCode(err);
    return {
      errorClass: 'Transient',
      reasons: [],
      summary:
        code === undefined
          ? 'Compute API call failed before an answer (credentials or network)'
          : `Compute API unreachable (${code})`,
    };
  }
  const reasons = apiReasons(err);
  const summary = `Compute API answered ${status}${reasons.length > 0 ? ` ${reasons.join(',')}` : ''}`;
  const out = (errorClass: ErrorClass): Classification => ({ errorClass, status, reasons, summary });
  if (status === 404) return out('NotFound');
  if (status === 429) return out('QuotaExceeded');
  if (status === 403 && reasons.some((r) => QUOTA_REASONS.includes(r))) return out('QuotaExceeded');
  if (status === 400 && reasons.includes('resourceNotReady')) return out('Transient');
  if (status === 400 || status === 401 || status === 403) return out('Permanent');
  return out('Transient');
}

/**
 * Operation error codes that mean "no capacity or quota now": the API
 * accepted the request and the operation failed later for want of room.
 */
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
  if (aborted || isAbort(err)) return 'Timeout';
  const status = httpStatus(err);
  if (status === undefined) return 'Unreachable';
  if (status === 401) return 'Unauthorized';
  if (status === 403) return 'Forbidden';
  if (status === 408 || status === 504) return 'Timeout';
  return 'APIError';
}
