/**
 * The managed firewall rule of an entry with `gcp.firewall` (issue 51).
 * The provider check reads it (one firewalls.get a check), creates it when
 * missing and corrects it when the config changed, and reports a rule
 * someone edited by hand (overwritten only with overwriteManualEdits). A
 * change waits on its global operation for a bounded time, so the check
 * reports how it ended; the rule is its own ProviderHealth target,
 * `firewall/<rule>`. Orphan GC's part is firewall-collect.ts.
 *
 * Corrections replace the rule (firewalls.update, a PUT) rather than patch
 * it: the client library drops empty lists from a request, so a merge
 * patch could never clear a field a hand edit added (sourceTags...).
 */
import { CallEnded } from '../shared/bounded-call.js';
import type { Operations } from '../shared/operation.js';
import type { TargetStatus } from '../types.js';
import { CredentialsError } from './auth.js';
import { checkReason, classify, httpStatus, notFoundResource } from './classify.js';
import type { ComputeClient, Operation } from './compute-client.js';
import type { GcpConfig } from './config.js';
import { collectFirewallRules } from './firewall-collect.js';
import {
  desiredRule,
  judge,
  type ComputeFirewall,
  type DesiredRule,
  type FirewallConfig,
} from './firewall-rule.js';

/** How long a check waits on the operation of a change it made, by default (the check's own deadline may cut it short). */
export const OPERATION_WAIT_MS = 8_000;

type Change = 'insert' | 'update' | 'delete';
type Outcome =
  | { state: 'done' }
  | { state: 'pending'; operation: string }
  | { state: 'failed'; operation: string; codes: string[] };
type Verdict = (
  ready: boolean,
  reason: string,
  message: string,
  more?: Record<string, string>,
) => TargetStatus;

export interface FirewallsDeps {
  compute: ComputeClient;
  ops: Operations;
  config: GcpConfig;
  firewall: FirewallConfig;
  /** This entry, as `entries` lists it. */
  entry: { name: string; type: string };
  /** The installation the worker serves (ProviderDeps); absent, the rule is not managed. */
  installation: string | undefined;
  /** Every configured entry (ProviderDeps); absent, GC collects no rule. */
  entries: readonly { name: string; type: string }[] | undefined;
  /** How long a check waits on a change's operation (default OPERATION_WAIT_MS); longer: Pending. */
  operationWaitMs?: number;
}

/** A change's target: `reason` when it is done, else Pending or how its operation failed. */
function report(
  verdict: Verdict,
  reason: string,
  message: string,
  outcome: Outcome,
  more: Record<string, string> = {},
): TargetStatus {
  if (outcome.state === 'done') return verdict(true, reason, message, more);
  const op = outcome.operation;
  if (outcome.state === 'pending')
    return verdict(false, 'Pending', `operation ${op} still running; the next check looks again`);
  return verdict(false, 'APIError', `operation ${op} failed: ${outcome.codes.join(', ') || 'unknown error'}`);
}

/** A failed call as the target's reason and message (identifiers only, as check.ts). */
function failure(err: unknown, signal: AbortSignal): { reason: string; message: string } {
  const ended = err instanceof CallEnded;
  const reason = checkReason(err, ended || signal.aborted);
  const hint =
    reason === 'Forbidden'
      ? '; the identity needs compute.firewalls.get, .create, .update and .delete (docs/providers/gcp.md)'
      : '';
  const message = ended
    ? err.message
    : err instanceof CredentialsError
      ? `credentials: ${err.message}`
      : `firewall rule: ${classify(err).summary}${hint}`;
  return { reason, message };
}

export class Firewalls {
  constructor(private readonly deps: FirewallsDeps) {}

  private desired(installation: string): DesiredRule {
    const { config, firewall, entry } = this.deps;
    return desiredRule({ ...config, firewall }, installation, entry.name);
  }

  /** The rule's target for check(); never throws. */
  async check(signal: AbortSignal): Promise<TargetStatus> {
    const started = Date.now();
    const address = this.deps.compute.address();
    const { installation } = this.deps;
    if (installation === undefined) {
      const message =
        'built without an installation (ProviderDeps.installation): this provider manages no rule';
      return { name: 'firewall', address, ready: false, reason: 'Unmanaged', message };
    }
    const desired = this.desired(installation);
    const details = {
      rule: desired.name,
      project: desired.project,
      network: desired.spec.network,
      sourceRanges: desired.spec.sourceRanges.join(','),
      allowed: desired.spec.allowed.join(','),
    };
    const verdict: Verdict = (ready, reason, message, more = {}) => ({
      name: `firewall/${desired.name}`,
      address,
      ready,
      reason,
      message,
      latencyMillis: Date.now() - started,
      details: { ...details, ...more },
    });
    try {
      return await this.reconcile(desired, installation, verdict, signal);
    } catch (err) {
      const { reason, message } = failure(err, signal);
      this.deps.ops.log.debug(
        { rule: desired.name, reason, httpStatus: httpStatus(err) },
        'firewall check failed',
      );
      return verdict(false, reason, message);
    }
  }

