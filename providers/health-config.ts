/**
 * An entry's `health:` block in the providers config: the probe settings
 * for the Proxies of that entry (a paid vendor's entry names a small, cheap
 * probe URL and a longer interval). Read by the api process's prober, never
 * by a provider: the provider contract does not carry it.
 *
 *   providers:
 *     - name: vendor-eu
 *       type: ...
 *       health:
 *         probeURL: http://cheap.example/204
 *         intervalSeconds: 300
 *
 * A value here applies to a Proxy of the entry whose own
 * `spec.healthCheck` field holds the shipped default (which the apiserver
 * writes when the field is left out); a Proxy that sets another value keeps
 * its own (docs/architecture.md, Decisions: per-entry probe settings).
 */
import { z } from 'zod';

export const providerHealthSchema = z.strictObject({
  probeURL: z
    .string()
    .min(1, 'must not be empty')
    .refine((value) => {
      try {
        const url = new URL(value);
        return url.protocol === 'http:' || url.protocol === 'https:';
      } catch {
        return false;
      }
    }, 'must be an absolute http:// or https:// URL')
    .optional(),
  intervalSeconds: z.number().int('must be a whole number').min(1, 'must be at least 1').optional(),
});

export type ProviderHealth = z.output<typeof providerHealthSchema>;
