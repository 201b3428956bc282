/**
 * Classification of everything an apiserver call can throw, in one place
 * (contract §5), plus the check() reason for the same errors (contract §8).
 *
 * What reaches here: client-node's `ApiException` (`code` is the HTTP
 * status, `body` the Status JSON as text), node-fetch's `FetchError`
 * (network: `code` ECONNREFUSED, ECONNRESET, ETIMEDOUT, TLS codes...) and
 * `AbortError` (our signal fired), and anything else a bug may throw.
 *
 * | What                                   | Class                                   |
 * |----------------------------------------|-----------------------------------------|
 * | 404 NotFound                           | NotFound                                |
 * | 409 Conflict / AlreadyExists           | Transient (create handles 409 itself: the adopt path) |
 * | 400 BadRequest, 422 Invalid            | Permanent                               |
 * | 401 Unauthorized                       | Permanent                               |
 * | 403 Forbidden                          | Permanent (the seed's decision, below)  |
 * | 408, 410, 429, 5xx                     | Transient                               |
 * | any other HTTP status                  | Transient                               |
 * | network errors, aborts, anything else  | Transient                               |
 *
 * Nothing is QuotaExceeded (the seed's `quota: absent` profile).
 */
import { httpCheckReason, isAbortError, systemErrorCode } from '../shared/http-failure.js';
import type { ErrorClass } from '../types.js';

export interface Classification {
  errorClass: ErrorClass;
  /** The HTTP status when the apiserver answered. */
  status?: number;
  /** The Status object's machine `reason` (`AlreadyExists`, `Forbidden`...) when it is an identifier. */
  apiReason?: string;
  /** A short description for the error message, composed from the fields above only. */
  summary: string;
}

/** The HTTP status of an apiserver answer, or undefined for anything else. */
export function httpStatus(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  // ApiException's code is the HTTP status (a number); system errors carry string codes.
  return typeof code === 'number' && Number.isInteger(code) && code >= 100 && code <= 599 ? code : undefined;
}

/** `reason` of the Status JSON in an ApiException body, when it is a plain identifier. */
export function apiReason(err: unknown): string | undefined {
  const body = (err as { body?: unknown } | null)?.body;
  let parsed: unknown = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  const reason = (parsed as { reason?: unknown } | null | undefined)?.reason;
  return typeof reason === 'string' && /^[A-Za-z]{1,64}$/.test(reason) ? reason : undefined;
}

export function classify(err: unknown): Classification {
  const status = httpStatus(err);
  if (status === undefined) {
    if (isAbortError(err)) return { errorClass: 'Transient', summary: 'request aborted' };
    const code = systemErrorCode(err);
    return {
      errorClass: 'Transient',
      summary: code === undefined ? 'apiserver call failed' : `apiserver unreachable (${code})`,
    };
  }
  const reason = apiReason(err);
  const answered = `apiserver answered ${status}${reason === undefined ? '' : ` ${reason}`}`;
  const out = (errorClass: ErrorClass, note = ''): Classification => ({
    errorClass,
    status,
    ...(reason === undefined ? {} : { apiReason: reason }),
    summary: answered + note,
  });
  switch (status) {
    case 404:
      return out('NotFound');
    case 400:
    case 422:
      return out('Permanent');
    case 401:
      return out('Permanent', ' (the credentials are not accepted)');
    case 403:
      // Why a 403 is Permanent (the seed's decision, kept): an RBAC denial and
      // an exhausted ResourceQuota both come back as 403 with reason
      // `Forbidden`; only the free-text message differs, and that is not an
      // API to match on. Permanent stops the control plane from hammering an
      // apiserver that may never allow the request, and surfaces the problem
      // on the Proxy (PermanentError) for a person to fix. The price: a real
      // ResourceQuota 403 is latched instead of getting the gentler quota
      // backoff, and the Proxy needs a spec change (a new generation) to try
      // again once the quota is raised.
      return out('Permanent', ' (RBAC denial or an exhausted ResourceQuota: both are 403)');
    case 409:
      return out('Transient');
    default:
      // 408, 410 (an expired list continue token), 429, 5xx, and codes we do not know.
      return out('Transient');
  }
}

/**
 * check()'s reason for a failed probe (shared set, contract §8). `aborted`
 * is whether the check's own signal fired (the caller's or our timeout).
 */
export function checkReason(err: unknown, aborted: boolean): string {
  return httpCheckReason(err, httpStatus(err), aborted);
}
