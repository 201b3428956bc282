/**
 * Pure pieces of the managed firewall rule (issue 51): its config block,
 * its name, the mark in its description, the fields compared, and what the
 * provider check does about a rule it reads. No I/O.
 *
 *   gcp:
 *     firewall:
 *       sourceRanges: [203.0.113.0/24]   # required: who may reach the proxies
 *       ports: [3128]                    # default
 *       overwriteManualEdits: false      # default: a hand edit is reported, not undone
 *
 * GCE firewall rules have no labels, so the mark is the description:
 * installation, provider entry, and a hash of the fields the provider last
 * wrote. Fields that differ while that hash still matches them mean the
 * config changed (correct it); fields that no longer match the hash mean
 * someone edited the rule (report it).
 */
import { createHash } from 'node:crypto';
import type { protos } from '@google-cloud/compute';
import { z } from 'zod';
import { base32Lower } from '../names.js';
import { canonicalCidr } from '../shared/cidr.js';
import { portsField, sourceRangesField } from '../shared/ingress-fields.js';

export { canonicalCidr };

export type ComputeFirewall = protos.google.cloud.compute.v1.IFirewall;

export const DEFAULT_FIREWALL_PORTS = [3128];
/** GCE's default priority, sent explicitly so the echo hashes the same. */
const PRIORITY = 1000;

export const firewallConfigSchema = z.strictObject({
  sourceRanges: sourceRangesField(),
  ports: portsField().default(() => [...DEFAULT_FIREWALL_PORTS]),
  overwriteManualEdits: z.boolean({ error: 'must be true or false' }).default(false),
});

export type FirewallConfig = z.output<typeof firewallConfigSchema>;

/** A network as a rule can name it: a name, or `[projects/<p>/]global/networks/<n>`. */
const NETWORK =
  /^(?:(?:projects\/([a-z][-a-z0-9.:]{4,61}[a-z0-9])\/)?global\/networks\/)?([a-z]([-a-z0-9]{0,61}[a-z0-9])?)$/;

/**
 * The project the rule lives in (a Shared VPC network's host project) and
 * the network's path, or undefined for a network path a rule cannot name.
 */
export function ruleNetwork(config: {
  project: string;
  network: string;
}): { project: string; path: string } | undefined {
  const m = NETWORK.exec(config.network);
  if (m === null) return undefined;
  const project = m[1] ?? config.project;
  return { project, path: `projects/${project}/global/networks/${m[2]!}` };
}

/**
 * The rule's name: readable (the entry's name) and unique per installation
 * and entry (a hash of both), so two installations sharing a project never
 * share a rule. At most 59 characters, a valid GCE name.
 */
export function firewallRuleName(installation: string, entry: string): string {
  const digest = createHash('sha256').update(`${installation}\u0000${entry}`, 'utf8').digest();
  const readable = entry.slice(0, 40).replace(/-+$/, '');
  return `proxies-${readable}-${base32Lower(digest).slice(0, 10)}`;
}

export interface RuleMark {
  installation: string;
  provider: string;
  /** specHash of the fields the provider last wrote. */
  spec: string;
}

const MARK =
  /^egress-proxies firewall rule v1; installation=([^;\s]*); provider=([a-z0-9-]{1,63}); spec=([a-z2-7]{16});/;

export function formatMark(mark: RuleMark): string {
  return (
    `egress-proxies firewall rule v1; installation=${encodeURIComponent(mark.installation)}; ` +
    `provider=${mark.provider}; spec=${mark.spec}; made by the provider check of that entry: ` +
    'an edit by hand is reported and kept unless overwriteManualEdits is set'
  );
}

export function parseMark(description: string | null | undefined): RuleMark | undefined {
  const m = MARK.exec(description ?? '');
  if (m === null) return undefined;
  try {
    return { installation: decodeURIComponent(m[1]!), provider: m[2]!, spec: m[3]! };
  } catch {
    return undefined;
  }
}

/** Every field that decides what the rule lets through, normalised (order, URL forms, defaults). */
export interface RuleSpec {
  network: string;
  direction: string;
  priority: number;
  disabled: boolean;
  logging: boolean;
  sourceRanges: string[];
  destinationRanges: string[];
  sourceTags: string[];
  sourceServiceAccounts: string[];
  targetTags: string[];
  targetServiceAccounts: string[];
  allowed: string[];
  denied: string[];
}

const sorted = (v: readonly string[] | null | undefined) => [...new Set(v ?? [])].sort();

