/**
 * The drift sweep's activity and the worker's timing for Proxy workflows.
 *
 * One sweep lists every swept provider's instances (one listByTag each,
 * under its own deadline) and every Proxy (one paged list), compares what
 * each steady Proxy's status records with what its provider lists, and
 * signals only the Proxy workflows whose instance differs. A steady fleet
 * therefore costs this one activity per sweep, whatever its size.
 */
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ProviderRegistry } from '../providers/config.js';
import { mapLimit } from '../providers/concurrency.js';
import { classOf, isProviderError } from '../providers/errors.js';
import { isUnlisted, unlistedOf, type Listing } from '../providers/types.js';
import { createProxyClient } from '../kube/proxies.js';
import type { Proxy } from '../resources/proxy-schema.js';
import { findDrift, withIdAliases, type RecordedProxy } from '../workflows/drift-sweep/compare.js';
import { proxyWorkflowId } from '../workflows/proxy/ids.js';
import { driftDetectedSignal } from '../workflows/proxy/messages.js';
import { signalProxy } from '../workflows/proxy/client.js';
import { applyCreated } from '../workflows/proxy/transitions.js';
import { buildStatus } from '../workflows/proxy/status.js';
import type { DriftReport, ProxyRef, ProxyTiming, WorkerTiming } from '../workflows/proxy/types.js';
import { withDeadline } from './deadline.js';
import type { ProviderCircuits } from './provider-circuit.js';
import type {
  CreateInstanceInput,
  CreateInstanceResult,
  DriftActivities,
  KubeActivities,
  ProviderDriftSweep,
  TimingActivities,
} from './types.js';

/** Signals sent at once by one sweep: a mass drift (a provider wiped) must not flood the frontend. */
const SIGNAL_CONCURRENCY = 16;

export type DriftSignaller = (
  workflowId: string,
  report: DriftReport,
) => Promise<'signalled' | 'not-running'>;

export interface DriftActivityDeps {
  registry: ProviderRegistry;
  kubeConfig: KubeConfig;
  logger: Logger;
  circuits: ProviderCircuits;
  /** Delivers the signal; default: the running activity's Temporal client. */
  signal?: DriftSignaller;
  /** Page size of the Proxy list. Default 500. */
  proxyPageSize?: number;
  /** A namespace-scoped install's namespaces (`--watch-namespaces`); all namespaces when unset. */
  namespaces?: readonly string[];
}

/** Whether the drift sweep covers a provider: it is on, and the provider's listByTag is cheap. */
export function isSwept(registry: ProviderRegistry, provider: string, sweepOn: boolean): boolean {
  return sweepOn && registry.get(provider)?.capabilities?.cheapListByTag === true;
}

const contextSignaller: DriftSignaller = async (workflowId, report) => {
  try {
    await signalProxy(Context.current().client, { workflowId }, driftDetectedSignal, report);
    return 'signalled';
  } catch (error) {
    // A stopped workflow: the bridge restarts it, and the new run looks for itself.
    if (error instanceof WorkflowNotFoundError) return 'not-running';
    throw error;
  }
};

function recordedOf(proxy: Proxy): RecordedProxy {
  const provisioned = proxy.status?.conditions?.find((c) => c.type === 'Provisioned');
  return {
    ref: {
      namespace: proxy.metadata.namespace ?? 'default',
      name: proxy.metadata.name,
      uid: proxy.metadata.uid ?? '',
    },
    mode: proxy.spec?.mode,
    provider: proxy.spec?.provider,
    deleting: Boolean(proxy.metadata.deletionTimestamp),
    providerID: proxy.status?.providerID,
    ip: proxy.status?.ip,
    ...(proxy.status?.expiresAt ? { expiresAt: proxy.status.expiresAt } : {}),
    ...(provisioned ? { provisioned: { status: provisioned.status, reason: provisioned.reason } } : {}),
  };
}

