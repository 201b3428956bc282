/**
 * Pure pieces of the gcp provider: providerIDs, label names, the insert
 * request, and the instance-to-contract mapping. No I/O.
 */
import type { protos } from '@google-cloud/compute';
import {
  MARK_INSTALLATION,
  MARK_MANAGED,
  MARK_MANAGED_VALUE,
  MARK_UID,
  type CreateRequest,
  type Instance,
  type InstanceState,
} from '../types.js';
import { userDataWithCredentials } from '../shared/cloud-init-credentials.js';
import { networkPath, type GcpConfig } from './config.js';

/** GCP project IDs, as the config accepts them. */
export const PROJECT = /^[a-z][-a-z0-9]{4,28}[a-z0-9]$/;

export type ComputeInstance = protos.google.cloud.compute.v1.IInstance;

/**
 * GCE label keys allow only `[a-z0-9_-]`, so the contract's marks are
 * mapped deterministically: `.` and `/` become `-`
 * (`crawl.example.com/managed` is `crawl-example-com-managed`).
 */
export function labelKey(mark: string): string {
  return mark.replace(/[./]/g, '-');
}
export const LABEL_MANAGED = labelKey(MARK_MANAGED);
export const LABEL_UID = labelKey(MARK_UID);
export const LABEL_INSTALLATION = labelKey(MARK_INSTALLATION);

/** The server-side filter listByTag and check() use. */
export const MANAGED_FILTER = `labels.${LABEL_MANAGED} = ${MARK_MANAGED_VALUE}`;

/** A GCE label value: at most 63 of lowercase letters, digits, `_` and `-`; may be empty. */
export const LABEL_VALUE = /^[a-z0-9_-]{0,63}$/;
/** Zones (`europe-west1-b`) and instance names: RFC 1035 labels. */
export const ZONE = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
export const INSTANCE_NAME = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** Machine types: predefined (`e2-micro`) or custom (`e2-custom-2-4096`). */
export const MACHINE_TYPE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** An image path or URL: no whitespace, no quotes; the API resolves and rejects the rest. */
export const IMAGE = /^[A-Za-z0-9][-A-Za-z0-9_./:]{0,1023}$/;

/** The user-data key cloud-init reads on GCE. */
export const USER_DATA_KEY = 'user-data';

/**
 * The VM's user-data: the cloud-init text, with the htpasswd part when the
 * Proxy has credentials. Each call salts the hash anew: a create makes it
 * once and sends that to every zone it tries.
 */
export function vmUserData(req: Pick<CreateRequest, 'cloudInit' | 'credentials'>): string | undefined {
  return userDataWithCredentials(req.cloudInit, req.credentials);
}
/** The access config that gives a VM its ephemeral external IP. */
export const EXTERNAL_NAT = { name: 'External NAT', type: 'ONE_TO_ONE_NAT' } as const;

/**
 * The providerID: `projects/<project>/zones/<zone>/instances/<name>`. The
 * project is part of it so that a VM stays addressable where it was made
 * after `gcp.project` changes (get and delete go to the project the ID
 * names, never silently to the configured one).
 */
export function formatProviderId(project: string, zone: string, name: string): string {
  return `projects/${project}/zones/${zone}/instances/${name}`;
}

export interface ParsedProviderId {
  /** Absent in the old form (`zones/<zone>/instances/<name>`): the configured project. */
  project?: string;
  zone: string;
  name: string;
}

/**
 * Project (when present), zone and name of a providerID, or undefined when
 * it is neither `projects/<p>/zones/<z>/instances/<n>` nor the old
 * `zones/<z>/instances/<n>` (IDs recorded before the project was added).
 */
export function parseProviderId(id: string): ParsedProviderId | undefined {
  const m = /^(?:projects\/([^/]+)\/)?zones\/([^/]+)\/instances\/([^/]+)$/.exec(id);
  if (m === null) return undefined;
  const [, project, zone, name] = m as unknown as [string, string | undefined, string, string];
  if (!ZONE.test(zone) || !INSTANCE_NAME.test(name)) return undefined;
  if (project === undefined) return { zone, name };
  if (!PROJECT.test(project)) return undefined;
  return { project, zone, name };
}

/** The metadata key that keeps project-wide SSH keys off an instance. */
export const BLOCK_PROJECT_SSH_KEYS_KEY = 'block-project-ssh-keys';

/**
 * The insert request body (the seed's shape, plus the provider config's
 * insert settings): one NIC on the configured network or subnetwork with an
 * ephemeral external IP (none when internalOnly), a boot disk deleted with
 * the VM (of diskType when set), the GC marks as labels, the network tag,
 * Spot scheduling when asked, the VM's service account when configured, and
 * metadata: `block-project-ssh-keys` (unless turned off) and `user-data`:
 * the cloud-init text byte for byte, inside a multipart beside the htpasswd
 * part when the Proxy has credentials (vmUserData). The caller has validated
 * placement.
 */
