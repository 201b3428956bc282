/**
 * The two identity answers every provider gives the same way: a providerID
 * its own grammar does not parse (Permanent: no backend call can help), and
 * an existing instance of the requested name that another Proxy owns
 * (Permanent: create adopts an instance only when its UID mark is the
 * request's).
 */
import type { ProviderError } from '../errors.js';
import type { ProviderOperation } from '../types.js';
import type { Operations } from './operation.js';

/** `id` parsed by `parse`; Permanent naming the form wanted when it does not parse. */
export function parseIdOrFail<T>(
  ops: Pick<Operations, 'fail'>,
  operation: ProviderOperation,
  id: string,
  parse: (id: string) => T | undefined,
  form: string,
): T {
  const parsed = typeof id === 'string' ? parse(id) : undefined;
  if (parsed === undefined)
    throw ops.fail(
      'Permanent',
      operation,
      JSON.stringify(String(id).slice(0, 80)),
      `malformed providerID (want ${form})`,
    );
  return parsed;
}

/** create's refusal of `what` ("a pod") of the requested name whose owner mark is `owner`, not `want`. */
export function foreignOwner(
  ops: Pick<Operations, 'fail'>,
  instance: string,
  what: string,
  owner: string,
  want: string,
  mark = 'uid mark',
): ProviderError {
  return ops.fail(
    'Permanent',
    'create',
    instance,
    `${what} with this name belongs to another owner (${mark} "${owner.slice(0, 64)}", want "${want}"); not adopting it`,
  );
}