export function createDriftActivities(deps: DriftActivityDeps): DriftActivities {
  const proxies = createProxyClient(deps.kubeConfig);
  const log = deps.logger.child({ component: 'drift-sweep' });
  const pageSize = deps.proxyPageSize ?? 500;
  const signal = deps.signal ?? contextSignaller;

  const listProxies = async (): Promise<RecordedProxy[]> =>
    (await proxies.listAll({ namespaces: deps.namespaces, pageSize })).map(recordedOf);

  return {
    async sweepDrift({ listTimeoutMs }) {
      const names = deps.registry.names();
      const swept = names.filter((n) => isSwept(deps.registry, n, true));
      const notSwept = names.filter((n) => !swept.includes(n));
      const listings = await Promise.all(
        swept.map(async (name) => {
          try {
            const instances = await withDeadline<Listing>(
              listTimeoutMs,
              // A listing the provider made recently may answer, within its own read budget
              // (the gcp provider's listCallsPerVmHour); nothing beyond that.
              (abort) => deps.registry.get(name)!.listByTag(abort, { reuse: { withinMs: 0 } }),
              () => new Error(`listByTag did not answer within ${listTimeoutMs} ms`),
            );
            if (!Array.isArray(instances)) throw new Error('listByTag returned a non-array');
            deps.circuits.record(name, 'ok');
            return { name, instances, error: undefined, errorClass: undefined };
          } catch (error) {
            deps.circuits.record(name, error);
            const message = isProviderError(error) ? error.message : (error as Error).message;
            log.warn({ provider: name, error: message }, 'drift sweep: listing failed; provider skipped');
            return { name, instances: undefined, error: message, errorClass: classOf(error) };
          }
        }),
      );
      const results: ProviderDriftSweep[] = listings.map((l) => ({
        provider: l.name,
        compared: 0,
        drifted: 0,
        signalled: 0,
        ...(l.instances ? { listed: l.instances.length } : { error: l.error, errorClass: l.errorClass }),
        ...(l.instances && unlistedOf(l.instances).length > 0
          ? { unlisted: unlistedOf(l.instances).map((u) => u.target) }
          : {}),
      }));
      if (!listings.some((l) => l.instances)) return { providers: results, notSwept };

      let proxies: RecordedProxy[];
      try {
        proxies = await listProxies();
      } catch (error) {
        const message = (error as Error).message;
        log.warn({ error: message }, 'drift sweep: listing Proxies failed; nothing compared');
        return { providers: results, notSwept, proxyListError: message };
      }
      for (const [i, listing] of listings.entries()) {
        if (!listing.instances) continue;
        const result = results[i]!;
        const provider = deps.registry.get(listing.name);
        // Proxies on a part the provider could not list (a host that is down) are not compared:
        // their instances are unknown, not gone.
        const listed = listing.instances;
        const comparable = proxies.filter(
          (p) => p.provider !== listing.name || !isUnlisted(listed, p.providerID),
        );
        if (comparable.length < proxies.length)
          log.warn(
            { provider: listing.name, unlisted: unlistedOf(listed).map((u) => u.target) },
            'drift sweep: part of the provider could not be listed; its Proxies are not compared',
          );
        const { compared, drifted } = findDrift(
          listing.name,
          comparable,
          withIdAliases(
            listing.instances.map((x) => ({
              id: x.id,
              state: x.state,
              ...(x.ip ? { ip: x.ip } : {}),
              ...(x.expiresAt instanceof Date ? { expiresAt: x.expiresAt.toISOString() } : {}),
            })),
            provider?.idAliases?.bind(provider),
          ),
        );
        result.compared = compared;
        result.drifted = drifted.length;
        await mapLimit(drifted, SIGNAL_CONCURRENCY, async (d) => {
          const proxy = `${d.ref.namespace}/${d.ref.name}`;
          try {
            const outcome = await signal(proxyWorkflowId(d.ref), d.report);
            if (outcome === 'signalled') result.signalled += 1;
            log.info(
              { provider: listing.name, proxy, instance: d.report.instanceId, why: d.why, outcome },
              'drift sweep: instance differs from its recorded state',
            );
          } catch (error) {
            log.warn(
              { provider: listing.name, proxy, error: (error as Error).message },
              'drift signal failed',
            );
          }
        });
      }
      log.debug({ providers: results, notSwept }, 'drift sweep done');
      return { providers: results, notSwept };
    },
  };
}

