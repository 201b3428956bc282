/**
 * One run of a Proxy's workflow: its state (carried across
 * continue-as-new) and what lives only as long as the run, and the signal
 * handlers. Signals only change the state and wake the loop; they never
 * call activities, so the loop (loop.ts, deletion.ts) is the one actor and
 * nothing interleaves. The rules are transitions.ts's; this keeps the flags.
 */
import { log } from '@temporalio/workflow';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import {
  applyDeletion,
  applyDrift,
  applyHealth,
  applyLeasesDrained,
  applySpec,
  initialState,
} from './transitions.js';
import type {
  DesiredSpec,
  DriftReport,
  HealthReport,
  LeasesDrainedReport,
  ProxyState,
  ProxyWorkflowInput,
} from './types.js';
import type { SteadyTimer } from './waits.js';

export class ProxyEntity {
  readonly state: ProxyState;
  /** A continued run carries its state; only a fresh one has anything to learn (the recorded status). */
  readonly fresh: boolean;
  /** A signal changed something the loop acts on: the current wait ends (waits.ts clears it). */
  woken = false;
  /**
   * A report that names an address this run does not know yet, kept while
   * the create at the start is out: its status (with the address) is
   * written inside that local activity, so a prober can read it and report
   * before the run has the result (a workflow task heartbeated while the
   * activity runs delivers signals). Applied once the create is taken.
   */
  earlyHealth: HealthReport | undefined;
  createAtStartOut = false;
  /**
   * What the Proxy's status holds as far as this run knows, sent with each
   * write so its Events need no read: what the run started from, then what
   * it wrote. Unknown (undefined) when the start could not be read, or a
   * write failed (it may have landed).
   */
  knownStatus: ProxyStatus | undefined;
  /** The steady wait's timer, kept across wake-ups that do not move its deadline (waits.ts). */
  steadyTimer: SteadyTimer | undefined;

  constructor(readonly input: ProxyWorkflowInput) {
    this.state = input.carried ?? initialState(input);
    this.fresh = input.carried === undefined;
  }

  specChanged(desired: DesiredSpec): void {
    if (applySpec(this.state, desired)) this.woken = true;
  }

  deletionRequested(request: { skipCleanup: boolean }): void {
    if (applyDeletion(this.state, request)) this.woken = true;
  }

  healthChanged(report: HealthReport): void {
    if (applyHealth(this.state, report)) this.woken = true;
    else if (this.createAtStartOut && this.state.instanceId === undefined) this.earlyHealth = report;
  }

  driftDetected(report: DriftReport): void {
    if (applyDrift(this.state, report)) this.woken = true;
  }

  leasesDrained(report: LeasesDrainedReport): void {
    if (applyLeasesDrained(this.state, report)) this.woken = true;
  }

  /**
   * The Proxy with this UID no longer exists (deleted while no bridge was
   * watching, or its finalizer was removed by hand): nobody will signal the
   * deletion, so the run cleans up and ends by itself.
   */
  proxyGone(): void {
    if (applyDeletion(this.state, { skipCleanup: false })) {
      log.warn('the Proxy is gone; deleting its instance and ending', { proxy: this.state.ref });
      this.woken = true;
    }
  }
}
