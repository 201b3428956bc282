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
import { networkPath, type GcpConfig } from './config.js';

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
/** The access config that gives a VM its ephemeral external IP. */
export const EXTERNAL_NAT = { name: 'External NAT', type: 'ONE_TO_ONE_NAT' } as const;

export function formatProviderId(zone: string, name: string): string {
  return `zones/${zone}/instances/${name}`;
}

/** Zone and name of a providerID, or undefined when it is not exactly `zones/<zone>/instances/<name>`. */
export function parseProviderId(id: string): { zone: string; name: string } | undefined {
  const m = /^zones\/([^/]+)\/instances\/([^/]+)$/.exec(id);
  if (m === null) return undefined;
  const [, zone, name] = m as unknown as [string, string, string];
  if (!ZONE.test(zone) || !INSTANCE_NAME.test(name)) return undefined;
  return { zone, name };
}

/**
 * The insert request body (the seed's shape): one NIC on the configured
 * network with an ephemeral external IP, a boot disk deleted with the VM,
 * the GC marks as labels, the network tag, and the cloud-init text as
 * `user-data` metadata, byte for byte. The caller has validated placement.
 */
export function buildInsertBody(req: CreateRequest, config: GcpConfig, zone: string): ComputeInstance {
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
    disks: [
      {
        boot: true,
        autoDelete: true,
        initializeParams: { sourceImage: req.placement.image ?? '', diskSizeGb: String(config.diskSizeGb) },
      },
    ],
    networkInterfaces: [{ network: networkPath(config.network), accessConfigs: [{ ...EXTERNAL_NAT }] }],
  };
  if (req.cloudInit !== undefined && req.cloudInit !== '') {
    body.metadata = { items: [{ key: USER_DATA_KEY, value: req.cloudInit }] };
  }
  return body;
}

/** The external NAT IP of the first access config of the first NIC, or ''. */
export function natIp(inst: ComputeInstance): string {
  return inst.networkInterfaces?.[0]?.accessConfigs?.[0]?.natIP ?? '';
}

/**
 * The seed's state table:
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
export function toInstance(inst: ComputeInstance, zone: string): Instance {
  const ip = natIp(inst);
  const state = mapState(inst.status, ip);
  const labels = inst.labels ?? {};
  const out: Instance = {
    id: formatProviderId(zone, inst.name ?? ''),
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
