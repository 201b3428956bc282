/**
 * The config fields of a managed ingress rule (the gcp firewall rule, the
 * aws security group): who may reach the proxies, on which ports. Pure.
 */
import { z } from 'zod';
import { canonicalCidr } from './cidr.js';

const unique = <T>(v: T[]) => new Set(v).size === v.length;

/** CIDR ranges with no host bits, never /0, at least one, none repeated (canonical text compared). */
export const sourceRangesField = () =>
  z
    .array(
      z
        .string()
        .refine(
          (v) => canonicalCidr(v) !== undefined,
          'must be a CIDR range with no host bits set, such as 203.0.113.0/24 or 2001:db8::/48',
        )
        .refine((v) => !v.endsWith('/0'), 'must not be /0: that opens the proxies to the whole internet'),
    )
    .min(1, 'must list at least one CIDR range (who may reach the proxies)')
    .refine((v) => unique(v.map((r) => canonicalCidr(r) ?? r)), 'must not repeat a range');

/** TCP ports, at least one, none repeated. */
export const portsField = () =>
  z
    .array(
      z
        .int('must be a whole port number')
        .min(1, 'must be a port number (1-65535)')
        .max(65_535, 'must be a port number (1-65535)'),
    )
    .min(1, 'must list at least one port')
    .refine(unique, 'must not repeat a port');
