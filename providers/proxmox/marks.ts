/**
 * Identifiers and GC marks of the `proxmox` provider. Pure.
 *
 * providerID: `qemu/<vmid>/<name>`. Location-free, because VMs migrate
 * between nodes; the name is there because PVE reuses VMIDs: a VMID that
 * now holds a VM of another name is a gone instance.
 *
 * Marks: PVE tags (`pve-tag-list`: each `[a-z0-9_][a-z0-9_\-+.]*`, no `=`
 * or `:`, lowercased, sorted and deduplicated by the server), read live by
 * `/cluster/resources`, plus the same facts in a description line written by
 * the clone call itself, so a VM whose create was cut off before its tags
 * were written is still attributable.
 */
import { createHash } from 'node:crypto';

export const PROVIDER_ID = /^qemu\/([1-9][0-9]{2,8})\/(proxy-[a-z2-7]{16})$/;
export const INSTANCE_NAME = /^proxy-[a-z2-7]{16}$/;
/** One PVE tag. */
export const PVE_TAG = /^[a-z0-9_][a-z0-9_\-+.]*$/i;
/** What may follow a mark tag's prefix (the part of the tag grammar after its first character). */
const TAG_VALUE = /^[a-z0-9_\-+.]+$/;

export const TAG_MANAGED = 'egress-managed';
export const TAG_UID = 'egress-uid-';
export const TAG_INSTALLATION = 'egress-inst-';
export const TAG_CREATED = 'egress-ct-';
/**
 * The last address `get` read from the guest agent: the cluster list has no
 * addresses, so this is how one listByTag call can tell the drift sweep a
 * VM's address. Not a mark: GC never reads it.
 */
export const TAG_IP = 'egress-ip-';
/** Every mark tag starts with it; a template's copies are dropped from clones. */
export const TAG_PREFIX = 'egress-';
export const DESCRIPTION_MARK = 'egress-proxies:';

export function formatProviderId(vmid: number, name: string): string {
  return `qemu/${vmid}/${name}`;
}

export function parseProviderId(id: unknown): { vmid: number; name: string } | undefined {
  if (typeof id !== 'string') return undefined;
  const m = PROVIDER_ID.exec(id);
  if (m === null) return undefined;
  return { vmid: Number(m[1]), name: m[2]! };
}

/**
 * The VMIDs create tries for `name`, in order: a pseudo-random walk of the
 * range keyed on the name, so every attempt for one Proxy (a retry, another
 * worker after a crash) tries the same VMIDs and finds its own VM, and two
 * Proxies rarely meet on one.
 */
export function candidateVmids(name: string, range: { min: number; max: number }, count: number): number[] {
  const size = range.max - range.min + 1;
  const out: number[] = [];
  for (let k = 0; out.length < Math.min(count, size) && k < count * 4; k++) {
    const digest = createHash('sha256').update(`${name}:${k}`).digest();
    const v = range.min + (digest.readUIntBE(0, 6) % size);
    if (!out.includes(v)) out.push(v);
  }
  return out;
}

/** Whether a UID or installation can be written as a tag (after PVE's lowercasing). */
export function taggable(value: string): boolean {
  return value === value.toLowerCase() && TAG_VALUE.test(value);
}

export interface Marks {
  managed: boolean;
  uid: string;
  installation: string;
  /** Unix seconds; undefined when absent or unparsable (counts as very old). */
  createdAt?: Date;
}

/** PVE's tag list text → tags (split on `;`, `,` or spaces, as the server does). */
export function splitTags(text: string | undefined): string[] {
  return (text ?? '').split(/[;, ]+/).filter((t) => t !== '');
}

export function markTags(m: { uid: string; installation: string; createdAt: Date }): string[] {
  const tags = [TAG_MANAGED];
  if (m.uid !== '') tags.push(TAG_UID + m.uid);
  if (m.installation !== '') tags.push(TAG_INSTALLATION + m.installation);
  tags.push(TAG_CREATED + String(Math.floor(m.createdAt.getTime() / 1000)));
  return tags;
}

/** The address in the `egress-ip-` tag, if a well-formed IPv4 is there. */
export function ipFromTags(text: string | undefined): string | undefined {
  const v = splitTags(text)
    .find((t) => t.startsWith(TAG_IP))
    ?.slice(TAG_IP.length);
  return v !== undefined && /^\d{1,3}(?:\.\d{1,3}){3}$/.test(v) ? v : undefined;
}

/** `text` with its address tag set to `ip` (removed when undefined), other tags unchanged. */
export function withIpTag(text: string | undefined, ip: string | undefined): string {
  const kept = splitTags(text).filter((t) => !t.startsWith(TAG_IP));
  return [...kept, ...(ip === undefined ? [] : [TAG_IP + ip])].join(';');
}

/** The tag list to write: the VM's own non-mark tags (a template's included) and our marks. */
export function mergeTags(existing: string | undefined, marks: string[]): string {
  const kept = splitTags(existing).filter((t) => !t.toLowerCase().startsWith(TAG_PREFIX));
  return [...new Set([...kept, ...marks])].join(';');
}

function seconds(text: string | undefined): Date | undefined {
  if (text === undefined || !/^\d{1,12}$/.test(text)) return undefined;
  return new Date(Number(text) * 1000);
}

export function marksFromTags(text: string | undefined): Marks {
  const tags = splitTags(text).map((t) => t.toLowerCase());
  const valueOf = (prefix: string) => tags.find((t) => t.startsWith(prefix))?.slice(prefix.length);
  const createdAt = seconds(valueOf(TAG_CREATED));
  return {
    managed: tags.includes(TAG_MANAGED),
    uid: valueOf(TAG_UID) ?? '',
    installation: valueOf(TAG_INSTALLATION) ?? '',
    ...(createdAt === undefined ? {} : { createdAt }),
  };
}

export function descriptionMark(m: { uid: string; installation: string; createdAt: Date }): string {
  return `${DESCRIPTION_MARK} managed uid=${m.uid} inst=${m.installation} ct=${Math.floor(m.createdAt.getTime() / 1000)}`;
}

/** The marks of a description line written by descriptionMark; undefined when there is none. */
export function marksFromDescription(text: string | undefined): Marks | undefined {
  const line = (text ?? '').split('\n').find((l) => l.startsWith(`${DESCRIPTION_MARK} managed`));
  if (line === undefined) return undefined;
  const field = (k: string) => new RegExp(`(?:^| )${k}=(\\S*)`).exec(line)?.[1];
  const createdAt = seconds(field('ct'));
  return {
    managed: true,
    uid: field('uid') ?? '',
    installation: field('inst') ?? '',
    ...(createdAt === undefined ? {} : { createdAt }),
  };
}
