/**
 * Pure naming rules of the kvm provider: the providerID, and the volume
 * names a create leaves in a host's pool. Every name here is checked
 * against a strict pattern before it reaches a remote command.
 */
import { createHash } from 'node:crypto';
import { KVM_IDENTIFIER } from './config.js';

/** Domain names this provider creates or addresses: lowercase label (instance names are `proxy-<16 base32>`). */
export const DOMAIN_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

export function formatProviderId(host: string, domain: string): string {
  return `hosts/${host}/domains/${domain}`;
}

/** `hosts/<host>/domains/<name>` → parts; undefined for anything else (callers answer Permanent). */
export function parseProviderId(id: string): { host: string; domain: string } | undefined {
  if (typeof id !== 'string') return undefined;
  const parts = id.split('/');
  if (parts.length !== 4 || parts[0] !== 'hosts' || parts[2] !== 'domains') return undefined;
  const [, host, , domain] = parts as [string, string, string, string];
  if (!KVM_IDENTIFIER.test(host) || !DOMAIN_NAME.test(domain)) return undefined;
  return { host, domain };
}

export function overlayVolume(domain: string): string {
  return `${domain}.qcow2`;
}

export function seedVolume(domain: string): string {
  return `${domain}-seed.iso`;
}

/** The cache key of an image given as a URL in placement.image. */
export function urlImageKey(url: string): string {
  return `url-${createHash('sha256').update(url, 'utf8').digest('hex').slice(0, 16)}`;
}

export function baseVolume(imageKey: string, format: 'qcow2' | 'raw'): string {
  return `base-${imageKey}.${format}`;
}

export function markerVolume(base: string): string {
  return `${base}.sha256`;
}

/**
 * The domain a volume belongs to, when it is one of ours (an overlay or a
 * seed named after an instance); undefined for base images and foreign volumes.
 */
export function domainOfVolume(volume: string): string | undefined {
  const m = /^(proxy-[a-z2-7]{16})(?:\.qcow2|-seed\.iso|\.marks)$/.exec(volume);
  return m === null ? undefined : m[1];
}

/** A tiny volume holding an instance's marks, written first and removed last, so volumes left without a domain stay attributable. */
export function marksVolume(domain: string): string {
  return `${domain}.marks`;
}
