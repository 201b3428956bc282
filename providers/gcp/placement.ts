/**
 * What the gcp provider checks of a create request before any API call,
 * and the zones it may use: pure, no I/O. Every problem names the field.
 */
import type { CreateRequest } from '../types.js';
import { subnetworkRegion, type GcpConfig } from './config.js';
import { IMAGE, INSTANCE_NAME, LABEL_VALUE, MACHINE_TYPE, ZONE } from './instance.js';

/** GCE's limit on one metadata value (user-data): 256 KiB. */
export const METADATA_VALUE_MAX_BYTES = 256 * 1024;

/** The request's zone, or the first problem with it, naming the field. */
export function checkCreateRequest(
  req: CreateRequest,
  config: GcpConfig,
  /** What goes into user-data (vmUserData): the cloud-init text, with the credentials part when there are credentials. */
  userData: string | undefined = req.cloudInit,
): { zone: string } | { problem: string } {
  const bad = (problem: string) => ({ problem });
  if (typeof req.name !== 'string' || !INSTANCE_NAME.test(req.name)) {
    return bad('name is not a GCE instance name (RFC 1035 label)');
  }
  const p = req.placement ?? {};
  const missing = (['zone', 'machineType', 'image'] as const).filter((f) => !p[f]);
  if (missing.length > 0) {
    return bad(
      `placement.${missing.join(', placement.')} ${missing.length > 1 ? 'are' : 'is'} required for gcp`,
    );
  }
  const zone = p.zone!;
  if (!ZONE.test(zone)) return bad(`placement.zone "${zone.slice(0, 80)}" is not a GCE zone name`);
  if (!MACHINE_TYPE.test(p.machineType!))
    return bad(`placement.machineType "${p.machineType!.slice(0, 80)}" is not a GCE machine type name`);
  if (!IMAGE.test(p.image!))
    return bad(`placement.image "${p.image!.slice(0, 80)}" is not an image path or URL`);
  if (p.region && !zone.startsWith(`${p.region}-`)) {
    return bad(`placement.zone "${zone}" is not in placement.region "${p.region.slice(0, 80)}"`);
  }
  // A subnetwork is regional: a VM in another region's zone would be refused by the API.
  const subnetRegion = config.subnetwork === undefined ? undefined : subnetworkRegion(config.subnetwork);
  if (subnetRegion !== undefined && !zone.startsWith(`${subnetRegion}-`)) {
    return bad(`placement.zone "${zone}" is not in region "${subnetRegion}" of gcp.subnetwork`);
  }
  // GCE refuses a metadata value over 256 KiB (400): said here, naming the field, before any call.
  const userDataBytes = Buffer.byteLength(userData ?? '', 'utf8');
  if (userDataBytes > METADATA_VALUE_MAX_BYTES) {
    const what = userData === req.cloudInit ? 'cloudInit' : "cloudInit with the proxy's credentials part";
    return bad(
      `${what} is ${userDataBytes} bytes; GCE metadata takes at most ${METADATA_VALUE_MAX_BYTES} bytes (256 KiB) for user-data`,
    );
  }
  if (req.uid === '' || !LABEL_VALUE.test(req.uid)) {
    return bad('uid is not a GCE label value (lowercase letters, digits, "-" and "_", at most 63)');
  }
  if (!LABEL_VALUE.test(req.installation)) {
    return bad(
      `installation "${req.installation.slice(0, 80)}" is not a GCE label value (lowercase letters, digits, "-" and "_", at most 63)`,
    );
  }
  return { zone };
}

/**
 * The zones a create may use, in order: the Proxy's `placement.zone`, then
 * the configured fallback `zones` in the same region (the Proxy's region is
 * a promise: never another one).
 */
export function candidateZones(zone: string, fallbacks: readonly string[] = []): string[] {
  const region = zone.slice(0, zone.lastIndexOf('-'));
  return [zone, ...fallbacks.filter((z) => z !== zone && z.startsWith(`${region}-`))];
}
