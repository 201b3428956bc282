import type { PoolRef } from './types.js';

/** Stable, readable workflow ID; the UID makes a pool recreated under the same name a new workflow. */
export function poolWorkflowId(ref: PoolRef): string {
  return `pool/${ref.namespace}/${ref.name}/${ref.uid}`;
}