export function buildInsertBody(
  req: CreateRequest,
  config: GcpConfig,
  zone: string,
  userData: string | undefined = vmUserData(req),
): ComputeInstance {
  const initializeParams: NonNullable<NonNullable<ComputeInstance['disks']>[number]['initializeParams']> = {
    sourceImage: req.placement.image ?? '',
    diskSizeGb: String(config.diskSizeGb),
  };
  // The API wants the disk type as a zonal resource, not a bare name.
  if (config.diskType !== undefined) initializeParams.diskType = `zones/${zone}/diskTypes/${config.diskType}`;
  // With a subnetwork GCE takes the network from it; sending the (defaulted)
  // network too would contradict a Shared VPC subnetwork and be refused.
  const nic: NonNullable<ComputeInstance['networkInterfaces']>[number] =
    config.subnetwork !== undefined
      ? { subnetwork: config.subnetwork }
      : { network: networkPath(config.network) };
  if (!config.internalOnly) nic.accessConfigs = [{ ...EXTERNAL_NAT }];
  const body: ComputeInstance = {
    name: req.name,
    description: `egress proxy for Proxy ${req.namespace}/${req.proxyName}`,
    machineType: `zones/${zone}/machineTypes/${req.placement.machineType ?? ''}`,
    labels: {
      [LABEL_MANAGED]: MARK_MANAGED_VALUE,
      [LABEL_UID]: req.uid,
      [LABEL_INSTALLATION]: req.installation,
    },
    tags: { items: [config.networkTag] },
    disks: [{ boot: true, autoDelete: true, initializeParams }],
    networkInterfaces: [nic],
  };
  if (config.provisioningModel === 'SPOT') {
    // What GCE requires of a Spot VM: no automatic restart, terminate on host
    // maintenance. A preempted VM is deleted (or stopped) by GCE and replaced
    // by the control plane like any vanished or stopped instance.
    body.scheduling = {
      provisioningModel: 'SPOT',
      instanceTerminationAction: config.instanceTerminationAction ?? 'DELETE',
      automaticRestart: false,
      onHostMaintenance: 'TERMINATE',
    };
  }
  if (config.serviceAccount !== undefined) {
    body.serviceAccounts = [
      { email: config.serviceAccount.email, scopes: [...config.serviceAccount.scopes] },
    ];
  }
  const items: { key: string; value: string }[] = [];
  if (config.blockProjectSshKeys) items.push({ key: BLOCK_PROJECT_SSH_KEYS_KEY, value: 'true' });
  if (userData !== undefined && userData !== '') items.push({ key: USER_DATA_KEY, value: userData });
  if (items.length > 0) body.metadata = { items };
  return body;
}

/** The external NAT IP of the first access config of the first NIC, or ''. */
export function natIp(inst: ComputeInstance): string {
  return inst.networkInterfaces?.[0]?.accessConfigs?.[0]?.natIP ?? '';
}

/**
 * The address a Proxy uses: the external NAT IP when the first NIC has an
 * access config, else (an internal-only VM) its internal IP. Read from the
 * VM, not from the config, so turning internalOnly on or off never changes
 * what an existing VM reports.
 */
export function instanceAddress(inst: ComputeInstance): string {
  const nic = inst.networkInterfaces?.[0];
  if ((nic?.accessConfigs ?? []).length > 0) return natIp(inst);
  return nic?.networkIP ?? '';
}

/**
 * The seed's state table (the address: the NAT IP, or the internal IP of an
 * internal-only VM; see instanceAddress):
 *
 * | status                                  | NAT IP | state        |
 * |-----------------------------------------|--------|--------------|
 * | PROVISIONING, STAGING, REPAIRING        | any    | Provisioning |
 * | RUNNING                                 | empty  | Provisioning |
 * | RUNNING                                 | set    | Running      |
 * | STOPPING, STOPPED, SUSPENDING, SUSPENDED| any    | Stopped      |
 * | TERMINATED                              | any    | Terminated   |
 * | anything else                           | any    | Stopped      |
 *
 * Unknown statuses are Stopped: the control plane's answer is delete and
 * recreate, always safe for disposable proxies.
 */
export function mapState(status: string | null | undefined, ip: string): InstanceState {
  switch (status) {
    case 'PROVISIONING':
    case 'STAGING':
    case 'REPAIRING':
      return 'Provisioning';
    case 'RUNNING':
      return ip === '' ? 'Provisioning' : 'Running';
    case 'TERMINATED':
      return 'Terminated';
    default:
      return 'Stopped';
  }
}

/** The last path segment of a zone URL (`https://.../zones/europe-west1-b` is `europe-west1-b`). */
export function lastSegment(url: string | null | undefined): string {
  if (!url) return '';
  const parts = url.split('/');
  return parts[parts.length - 1] ?? '';
}

/** UID, installation and CreatedAt are read back from the instance every time. */
export function toInstance(inst: ComputeInstance, project: string, zone: string): Instance {
  const ip = instanceAddress(inst);
  const state = mapState(inst.status, ip);
  const labels = inst.labels ?? {};
  const out: Instance = {
    id: formatProviderId(project, zone, inst.name ?? ''),
    state,
    uid: labels[LABEL_UID] ?? '',
    installation: labels[LABEL_INSTALLATION] ?? '',
  };
  if (state === 'Running') out.ip = ip;
  // An unparsable timestamp is left out: undefined counts as very old for GC (the contract's rule).
  const created = inst.creationTimestamp ? new Date(inst.creationTimestamp) : undefined;
  if (created !== undefined && !Number.isNaN(created.getTime())) out.createdAt = created;
  return out;
}
