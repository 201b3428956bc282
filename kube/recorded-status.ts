/**
 * What a Proxy's status records about its instance, as a fresh run of its
 * workflow seeds itself from it: read by the run (readRecordedStatus) or
 * sent by the bridge from its informer cache when it starts the run.
 */
import type { ProxyStatus } from '../resources/proxy-schema.js';
import type { RecordedStatus } from '../resources/recorded-status.js';

/**
 * The instance fields of a Proxy's status, as a fresh run seeds itself from
 * them. Only what the workflow writes is taken; a field of the wrong shape
 * (a status written by hand) is left out rather than trusted.
 */
export function recordedStatusOf(status: ProxyStatus | undefined): RecordedStatus {
  if (!status) return {};
  const text = (v: unknown): v is string => typeof v === 'string' && v !== '';
  const out: RecordedStatus = {};
  if (text(status.providerID)) out.providerID = status.providerID;
  if (text(status.specHash)) out.specHash = status.specHash;
  if (text(status.ip)) out.ip = status.ip;
  if (Number.isInteger(status.port)) out.port = status.port;
  if (typeof status.expiresAt === 'string' && Number.isFinite(Date.parse(status.expiresAt)))
    out.expiresAt = status.expiresAt;
  if (Array.isArray(status.conditions)) out.conditions = status.conditions;
  if (typeof status.latencyMillis === 'number') out.latencyMillis = status.latencyMillis;
  if (text(status.lastHealthReportTime)) out.lastHealthReportTime = status.lastHealthReportTime;
  return out;
}
