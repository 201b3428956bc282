/**
 * One line per proxy the lease API lists: its id, endpoint, attributes, and
 * the egress IP an IP-echo target saw through it, or why that failed. Under
 * `dev` the echo is the one in the banner, and each `local` proxy shows its
 * own loopback address; against a real fleet, point it at a plain-http://
 * IP-echo endpoint the proxies can reach (https:// is not supported yet).
 *
 *   npx tsx cli/show-egress-ips.ts [--api URL] [--echo URL] [--connect]
 *
 * Defaults: the dev lease API http://127.0.0.1:8090 and the dev echo
 * http://127.0.0.1:8091/ (the banner says which ports `dev` took).
 * TOKEN in the environment is sent as the lease API's bearer token. Exit
 * status 1 when any proxy failed, 2 when the list could not be read.
 *
 * Proxies ask for credentials, and only a lease hands them out (its
 * `proxyURL`): the script leases every proxy it can for a few seconds
 * (leasing until the API has none left), goes through each with its
 * lease's credentials, and releases them all. A proxy it could not lease
 * (unhealthy, at capacity) is tried without, which only a proxy asking for
 * none answers.
 */
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { mapLimit } from '../providers/concurrency.js';
import { egressIpThrough, fromProxyUrl } from './egress-ip.js';

export interface EgressRow {
  id: string;
  endpoint: string;
  attributes: string;
  /** The address the echo saw, or undefined when `failure` says why not. */
  egressIp?: string;
  failure?: string;
}

interface ListedProxy {
  id: string;
  ip: string;
  port: number;
  attributes?: Record<string, string>;
  healthy: boolean;
  phase: string;
}

export interface ShowEgressOptions {
  apiUrl: string;
  echoUrl: string;
  via?: 'absolute' | 'connect';
  token?: string;
  timeoutMs?: number;
}

/** Reads the proxy list and probes every proxy with an address through the echo (8 at a time). */
export async function egressRows(options: ShowEgressOptions): Promise<EgressRow[]> {
  const listUrl = new URL('/v1/proxies', options.apiUrl);
  const res = await fetch(listUrl, {
    headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
    signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
  }).catch((error: unknown) => {
    // fetch says only "fetch failed"; the reason (ECONNREFUSED...) is its cause.
    const cause = (error as { cause?: { message?: unknown } }).cause?.message;
    throw new Error(`GET ${listUrl.href}: ${typeof cause === 'string' ? cause : String(error)}`);
  });
  if (res.status !== 200) throw new Error(`GET ${listUrl.href}: HTTP ${res.status} ${await res.text()}`);
  const { proxies } = (await res.json()) as { proxies: ListedProxy[] };
  const leases = await leaseEveryProxy(options);
  try {
    return await mapLimit(proxies, 8, (p) => egressRow(p, options, leases.urls.get(p.id)));
  } finally {
    await leases.release();
  }
}

/** One proxy's row: through it (with its lease's credentials, when it was leased) to the echo. */
async function egressRow(p: ListedProxy, options: ShowEgressOptions, proxyURL?: string): Promise<EgressRow> {
  const row = {
    id: p.id,
    endpoint: p.ip ? `${p.ip}:${p.port}` : '-',
    attributes:
      Object.entries(p.attributes ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(',') || '-',
  };
  if (!p.ip) return { ...row, failure: `no address yet (${p.phase})` };
  const credentials = proxyURL ? fromProxyUrl(proxyURL).proxyAuthorization : undefined;
  try {
    const egressIp = await egressIpThrough(p.ip, p.port, options.echoUrl, {
      via: options.via,
      timeoutMs: options.timeoutMs,
      ...(credentials ? { proxyAuthorization: credentials } : {}),
    });
    return { ...row, egressIp };
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    return { ...row, failure: `FAILED: ${why}${p.healthy ? '' : ' (unhealthy)'}` };
  }
}

/**
 * Leases until the lease API grants no more (each lease goes to the least
 * loaded proxy, so every leasable one is reached), keeping each proxy's
 * first proxyURL. At most 4096 leases, 30 s each, all released after.
 */
async function leaseEveryProxy(
  options: ShowEgressOptions,
): Promise<{ urls: Map<string, string>; release(): Promise<void> }> {
  const headers = {
    'content-type': 'application/json',
    ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
  };
  const urls = new Map<string, string>();
  const held: string[] = [];
  for (let i = 0; i < 4096; i++) {
    const res = await fetch(new URL('/v1/leases', options.apiUrl), {
      method: 'POST',
      headers,
      body: '{"ttlSeconds":30}',
      signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
    });
    if (res.status !== 201) {
      await res.body?.cancel();
      break;
    }
    const lease = (await res.json()) as { leaseID: string; proxy: { id: string }; proxyURL?: string };
    held.push(lease.leaseID);
    if (lease.proxyURL && !urls.has(lease.proxy.id)) urls.set(lease.proxy.id, lease.proxyURL);
  }
  return {
    urls,
    release: async () => {
      await mapLimit(held, 8, async (id) => {
        const res = await fetch(new URL(`/v1/leases/${encodeURIComponent(id)}`, options.apiUrl), {
          method: 'DELETE',
          headers,
          signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
        }).catch(() => undefined);
        await res?.body?.cancel();
      });
    },
  };
}

/** The rows as an aligned table, header first. */
export function formatRows(rows: readonly EgressRow[]): string[] {
  const table = [
    ['PROXY', 'ENDPOINT', 'ATTRIBUTES', 'EGRESS-IP'],
    ...rows.map((r) => [r.id, r.endpoint, r.attributes, r.egressIp ?? r.failure ?? '']),
  ];
  const widths = [0, 1, 2].map((i) => Math.max(...table.map((cells) => cells[i]!.length)));
  return table.map((cells) => cells.map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c)).join('  '));
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      api: { type: 'string', default: 'http://127.0.0.1:8090' },
      echo: { type: 'string', default: 'http://127.0.0.1:8091/' },
      connect: { type: 'boolean', default: false },
    },
  });
  let rows: EgressRow[];
  try {
    rows = await egressRows({
      apiUrl: values.api,
      echoUrl: values.echo,
      via: values.connect ? 'connect' : 'absolute',
      token: process.env.TOKEN,
    });
  } catch (error) {
    process.stderr.write(
      `show-egress-ips: cannot list proxies from ${values.api}: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return 2;
  }
  process.stdout.write(formatRows(rows).join('\n') + '\n');
  const failed = rows.filter((r) => r.egressIp === undefined).length;
  process.stdout.write(`-- ${rows.length - failed} of ${rows.length} answered through their proxy --\n`);
  return failed > 0 ? 1 : 0;
}

// Run as a script, not when imported (tests use egressRows).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`show-egress-ips: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(2);
    },
  );
}
