/**
 * The `gcp` provider's config block: the seed's four fields, unchanged, so
 * the seed's providers-config.yaml loads as it is, plus `endpoint` for tests.
 * Pure: no I/O, no credentials.
 *
 *   gcp:
 *     project: my-project          # required
 *     network: default             # VPC network (a name, or a path such as projects/host/global/networks/vpc)
 *     networkTag: proxy-operator   # network tag on every VM: what the firewall rule targets
 *     diskSizeGb: 10               # boot disk size
 *     endpoint: http://127.0.0.1:4000   # tests only: a Compute REST endpoint instead of compute.googleapis.com
 *
 * Credentials are Application Default Credentials and nothing else: there is
 * deliberately no key-file field (workload identity in-cluster,
 * GOOGLE_APPLICATION_CREDENTIALS or gcloud ADC elsewhere).
 */
import { z } from 'zod';

/** GCP project IDs: 6-30 characters, lowercase letters, digits and hyphens, starting with a letter. */
const PROJECT_ID = /^[a-z][-a-z0-9]{4,28}[a-z0-9]$/;
/** A resource name (networks, tags): RFC 1035 label, at most 63 characters. */
export const GCE_NAME = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** A partial resource path such as projects/host/global/networks/vpc. */
const RESOURCE_PATH = /^[a-z0-9][-a-z0-9_./]{0,254}$/;

export const DEFAULT_NETWORK = 'default';
export const DEFAULT_NETWORK_TAG = 'proxy-operator';
export const DEFAULT_DISK_SIZE_GB = 10;

export const gcpConfigSchema = z.strictObject({
  project: z
    .string({ error: 'is required (the GCP project the VMs are created in)' })
    .regex(PROJECT_ID, 'must be a GCP project ID (6-30 of a-z, 0-9, "-", starting with a letter)'),
  network: z
    .string()
    .refine(
      (v) => GCE_NAME.test(v) || (v.includes('/') && RESOURCE_PATH.test(v) && !v.includes('..')),
      'must be a network name or a resource path like projects/<host>/global/networks/<name>',
    )
    .default(DEFAULT_NETWORK),
  networkTag: z
    .string()
    .regex(GCE_NAME, 'must be a lowercase name of at most 63 characters (a GCE network tag)')
    .default(DEFAULT_NETWORK_TAG),
  diskSizeGb: z
    .int('must be a whole number of GB')
    .min(10, 'must be at least 10')
    .max(65_536)
    .default(DEFAULT_DISK_SIZE_GB),
  /**
   * A Compute REST endpoint (`http://host:port` or `https://host[:port]`)
   * used instead of compute.googleapis.com; the tests point it at their fake.
   */
  endpoint: z
    .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
    .refine((v) => {
      const u = new URL(v);
      return (
        (u.pathname === '/' || u.pathname === '') && u.search === '' && u.username === '' && u.password === ''
      );
    }, 'must be a scheme, host and port only (no path, query or credentials)')
    .optional(),
});

export type GcpConfig = z.output<typeof gcpConfigSchema>;

/** The network as the insert request wants it. */
export function networkPath(network: string): string {
  return network.includes('/') ? network : `global/networks/${network}`;
}