export interface TimingActivityDeps {
  registry: ProviderRegistry;
  timing: ProxyTiming;
  /** Whether the drift sweep runs (its interval is not 0). */
  sweepOn: boolean;
  /** The provider activities' create, for a quick provider's create at a run's start; none when absent. */
  createInstance?: (input: CreateInstanceInput) => Promise<CreateInstanceResult>;
  /** The kube activities' status write, for the status that create leaves; none when absent. */
  writeProxyStatus?: KubeActivities['writeProxyStatus'];
  logger?: Logger;
  /** How long a create at the start (and its status write) may take before the workflow is left to do it (default 5 s). */
  createAtStartMs?: number;
}

export function createTimingActivities(deps: TimingActivityDeps): TimingActivities {
  const log = deps.logger?.child({ component: 'timing-activities' });
  const deadlineMs = deps.createAtStartMs ?? 5_000;

  /**
   * What `work` gives by `deadlineAtMs`, or nothing: a failure is the
   * workflow's to meet (it creates or writes again, through the activities
   * with their own timeouts and retries, and shows the error), and work
   * still running at the deadline is left to finish on its own (a create
   * adopts by name, so the workflow's finds it; a status write is pinned to
   * the version it was built on, so landing late it replaces nothing newer):
   * this activity's own timeout and endless retries are the timing's, not a
   * create's.
   */
  async function byDeadline<T>(
    what: string,
    ref: ProxyRef,
    deadlineAtMs: number,
    work: Promise<T>,
  ): Promise<T | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>(
      (resolve) => (timer = setTimeout(() => resolve(undefined), Math.max(0, deadlineAtMs - Date.now()))),
    );
    try {
      return await Promise.race([work, late]);
    } catch (error) {
      log?.debug(
        { proxy: `${ref.namespace}/${ref.name}`, error: (error as Error).message },
        `${what} at the start failed; the workflow does it itself`,
      );
      return undefined;
    } finally {
      clearTimeout(timer);
      work.catch(() => undefined);
    }
  }

  return {
    async proxyTiming({ provider, create, report }) {
      const timing: WorkerTiming = {
        ...deps.timing,
        swept: isSwept(deps.registry, provider, deps.sweepOn),
        quickCreate: deps.registry.get(provider)?.capabilities?.quickCreate === true,
      };
      if (create === undefined || !timing.quickCreate || !deps.createInstance) return timing;
      const deadlineAtMs = Date.now() + deadlineMs;
      const created = await byDeadline('create', create.ref, deadlineAtMs, deps.createInstance(create));
      if (!created) return timing;
      if (!report || !deps.writeProxyStatus) return { ...timing, created };
      // The workflow's own rules on (a copy of) its own state: the status it
      // would write next, and will find written.
      const { state, previous, resourceVersion } = report;
      applyCreated(state, created, Date.now(), timing);
      const status = buildStatus(state, new Date());
      const outcome = await byDeadline(
        'status write',
        state.ref,
        deadlineAtMs,
        deps.writeProxyStatus({ ref: state.ref, status, resourceVersion, ...(previous ? { previous } : {}) }),
      );
      // 'stale': something wrote to the Proxy since the bridge read it (an
      // edit, another writer): the run writes from what it reads.
      return outcome === 'written' || outcome === 'gone'
        ? { ...timing, created, reported: { outcome, status } }
        : { ...timing, created };
    },
  };
}
