/**
 * A placement field a provider answers from its own catalogue (a host or
 * node for `zone`, a machine type, an image): the value given, or the only
 * one configured when none is given. Anything else is Permanent, naming the
 * field and the choices, before any backend call.
 */
import type { Placement } from '../types.js';
import type { Operations } from './operation.js';

export function pickPlacement(
  ops: Pick<Operations, 'fail'>,
  instance: string,
  field: keyof Placement,
  value: string | undefined,
  keys: readonly string[],
): string {
  const choices = keys.length === 0 ? 'none configured' : `one of: ${keys.join(', ')}`;
  if (value === undefined || value === '') {
    if (keys.length === 1) return keys[0]!;
    throw ops.fail('Permanent', 'create', instance, `placement.${field} is required (${choices})`);
  }
  if (!keys.includes(value))
    throw ops.fail(
      'Permanent',
      'create',
      instance,
      `placement.${field} "${value.slice(0, 64)}" is not configured (${choices})`,
    );
  return value;
}
