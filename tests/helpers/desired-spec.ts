import type { DesiredSpec } from '../../workflows/proxy/types.js';

/** A Managed `local` Proxy's desired spec as the bridge sends it, with `over` on top. */
export function desiredSpec(over: Partial<DesiredSpec> = {}): DesiredSpec {
  return {
    generation: 1,
    mode: 'Managed',
    provider: 'local',
    placement: {},
    port: 3128,
    specHash: 'v2:aaaa',
    legacySpecHashes: [],
    skipCleanup: false,
    deletionRequested: false,
    ...over,
  };
}