/** `tcp:3128`, `udp`...: one entry per protocol and port, sorted. */
function protocolPorts(v: { IPProtocol?: string | null; ports?: string[] | null }[] | null | undefined) {
  return sorted(
    (v ?? []).flatMap((a) => {
      const proto = (a.IPProtocol ?? '').toLowerCase();
      return (a.ports ?? []).length === 0 ? [proto] : (a.ports ?? []).map((p) => `${proto}:${p}`);
    }),
  );
}

export function specOf(rule: ComputeFirewall): RuleSpec {
  return {
    network: (rule.network ?? '').replace(/^https:\/\/[^/]+\/compute\/(?:v1|beta|alpha)\//, ''),
    direction: rule.direction ?? 'INGRESS',
    priority: rule.priority ?? PRIORITY,
    disabled: rule.disabled ?? false,
    logging: rule.logConfig?.enable ?? false,
    sourceRanges: sorted((rule.sourceRanges ?? []).map((r) => canonicalCidr(r) ?? r)),
    destinationRanges: sorted(rule.destinationRanges),
    sourceTags: sorted(rule.sourceTags),
    sourceServiceAccounts: sorted(rule.sourceServiceAccounts),
    targetTags: sorted(rule.targetTags),
    targetServiceAccounts: sorted(rule.targetServiceAccounts),
    allowed: protocolPorts(rule.allowed),
    denied: protocolPorts(rule.denied),
  };
}

export function specHash(spec: RuleSpec): string {
  return base32Lower(createHash('sha256').update(JSON.stringify(spec), 'utf8').digest()).slice(0, 16);
}

export interface DesiredRule {
  name: string;
  /** Where the rule lives: the network's project. */
  project: string;
  spec: RuleSpec;
  hash: string;
  /** The insert and update body. */
  body: ComputeFirewall;
}

/** The rule this entry wants; the caller has checked that config.firewall is set (and the network valid). */
export function desiredRule(
  config: { project: string; network: string; networkTag: string; firewall: FirewallConfig },
  installation: string,
  entry: string,
): DesiredRule {
  const where = ruleNetwork(config);
  if (where === undefined) throw new Error(`gcp.network ${config.network} cannot carry a firewall rule`);
  const name = firewallRuleName(installation, entry);
  const body: ComputeFirewall = {
    name,
    network: where.path,
    direction: 'INGRESS',
    priority: PRIORITY,
    disabled: false,
    sourceRanges: sorted(config.firewall.sourceRanges.map((r) => canonicalCidr(r) ?? r)),
    targetTags: [config.networkTag],
    allowed: [{ IPProtocol: 'tcp', ports: [...config.firewall.ports].sort((a, b) => a - b).map(String) }],
  };
  const spec = specOf(body);
  const hash = specHash(spec);
  body.description = formatMark({ installation, provider: entry, spec: hash });
  return { name, project: where.project, spec, hash, body };
}

/** The fields (RuleSpec keys) in which two specs differ. */
export function differingFields(a: RuleSpec, b: RuleSpec): string[] {
  return (Object.keys(a) as (keyof RuleSpec)[]).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}

export type Verdict =
  | { kind: 'in-sync' }
  /** Write the desired rule: the config changed, only the mark is stale, or a hand edit is to be undone. */
  | { kind: 'correct'; why: 'config' | 'mark' | 'overwrite'; differs: string[]; recreate: boolean }
  | { kind: 'edited'; differs: string[] }
  /** Another installation's or entry's mark on a rule of our name: never touched. */
  | { kind: 'foreign'; owner: RuleMark };

/** What the check does about the rule it read. */
export function judge(
  rule: ComputeFirewall,
  desired: DesiredRule,
  who: { installation: string; entry: string; overwrite: boolean },
): Verdict {
  const mark = parseMark(rule.description);
  if (mark !== undefined && (mark.installation !== who.installation || mark.provider !== who.entry))
    return { kind: 'foreign', owner: mark };
  const actual = specOf(rule);
  const differs = differingFields(actual, desired.spec);
  if (differs.length === 0)
    return mark?.spec === desired.hash
      ? { kind: 'in-sync' }
      : { kind: 'correct', why: 'mark', differs, recreate: false };
  // GCE cannot move a rule to another network: it is deleted and made again.
  const recreate = differs.includes('network');
  if (mark?.spec === specHash(actual)) return { kind: 'correct', why: 'config', differs, recreate };
  if (who.overwrite) return { kind: 'correct', why: 'overwrite', differs, recreate };
  return { kind: 'edited', differs };
}
