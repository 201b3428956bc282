/**
 * One vocabulary for what the apiserver answered, so no caller reads a
 * client-node ApiException by hand: not found (and whether the Status
 * names *this* object), conflict, forbidden, gone (a watch's 410), invalid
 * (422: a failed JSON-patch test or a schema refusal), or anything else.
 */

export type KubeErrorKind = 'not-found' | 'conflict' | 'forbidden' | 'gone' | 'invalid' | 'other';

/** The HTTP status of a client-node ApiException (its `code`), or undefined for anything else. */
export function httpCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

export function kubeErrorKind(error: unknown): KubeErrorKind {
  switch (httpCode(error)) {
    case 404:
      return 'not-found';
    case 409:
      return 'conflict';
    case 403:
      return 'forbidden';
    case 410:
      return 'gone';
    case 422:
      return 'invalid';
    default:
      return 'other';
  }
}

/** The apiserver's Status object carried by a client-node ApiException, when there is one. */
function statusOf(error: unknown): {
  kind?: unknown;
  reason?: unknown;
  message?: unknown;
  details?: { name?: unknown; kind?: unknown };
} | null {
  let body = (error as { body?: unknown } | null)?.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body) as unknown;
    } catch {
      return null;
    }
  }
  return typeof body === 'object' && body !== null ? body : null;
}

/**
 * Whether an apiserver error says that this object does not exist: a 404
 * whose Status names it (`plural`, `name`). A bare 404 (an unserved API
 * version, a wrong path, a proxy in between) says nothing about the object,
 * and treating it as "gone" would make every Proxy workflow delete its
 * instance and end.
 */
export function isNotFoundOf(error: unknown, plural: string, name: string): boolean {
  if (httpCode(error) !== 404) return false;
  const status = statusOf(error);
  return (
    status?.kind === 'Status' &&
    status.reason === 'NotFound' &&
    status.details?.name === name &&
    status.details.kind === plural
  );
}

/** One line for a log: the apiserver's Status message (what RBAC denied, what the schema refused), else the error's first line. */
export function apiErrorLine(error: unknown): string {
  const message = statusOf(error)?.message;
  const line = typeof message === 'string' ? message : error instanceof Error ? error.message : String(error);
  return line.split('\n')[0]!.slice(0, 300);
}
