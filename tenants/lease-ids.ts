/**
 * Lease ids sealed to their tenant. With a tenants file, the id a tenant is
 * given is the store's id, a dot, and a tag: an HMAC of the id keyed by the
 * tenant's token digest. A release or report carrying an id checks the tag
 * with the caller's own key, so another tenant's id (or one without its
 * tag) is unknown to it. No state: every replica checks the same way.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Tenant } from './tenants.js';

const TAG_LENGTH = 16;

function tag(tenant: Tenant, id: string): string {
  return createHmac('sha256', tenant.digest).update(id).digest('base64url').slice(0, TAG_LENGTH);
}

/** The id the tenant is given for the store's lease `id`. */
export function sealLeaseId(seal: boolean, tenant: Tenant, id: string): string {
  return seal ? `${id}.${tag(tenant, id)}` : id;
}

/** The store's id inside an id the tenant sent, or undefined when it is not this tenant's. */
export function openLeaseId(seal: boolean, tenant: Tenant, sent: string): string | undefined {
  if (!seal) return sent;
  const dot = sent.lastIndexOf('.');
  if (dot <= 0) return undefined;
  const id = sent.slice(0, dot);
  const got = Buffer.from(sent.slice(dot + 1));
  const want = Buffer.from(tag(tenant, id));
  return got.length === want.length && timingSafeEqual(got, want) ? id : undefined;
}
