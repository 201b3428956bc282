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
 *     endpointCaFile: /etc/ca.pem       # with an https endpoint: the CA its certificate chains to
 *
 * and the insert-body settings a real project needs (issue 26):
 *
 *     subnetwork: regions/europe-west1/subnetworks/proxies   # or projects/<host>/regions/...; or a full URL
 *     zones: [europe-west1-b, europe-west1-c, europe-west1-d]   # fallbacks within a Proxy's region
 *     diskType: pd-balanced        # boot disk type (GCE's default when unset)
 *     provisioningModel: SPOT      # STANDARD (default) or SPOT
 *     instanceTerminationAction: DELETE   # SPOT only: DELETE (default) or STOP
 *     blockProjectSshKeys: true    # default: project-wide SSH keys never land on a proxy
 *     internalOnly: false          # true: no external IP; the address is the internal IP
 *     serviceAccount:              # unset by default: the VMs run with no identity
 *       email: proxy-vm@my-project.iam.gserviceaccount.com
 *       scopes: [https://www.googleapis.com/auth/cloud-platform]
 *
 * the read budget of the periodic lists (issue 26; docs/providers/gcp.md):
 *
 *     listCallsPerVmHour: 0.75     # 0: the drift sweep lists on every pass
 *     listMaxAgeSeconds: 3600      # a small fleet is still listed at least this often
 *
 * a managed firewall rule for the proxies (issue 51; firewall-rule.ts):
 *
 *     firewall:
 *       sourceRanges: [203.0.113.0/24]   # who may reach the proxies
 *       ports: [3128]
 *       overwriteManualEdits: false
 *
 * They live here, not in the Proxy's placement, on purpose: they are facts
 * of the project and its network (which subnetwork, whether the org allows
 * external IPs, which identity), the same for every Proxy of one entry, and
 * placement feeds the spec hash, so a new placement field would be a CRD
 * change for what two provider entries (say `gcp-eu` and `gcp-eu-spot`)
 * already express. Like the other provider fields they apply to VMs
 * created afterwards.
 *
 * Credentials are Application Default Credentials by default (workload
 * identity in-cluster, GOOGLE_APPLICATION_CREDENTIALS or gcloud ADC
 * elsewhere). An entry may name its own, so two entries run as two
 * identities in one worker:
 *
 *     credentials:
 *       keyFile: /var/run/secrets/gcp-eu/key.json   # a credential JSON (service-account key, external_account...)
 *       impersonate: proxies-eu@my-project.iam.gserviceaccount.com   # act as this account through ADC (or keyFile)
 */
import { z } from 'zod';
import { firewallConfigSchema, ruleNetwork } from './firewall-rule.js';

/** GCP project IDs: 6-30 characters, lowercase letters, digits and hyphens, starting with a letter. */
const PROJECT_ID = /^[a-z][-a-z0-9]{4,28}[a-z0-9]$/;
/** A resource name (networks, tags): RFC 1035 label, at most 63 characters. */
export const GCE_NAME = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** A partial resource path such as projects/host/global/networks/vpc. */
const RESOURCE_PATH = /^[a-z0-9][-a-z0-9_./]{0,254}$/;

export const DEFAULT_NETWORK = 'default';
export const DEFAULT_NETWORK_TAG = 'proxy-operator';
export const DEFAULT_DISK_SIZE_GB = 10;

/**
 * A subnetwork as the insert request accepts it: a full URL, a partial path
 * with the project (a Shared VPC host project's subnetwork), or the short
 * form `regions/R/subnetworks/S` (the VM's own project).
 */
const SUBNETWORK =
  /^(?:https:\/\/(?:www|compute)\.googleapis\.com\/compute\/v1\/)?(?:projects\/([a-z][-a-z0-9.:]{4,61}[a-z0-9])\/)?regions\/([a-z][-a-z0-9]{0,61}[a-z0-9])\/subnetworks\/([a-z]([-a-z0-9]{0,61}[a-z0-9])?)$/;

/** The region a valid `subnetwork` value names (a VM's zone must be in it). */
export function subnetworkRegion(subnetwork: string): string | undefined {
  return SUBNETWORK.exec(subnetwork)?.[2];
}

/** A service account email: `name@project.iam.gserviceaccount.com`, or a Google-managed one such as the Compute default. */
const SERVICE_ACCOUNT_EMAIL = /^[a-z][-a-z0-9]{0,62}@[a-z0-9][-a-z0-9.]{0,125}\.gserviceaccount\.com$/;
/** OAuth scopes as the API takes them: URLs under googleapis.com. */
const SCOPE = /^https:\/\/www\.googleapis\.com\/auth\/[a-z][-a-z0-9._]{0,127}$/;
export const DEFAULT_VM_SCOPES = ['https://www.googleapis.com/auth/cloud-platform'];

export const gcpConfigSchema = z
  .strictObject({
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
    subnetwork: z
      .string()
      .regex(
        SUBNETWORK,
        'must be a subnetwork: regions/<region>/subnetworks/<name>, projects/<host>/regions/<region>/subnetworks/<name> (Shared VPC) or its https://www.googleapis.com/compute/v1/ URL',
      )
      .optional(),
    /**
     * Zones a create falls back to, in order, when the Proxy's
     * `placement.zone` has no capacity or quota (ZONE_RESOURCE_POOL_EXHAUSTED,
     * QUOTA_EXCEEDED...): only those in the same region as that zone.
     */
    zones: z
      .array(z.string().regex(GCE_NAME, 'must be a GCE zone name such as europe-west1-b'))
      .min(1, 'must list at least one zone (or leave zones out)')
      .max(20, 'must list at most 20 zones')
      .refine((v) => new Set(v).size === v.length, 'must not repeat a zone')
      .optional(),
    /** A disk type name (pd-balanced, pd-ssd, hyperdisk-balanced...); sent as the zonal path. */
    diskType: z
      .string()
      .regex(GCE_NAME, 'must be a disk type name such as pd-balanced or pd-ssd (the zonal path is built)')
      .optional(),
    provisioningModel: z
      .enum(['STANDARD', 'SPOT'], { error: 'must be STANDARD or SPOT' })
      .default('STANDARD'),
    /** What GCE does to a preempted Spot VM; only with provisioningModel SPOT (default DELETE there). */
    instanceTerminationAction: z.enum(['DELETE', 'STOP'], { error: 'must be DELETE or STOP' }).optional(),
    /** Metadata block-project-ssh-keys: project-wide SSH keys must not open every proxy. */
    blockProjectSshKeys: z.boolean({ error: 'must be true or false' }).default(true),
    /** No access config: no external IP, the address is the VM's internal IP (crawlers inside the VPC). */
    internalOnly: z.boolean({ error: 'must be true or false' }).default(false),
    serviceAccount: z
      .strictObject({
        email: z
          .string({ error: 'is required (the service account the VMs run as)' })
          .regex(
            SERVICE_ACCOUNT_EMAIL,
            'must be a service account email (name@project.iam.gserviceaccount.com)',
          ),
        scopes: z
          .array(z.string().regex(SCOPE, 'must be an OAuth scope URL (https://www.googleapis.com/auth/...)'))
          .min(1, 'must list at least one scope')
          .default(DEFAULT_VM_SCOPES),
      })
      .optional(),
    /**
     * The read budget of the entry's periodic lists (drift sweep, orphan GC,
     * checks): Compute calls per listed VM per hour. The last list answers
     * them until its pages have been "spent" at this rate, so 5 VMs at 0.75
     * are listed every 16 min and 40 or more on every sweep. 0: no budget
     * (every sweep lists; GC and checks still reuse a list of the last 150 s).
     */
    listCallsPerVmHour: z
      .number({ error: 'must be a number of calls per VM-hour' })
      .min(0, 'must be 0 (off) or more')
      .max(1_000_000)
      .default(0.75),
    /** However small the fleet, a list at least this often (the longest drift-detection delay). */
    listMaxAgeSeconds: z
      .int('must be a whole number of seconds')
      .min(60, 'must be at least 60')
      .max(86_400, 'must be at most 86400 (a day)')
      .default(3_600),
    /** This entry's own identity; unset: Application Default Credentials. */
    credentials: z
      .strictObject({
        /** A credential JSON file (service-account key, external_account...) instead of ADC; read until it exists. */
        keyFile: z.string().min(1, 'must be a file path').max(1024).optional(),
        /** A service account the ADC (or keyFile) identity impersonates (it needs roles/iam.serviceAccountTokenCreator on it). */
        impersonate: z
          .string()
          .regex(
            SERVICE_ACCOUNT_EMAIL,
            'must be a service account email (name@project.iam.gserviceaccount.com)',
          )
          .optional(),
        /** The IAM Credentials API base URL (tests); default https://iamcredentials.googleapis.com. */
        impersonationEndpoint: z
          .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
          .optional(),
      })
      .refine(
        (c) => c.keyFile !== undefined || c.impersonate !== undefined,
        'must name a keyFile, a service account to impersonate, or both (or be left out for ADC)',
      )
      .optional(),
    /** A firewall rule the provider check creates and corrects; unset: none (the rule is a prerequisite). */
    firewall: firewallConfigSchema.optional(),
    /**
     * A Compute REST endpoint (`http://host:port` or `https://host[:port]`)
     * used instead of compute.googleapis.com; the tests point it at their fake.
     */
    endpoint: z
      .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
      .refine((v) => {
        const u = new URL(v);
        return (
          (u.pathname === '/' || u.pathname === '') &&
          u.search === '' &&
          u.username === '' &&
          u.password === ''
        );
      }, 'must be a scheme, host and port only (no path, query or credentials)')
      .optional(),
    /**
     * PEM file of the CA(s) an https `endpoint`'s certificate chains to,
     * trusted instead of the public roots for Compute requests (a private
     * endpoint behind an inspecting proxy; the tests' TLS fake).
     * Verification stays on: there is no switch to turn it off.
     */
    endpointCaFile: z.string().min(1, 'must be a file path').max(1024).optional(),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.endpointCaFile !== undefined && !cfg.endpoint?.startsWith('https://')) {
      ctx.addIssue({
        code: 'custom',
        path: ['endpointCaFile'],
        message: 'needs an https:// endpoint (it is the CA that endpoint is trusted by)',
      });
    }
    // The rule lives in the network's project: a path it cannot name would fail every check.
    if (cfg.firewall !== undefined && ruleNetwork(cfg) === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['network'],
        message:
          'must be a network name or [projects/<host>/]global/networks/<name> when firewall is set (the rule is made on it)',
      });
    }
    // A termination action without Spot would be silently ignored by GCE's STANDARD model: refuse it.
    if (cfg.instanceTerminationAction !== undefined && cfg.provisioningModel !== 'SPOT') {
      ctx.addIssue({
        code: 'custom',
        path: ['instanceTerminationAction'],
        message: 'is only valid with provisioningModel: SPOT',
      });
    }
  });

export type GcpConfig = z.output<typeof gcpConfigSchema>;

/** The network as the insert request wants it. */
export function networkPath(network: string): string {
  return network.includes('/') ? network : `global/networks/${network}`;
}
