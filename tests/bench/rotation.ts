/**
 * Rotation by age (issue 31), on the real control plane.
 *
 *   npm run bench:rotation -- [--replicas 10] [--max-age 300s] [--duration 20m] [--max-surge 1]
 *                             [--outage-at 5m --outage 10m]
 *
 * A ProxyPool (local provider) with `rotation.maxAgeSeconds`, watched every
 * 2 s for --duration: members live (not deleting), members available
 * (Ready, not draining) and proxies leasable through the lease API
 * (`GET /v1/proxies?pool=`, healthy and not draining). Prints how many
 * rotations happened (and per member), the most members live at once and
 * the fewest available and leasable.
 *
 * With --outage-at, the provider's state directory is taken away for
 * --outage (its checks fail, ProviderHealth Ready False): prints rotations
 * during the outage (0 expected), the pool's ProviderReady condition, and
 * how long after the outage rotation resumed.
 */
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parseDuration } from '../../api/config.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { sampleLoad, startBenchPlane, waitUntil } from './plane.js';

const { values: args } = parseArgs({
  options: {
    replicas: { type: 'string', default: '10' },
    'max-age': { type: 'string', default: '300s' },
    duration: { type: 'string', default: '20m' },
    'max-surge': { type: 'string', default: '1' },
    'outage-at': { type: 'string' },
    outage: { type: 'string', default: '10m' },
  },
});
const REPLICAS = Number(args.replicas);
const MAX_AGE_S = parseDuration(args['max-age']) / 1000;
const DURATION_MS = parseDuration(args.duration);
const MAX_SURGE = Number(args['max-surge']);
const OUTAGE_AT_MS = args['outage-at'] ? parseDuration(args['outage-at']) : undefined;
const OUTAGE_MS = parseDuration(args.outage);

// Look again at least every 5 s while paused (the default 30 s would only delay the resume figure).
const plane = await startBenchPlane({ name: 'rotation', poolTiming: { progressPollMs: 5_000 } });
const name = 'aging';
const load = sampleLoad();
try {
  await plane.checkProviders();
  await plane.pools.create(plane.namespace, name, {
    replicas: REPLICAS,
    template: {
      spec: {
        mode: 'Managed',
        provider: 'local',
        healthCheck: { probeURL: plane.targetUrl, intervalSeconds: 5, timeoutSeconds: 2 },
      },
    },
    strategy: { maxSurge: MAX_SURGE, maxUnavailable: 0, drainTimeoutSeconds: 300 },
    rotation: { maxAgeSeconds: MAX_AGE_S },
  });
  const status = async () => (await plane.pools.get(plane.namespace, name))?.status;
  const members = async (): Promise<Proxy[]> =>
    (await plane.proxies.list(plane.namespace, { labelSelector: `crawl.example.com/pool=${name}` })).items;
  const condition = (m: Proxy, type: string) => m.status?.conditions?.find((c) => c.type === type)?.status;
  const available = (m: Proxy) =>
    !m.metadata.deletionTimestamp && condition(m, 'Ready') === 'True' && condition(m, 'Draining') !== 'True';
  await waitUntil(
    `${REPLICAS} available`,
    async () => (await status())?.availableReplicas === REPLICAS,
    300_000,
  );

  const started = Date.now();
  const seen = new Set<string>();
  let maxLive = 0;
  let minAvailable = Number.POSITIVE_INFINITY;
  let minLeasable = Number.POSITIVE_INFINITY;
  let outage:
    | {
        from: number;
        to?: number;
        rotatedAtStart: number;
        rotatedAtEnd?: number;
        resumedAfterMs?: number;
        condition?: string;
      }
    | undefined;
  while (Date.now() - started < DURATION_MS) {
    const t = Date.now() - started;
    if (OUTAGE_AT_MS !== undefined && !outage && t >= OUTAGE_AT_MS) {
      renameSync(plane.stateDir, `${plane.stateDir}.away`);
      writeFileSync(plane.stateDir, 'outage\n');
      await plane.checkProviders();
      outage = { from: t, rotatedAtStart: (await status())?.rotation?.rotatedTotal ?? 0 };
      console.log(`${(t / 1000).toFixed(0)} s: outage begins`);
    }
    if (outage && outage.to === undefined && t >= outage.from + OUTAGE_MS) {
      const s = await status();
      outage.condition = s?.conditions?.find((c) => c.type === 'ProviderReady')?.message;
      outage.rotatedAtEnd = s?.rotation?.rotatedTotal ?? 0;
      rmSync(plane.stateDir, { force: true });
      renameSync(`${plane.stateDir}.away`, plane.stateDir);
      await plane.checkProviders();
      outage.to = t;
      console.log(`${(t / 1000).toFixed(0)} s: outage ends`);
    }
    if (outage?.to !== undefined && outage.resumedAfterMs === undefined) {
      if (((await status())?.rotation?.rotatedTotal ?? 0) > (outage.rotatedAtEnd ?? 0))
        outage.resumedAfterMs = t - outage.to;
    }
    const all = await members();
    const live = all.filter((m) => !m.metadata.deletionTimestamp);
    for (const m of live) seen.add(m.metadata.uid!);
    maxLive = Math.max(maxLive, live.length);
    // Outside an outage (members cannot be replaced during one, and Ready may drop with the provider).
    if (!outage || outage.to !== undefined) {
      minAvailable = Math.min(minAvailable, live.filter(available).length);
      const listed = (await (await fetch(`${plane.apiUrl}/v1/proxies?pool=${name}`)).json()) as {
        proxies: Array<{ healthy: boolean; draining?: boolean }>;
      };
      minLeasable = Math.min(minLeasable, listed.proxies.filter((p) => p.healthy && !p.draining).length);
    }
    await new Promise((r) => setTimeout(r, 2_000));
  }
  const s = await status();
  const rotated = s?.rotation?.rotatedTotal ?? 0;
  console.log(
    `\n## rotation: ${REPLICAS} members, maxAgeSeconds ${MAX_AGE_S}, maxSurge ${MAX_SURGE}, maxUnavailable 0, ${(DURATION_MS / 60_000).toFixed(0)} min, ${load.stop()}`,
  );
  console.log(
    `  rotations ${rotated} (${(rotated / REPLICAS).toFixed(2)} per member; ${(DURATION_MS / 1000 / MAX_AGE_S).toFixed(2)} ages in the window), ${seen.size} members seen`,
  );
  console.log(`  most members live at once ${maxLive} (replicas + maxSurge = ${REPLICAS + MAX_SURGE})`);
  console.log(
    `  fewest available ${minAvailable}, fewest leasable through the lease API ${minLeasable} (replicas - maxUnavailable = ${REPLICAS})`,
  );
  if (outage) {
    console.log(
      `  outage ${(OUTAGE_MS / 60_000).toFixed(0)} min from ${(outage.from / 1000).toFixed(0)} s: rotations during it ${(outage.rotatedAtEnd ?? 0) - outage.rotatedAtStart}; ProviderReady said "${outage.condition ?? '-'}"; first rotation ${outage.resumedAfterMs === undefined ? 'never' : `${(outage.resumedAfterMs / 1000).toFixed(0)} s`} after it ended`,
    );
  }
} finally {
  await plane.pools.delete(plane.namespace, name).catch(() => undefined);
  await plane.stop();
}
