/**
 * What a Proxy's status records about its instance, as a fresh run of its
 * workflow seeds itself from it. Here, in the lowest layer, because both
 * sides name it: the workflow (sandbox, pure data only) and `kube/`, which
 * reads it from a status.
 */
import type { Condition } from './proxy-schema.js';

/**
 * What the Proxy's status recorded about its instance, read by a run that
 * starts afresh (the bridge restarted a run an operator terminated, or reset
 * to a new code version): only the workflow writes these fields, so they are
 * what the last run knew.
 */
export interface RecordedStatus {
  providerID?: string;
  /** The spec hash the recorded instance was created with. */
  specHash?: string;
  ip?: string;
  /** The port the provider chose (absent: spec.port). */
  port?: number;
  /** RFC 3339: when the provider ends the instance by itself. */
  expiresAt?: string;
  conditions?: Condition[];
  latencyMillis?: number;
  lastHealthReportTime?: string;
}
