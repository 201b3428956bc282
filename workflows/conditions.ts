/**
 * Kubernetes condition semantics shared by the Proxy and ProxyPool state
 * machines: a condition's lastTransitionTime moves only when its status
 * does. Pure, sandbox-safe.
 */
import type { Condition } from '../resources/proxy-schema.js';

export interface ConditionSpec {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
}

/** The conditions to write: each spec stamped with the generation and its transition time (kept from `previous` while its status holds). */
export function withTransitionTimes(
  specs: readonly ConditionSpec[],
  previous: readonly Condition[],
  generation: number,
  now: Date,
): Condition[] {
  return specs.map((spec) => {
    const before = previous.find((c) => c.type === spec.type);
    const lastTransitionTime =
      before && before.status === spec.status
        ? before.lastTransitionTime
        : now.toISOString().replace(/\.\d{3}Z$/, 'Z');
    return {
      ...spec,
      message: spec.message.slice(0, 32_768),
      observedGeneration: generation,
      lastTransitionTime,
    };
  });
}
