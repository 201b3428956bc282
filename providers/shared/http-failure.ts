/**
 * What the failures of any provider's HTTP API client have in common: an
 * aborted request, a system error code before any answer, and check()'s
 * reason for a failed probe (the shared set, contract §8).
 */

/** The request's own signal ended it (fetch's AbortError or TimeoutError, node-fetch's `type: 'aborted'`). */
export function isAbortError(err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name;
  const type = (err as { type?: unknown } | null)?.type;
  return name === 'AbortError' || name === 'TimeoutError' || type === 'aborted';
}

/** A string error code (ECONNREFUSED, CERT_HAS_EXPIRED...) when it is an identifier. */
export function systemErrorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,63}$/.test(code) ? code : undefined;
}

/**
 * check()'s reason for a probe that failed with `err`, answered with HTTP
 * `status` (undefined: no answer). `aborted` is whether the check's own
 * signal fired (the caller's or our timeout).
 */
export function httpCheckReason(err: unknown, status: number | undefined, aborted: boolean): string {
  if (aborted || isAbortError(err)) return 'Timeout';
  if (status === undefined) return 'Unreachable';
  if (status === 401) return 'Unauthorized';
  if (status === 403) return 'Forbidden';
  if (status === 408 || status === 504) return 'Timeout';
  return 'APIError';
}
