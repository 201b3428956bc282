/** What crawlers do, for the pool and drain tests: lease through the API, and CONNECT through a proxy. */
import { request } from 'node:http';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { ProxyClient } from '../../kube/proxies.js';
import { createProxyPoolClient, poolSelector, type ProxyPoolClient } from '../../kube/proxy-pools.js';
import { startControlPlane, type ControlPlane } from './control-plane.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from './cli.js';
import { startProbeTarget, type ProbeTarget } from './prober-fixtures.js';
import { eventually } from './temporal.js';

export interface LeasedProxy {
  id: string;
  ip: string;
  port: number;
  pool?: string;
  draining?: boolean;
  healthy: boolean;
  activeLeases: number;
}

export interface LeaseAnswer {
  status: number;
  body: { leaseID: string; proxy: LeasedProxy };
}

export function leaseApi(baseUrl: string) {
  return {
    async acquire(body: {
      pool?: string;
      selector?: Record<string, string>;
      ttlSeconds?: number;
      target?: string;
    }): Promise<LeaseAnswer> {
      const res = await fetch(`${baseUrl}/v1/leases`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as LeaseAnswer['body'] };
    },
    async release(leaseID: string): Promise<number> {
      const res = await fetch(`${baseUrl}/v1/leases/${leaseID}`, { method: 'DELETE' });
      await res.arrayBuffer();
      return res.status;
    },
  };
}

/**
 * The status line's code of a CONNECT through the proxy at ip:port to
 * 127.0.0.1:targetPort, or 0 when the proxy cannot be reached at all (the
 * address is gone) or does not answer within `timeoutMs`.
 */
export function connectThrough(
  ip: string,
  port: number,
  targetPort: number,
  timeoutMs = 5_000,
): Promise<number> {
  return new Promise((resolve) => {
    const req = request({
      host: ip,
      port,
      method: 'CONNECT',
      path: `127.0.0.1:${targetPort}`,
      timeout: timeoutMs,
      agent: false,
    });
    const done = (code: number) => {
      req.destroy();
      resolve(code);
    };
    req.on('connect', (res, socket) => {
      socket.destroy();
      done(res.statusCode ?? 0);
    });
    req.on('response', (res) => done(res.statusCode ?? 0));
    req.on('timeout', () => done(0));
    req.on('error', () => done(0));
    req.end();
  });
}

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
