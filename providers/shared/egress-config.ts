/**
 * A provider's `egress` block: the egress policy written into the proxies it
 * configures (forwarding/egress-policy.ts). Absent, the defaults: private,
 * loopback, link-local and reserved ranges refused, ports 80 and 443.
 *
 *   egress:
 *     denyCidrs: [10.96.0.0/12]       # the cluster's service range, on top of the defaults
 *     allowCidrs: [10.244.0.1/32]     # an internal probe target, say
 *     allowPorts: [80, 443, 8000-8999]  # or: any
 */
import { z } from 'zod';
import {
  createEgressPolicy,
  DEFAULT_EGRESS_POLICY,
  EgressPolicyError,
  parseCidrList,
  parsePortList,
  type EgressPolicySpec,
} from '../../forwarding/egress-policy.js';

const cidrs = z.array(z.string().min(1)).max(256).default([]);

export const egressConfigSchema = z
  .strictObject({
    denyCidrs: cidrs,
    allowCidrs: cidrs,
    allowPorts: z.union([z.literal('any'), z.array(z.union([z.int(), z.string().min(1)])).min(1)]).optional(),
  })
  .transform((block, ctx): EgressPolicySpec => {
    try {
      const spec: EgressPolicySpec = {
        denyCidrs: parseCidrList(block.denyCidrs.join(','), 'denyCidrs'),
        allowCidrs: parseCidrList(block.allowCidrs.join(','), 'allowCidrs'),
        allowPorts:
          block.allowPorts === undefined
            ? DEFAULT_EGRESS_POLICY.allowPorts
            : parsePortList(block.allowPorts === 'any' ? 'any' : block.allowPorts.join(','), 'allowPorts'),
      };
      createEgressPolicy(spec);
      return spec;
    } catch (error) {
      if (!(error instanceof EgressPolicyError)) throw error;
      ctx.addIssue({ code: 'custom', message: error.message });
      return z.NEVER;
    }
  });
