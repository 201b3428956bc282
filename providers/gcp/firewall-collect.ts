/**
 * Orphan GC of managed firewall rules (issue 51): run by the listing of
 * every gcp entry with `gcp.firewall` when orphan GC calls it (listByTag's
 * `collectOrphans`), one paged firewalls.list of the project its rule
 * lives in. The installation and the configured entries are the worker's,
 * given to the provider when it was built (ProviderDeps). A rule is
 * deleted when it carries this installation's mark, has the name that mark
 * would give it (a copied description proves nothing), names an entry that
 * is no longer a configured gcp entry, and is older than GC's minimum age
 * (a worker with a newer config may have just made it). Never throws: the
 * listing it rides on must not fail for it.
 */
import type { Operations } from '../shared/operation.js';
import { notFoundResource } from './classify.js';
import type { ComputeClient } from './compute-client.js';
import { firewallRuleName, parseMark, type ComputeFirewall } from './firewall-rule.js';

/** GC's default minimum age, for rules as for instances. */
export const COLLECT_MIN_AGE_MS = 10 * 60_000;

export interface CollectDeps {
  compute: ComputeClient;
  ops: Operations;
  /** The entry collecting: rules of entries of its type are judged against the configured ones. */
  entry: { name: string; type: string };
  /** The project its own rule lives in. */
  project: string;
  /** Only this installation's rules are collected. */
  installation: string;
  /** Every configured entry: rules of the gcp ones are kept. */
  entries: readonly { name: string; type: string }[];
}

export async function collectFirewallRules(deps: CollectDeps, signal: AbortSignal): Promise<void> {
  const { compute, ops, entry, project, installation } = deps;
  const configured = new Set(deps.entries.filter((e) => e.type === entry.type).map((e) => e.name));
  let rules: ComputeFirewall[];
  try {
    rules = await list(deps, signal);
  } catch (err) {
    const c = compute.logApiError('list', '', err);
    ops.log.warn({ project, error: c.summary }, 'firewall rules not collected; tried again next sweep');
    return;
  }
  for (const rule of rules) {
    const mark = parseMark(rule.description);
    if (mark?.installation !== installation) continue;
    if (rule.name !== firewallRuleName(mark.installation, mark.provider)) continue;
    if (configured.has(mark.provider)) continue;
    const created = Date.parse(rule.creationTimestamp ?? '');
    if (!Number.isNaN(created) && Date.now() - created < COLLECT_MIN_AGE_MS) {
      ops.log.info(
        { rule: rule.name, entry: mark.provider },
        'firewall rule of an unconfigured entry: too young',
      );
      continue;
    }
    ops.log.warn(
      { rule: rule.name, project, entry: mark.provider },
      'WARNING: deleting the firewall rule of a provider entry no longer configured',
    );
    await remove(deps, rule.name, signal);
  }
}

async function remove(deps: CollectDeps, name: string, signal: AbortSignal): Promise<void> {
  const { compute, ops, project } = deps;
  try {
    const { firewalls } = await compute.firewallApi();
    await compute.call(signal, 'list', 'firewalls.delete', () =>
      firewalls.delete({ project, firewall: name }, compute.callOptions),
    );
  } catch (err) {
    if (notFoundResource(err) === `projects/${project}/global/firewalls/${name}`) return;
    const c = compute.logApiError('list', name, err);
    ops.log.warn(
      { rule: name, project, error: c.summary },
      'deleting a firewall rule failed; tried again next sweep',
    );
  }
}

/** Every rule of the project: one bounded call walking the list's pages. */
async function list(deps: CollectDeps, signal: AbortSignal): Promise<ComputeFirewall[]> {
  const { compute, project } = deps;
  const { firewalls } = await compute.firewallApi();
  const out: ComputeFirewall[] = [];
  let stop = false;
  const walk = async () => {
    const rules = firewalls.listAsync(
      { project, maxResults: 500 },
      { ...compute.callOptions, autoPaginate: false },
    );
    for await (const rule of rules) {
      if (stop) return;
      out.push(rule);
    }
  };
  try {
    await compute.call(signal, 'list', 'firewalls.list', walk, compute.callTimeoutMs * 4);
  } finally {
    stop = true;
  }
  return out;
}