  /** Reads the rule and does what it needs: nothing, create, correct, or report. */
  private async reconcile(
    desired: DesiredRule,
    installation: string,
    verdict: Verdict,
    signal: AbortSignal,
  ): Promise<TargetStatus> {
    const rule = await this.get(desired, signal);
    if (rule === undefined)
      return report(verdict, 'Created', 'created', await this.change('insert', desired, signal));
    const overwrite = this.deps.firewall.overwriteManualEdits;
    const found = judge(rule, desired, { installation, entry: this.deps.entry.name, overwrite });
    switch (found.kind) {
      case 'in-sync':
        return verdict(true, 'InSync', 'the rule is as configured');
      case 'foreign': {
        const { installation: other, provider } = found.owner;
        const message = `the rule of this name carries the mark of installation ${other}, entry ${provider}; left alone`;
        return verdict(false, 'NotOurs', message);
      }
      case 'edited': {
        const message = `the rule was edited by hand (${found.differs.join(', ')}); not overwritten: undo the edit, or set gcp.firewall.overwriteManualEdits`;
        return verdict(false, 'EditedByHand', message, { differs: found.differs.join(',') });
      }
      case 'correct': {
        const differs = { differs: found.differs.join(',') };
        if (found.recreate) {
          const outcome = await this.change('delete', desired, signal);
          if (outcome.state === 'failed') return report(verdict, 'Recreating', '', outcome);
          const message =
            'the network changed: the rule on the old one is deleted, the next check makes it again';
          return verdict(false, 'Recreating', message, differs);
        }
        const outcome = await this.change('update', desired, signal);
        if (found.why === 'overwrite')
          return report(verdict, 'Overwritten', 'the edit by hand was overwritten', outcome, differs);
        return report(verdict, 'Updated', 'updated to the configuration', outcome, differs);
      }
    }
  }

  /** The rule, or undefined when Compute says this very rule does not exist. */
  private async get(desired: DesiredRule, signal: AbortSignal): Promise<ComputeFirewall | undefined> {
    const { compute } = this.deps;
    const { firewalls } = await compute.firewallApi();
    try {
      const [rule] = await compute.call(signal, 'check', 'firewalls.get', () =>
        firewalls.get({ project: desired.project, firewall: desired.name }, compute.callOptions),
      );
      return rule;
    } catch (err) {
      if (notFoundResource(err) === `projects/${desired.project}/global/firewalls/${desired.name}`)
        return undefined;
      throw err;
    }
  }

  /** Submits one change and waits on its operation, within OPERATION_WAIT_MS. */
  private async change(kind: Change, desired: DesiredRule, signal: AbortSignal): Promise<Outcome> {
    const { compute, ops } = this.deps;
    const { firewalls } = await compute.firewallApi();
    const { project, name } = { project: desired.project, name: desired.name };
    const opts = compute.callOptions;
    const lro = await compute.call(signal, 'check', `firewalls.${kind}`, () =>
      kind === 'insert'
        ? firewalls.insert({ project, firewallResource: desired.body }, opts).then(([l]) => l)
        : kind === 'update'
          ? firewalls
              .update({ project, firewall: name, firewallResource: desired.body }, opts)
              .then(([l]) => l)
          : firewalls.delete({ project, firewall: name }, opts).then(([l]) => l),
    );
    const op = (lro as { latestResponse?: Operation }).latestResponse ?? {};
    ops.log.info({ rule: name, project, operation: op.name }, `firewall rule: ${kind} submitted`);
    return this.outcome(project, op, signal);
  }

  private async outcome(project: string, first: Operation, signal: AbortSignal): Promise<Outcome> {
    const { compute } = this.deps;
    const name = first.name ?? '';
    let op = first;
    if (op.status !== 'DONE') {
      const { globalOperations } = await compute.firewallApi();
      try {
        [op] = await compute.call(
          signal,
          'check',
          'globalOperations.wait',
          () => globalOperations.wait({ project, operation: name }, compute.callOptions),
          this.deps.operationWaitMs ?? OPERATION_WAIT_MS,
        );
      } catch (err) {
        if (err instanceof CallEnded) return { state: 'pending', operation: name };
        throw err;
      }
    }
    if (op.status !== 'DONE') return { state: 'pending', operation: name };
    const codes = (op.error?.errors ?? [])
      .map((e) => e.code ?? '')
      .filter((c) => /^[A-Z][A-Z0-9_]{0,63}$/.test(c));
    if (codes.length === 0 && !op.error) return { state: 'done' };
    this.deps.ops.log.warn({ operation: name, codes }, 'firewall rule operation failed');
    return { state: 'failed', operation: name, codes };
  }

  /**
   * Orphan GC's part: this installation's rules of entries no longer
   * configured, in this rule's project. Never throws. Nothing without an
   * installation or the configured entries: with no list of what is
   * configured, every rule would look orphaned.
   */
  async collect(signal: AbortSignal): Promise<void> {
    const { compute, ops, entry, installation, entries } = this.deps;
    if (installation === undefined || entries === undefined) {
      ops.log.debug('firewall rules not collected: no installation or configured entries given');
      return;
    }
    const project = this.desired(installation).project;
    await collectFirewallRules({ compute, ops, entry, project, installation, entries }, signal);
  }
}
