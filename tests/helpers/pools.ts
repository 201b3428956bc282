/** The pool and drain tests' harness; what crawlers do is in crawler.ts. */
import type { Proxy } from '../../resources/proxy-schema.js';
import type { ProxyClient } from '../../kube/proxies.js';
import { createProxyPoolClient, poolSelector, type ProxyPoolClient } from '../../kube/proxy-pools.js';
import { startControlPlane, type ControlPlane } from './control-plane.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from './cli.js';
import { startProbeTarget, type ProbeTarget } from './prober-fixtures.js';
import { eventually } from './temporal.js';

export { authorizationOf, connectThrough, leaseApi, type LeaseAnswer, type LeasedProxy } from './crawler.js';

/**
 * What the pool tests run on: this file's control plane (worker and bridge,
 * `local` provider), a probe target, the real CLI `api` process watching
 * only the plane's namespace, and the typed clients.
 */
export interface PoolHarness {
  cp: ControlPlane;
  target: ProbeTarget;
  api: CliProcess;
  apiUrl: string;
  proxies: ProxyClient;
  pools: ProxyPoolClient;
  /** The Proxies carrying the pool's label (members, and any on their way out). */
  members(pool: string): Promise<Proxy[]>;
  /** Deletes the pool and waits until no member and no instance of one is left. */
  deletePoolAndWait(pool: string, timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

export async function startPoolHarness(
  prefix: string,
  options: Omit<Parameters<typeof startControlPlane>[0], 'prefix'> & {
    /** More flags for the `api` process (e.g. `--pool-demand-interval`). */
    apiArgs?: string[];
    /** The provider the pools' members are made on (default `local`). */
    provider?: string;
  } = {},
): Promise<PoolHarness> {
  const { apiArgs = [], provider = 'local', ...planeOptions } = options;
  const cp = await startControlPlane({ prefix, ...planeOptions });
  const target = await startProbeTarget();
  const proxies = cp.api;
  const pools = createProxyPoolClient(cp.kc);
  // Only this file's namespace: its prober must not probe and signal other tests' Proxies.
  const api = startCli([
    'api',
    '--discovery-addr',
    '127.0.0.1:0',
    ...testServerArgs(),
    '--watch-namespaces',
    cp.namespace,
    ...apiArgs,
  ]);
  const apiUrl = await leaseApiUrl(api, 150_000);
  const members = async (pool: string): Promise<Proxy[]> =>
    (await proxies.list(cp.namespace, { labelSelector: poolSelector(pool) })).items;
  return {
    cp,
    target,
    api,
    apiUrl,
    proxies,
    pools,
    members,
    async deletePoolAndWait(pool, timeoutMs) {
      const uids = (await members(pool)).map((m) => m.metadata.uid!);
      await pools.delete(cp.namespace, pool);
      await eventually(
        `pool ${pool}: every member and instance gone`,
        async () => {
          if ((await members(pool)).length > 0) return undefined;
          for (const uid of uids) if ((await cp.instancesOf(uid, provider)).length > 0) return undefined;
          return true;
        },
        { timeoutMs, intervalMs: 500 },
      );
    },
    async close() {
      await api.stop(30_000).catch(() => undefined);
      await cp.close();
      await target.close();
    },
  };
}
