/**
 * The gateway's check of a crawler's destination (forwarding/destination.ts),
 * before any lease is taken, so a refused connection costs no slot: refused
 * is 403 `forbidden_target` naming the rule, a name that does not resolve 502
 * `unresolved`.
 */
import type { EgressPolicy } from '../forwarding/egress-policy.js';
import {
  DestinationRefusedError,
  resolveAndCheck,
  type CheckedDestination,
  type DestinationResolver,
} from '../forwarding/destination.js';
import { Refusal } from './refusal.js';

export {
  createDestinationResolver,
  type CheckedDestination,
  type DestinationResolver,
} from '../forwarding/destination.js';

/** The checked destination of `hostname` and `port`, or a Refusal (403 or 502). */
export async function checkDestination(
  policy: EgressPolicy,
  resolver: DestinationResolver,
  hostname: string,
  port: number,
): Promise<CheckedDestination> {
  try {
    return await resolveAndCheck(policy, resolver, hostname, port);
  } catch (error) {
    if (!(error instanceof DestinationRefusedError)) throw error;
    throw error.kind === 'forbidden'
      ? new Refusal(403, error.message, 'forbidden_target')
      : new Refusal(502, error.message, 'unresolved');
  }
}
