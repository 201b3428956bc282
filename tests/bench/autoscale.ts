/**
 * Autoscaling on lease demand (issue 31), on the real control plane.
 *
 *   npm run bench:autoscale -- [--up 30s] [--down 120s] [--ramp 60s] [--hold 180s] [--out docs/figures]
 *
 * A ProxyPool `min 2, max 40, maxLeases 5` (local provider) and a load
 * generator of crawler sessions through the real lease API ramping demand
 * 0 → 150 concurrent leases over --ramp, holding it for --hold, and back to
 * 0 over --ramp; then until the pool is back at 2. Prints the curve (time,
 * demand, leases held, ready members, desired size, refusals), the time from
 * the peak to the last refusal and from the end of demand to 2 members,
 * direction changes of the size, leases that pointed at a removed proxy,
 * and saves the curve as a PNG (and its CSV) under --out.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import * as vegaLite from 'vega-lite';
import { parseDuration } from '../../api/config.js';
import { directionChanges, formatRamp, runLeaseRamp, type RampSample } from '../helpers/lease-load.js';
import { sampleLoad, startBenchPlane, waitUntil } from './plane.js';

const { values: args } = parseArgs({
  options: {
    up: { type: 'string', default: '30s' },
    down: { type: 'string', default: '120s' },
    ramp: { type: 'string', default: '60s' },
    hold: { type: 'string', default: '180s' },
    peak: { type: 'string', default: '150' },
    out: { type: 'string', default: 'docs/figures' },
  },
});
const UP_S = parseDuration(args.up) / 1000;
const DOWN_S = parseDuration(args.down) / 1000;
const RAMP_S = parseDuration(args.ramp) / 1000;
const HOLD_S = parseDuration(args.hold) / 1000;
const PEAK = Number(args.peak);

const plane = await startBenchPlane({ name: 'autoscale', apiFlags: {} });
const load = sampleLoad();
const name = 'ramp';
try {
  await plane.pools.create(plane.namespace, name, {
    replicas: 2,
    template: {
      spec: {
        mode: 'Managed',
        provider: 'local',
        maxLeases: 5,
        healthCheck: { probeURL: plane.targetUrl, intervalSeconds: 5, timeoutSeconds: 2 },
      },
    },
    autoscaling: {
      minReplicas: 2,
      maxReplicas: 40,
      targetUtilization: 0.8,
      scaleUpStabilizationSeconds: UP_S,
      scaleDownStabilizationSeconds: DOWN_S,
    },
  });
  const status = async () => (await plane.pools.get(plane.namespace, name))?.status;
  await waitUntil('2 available', async () => (await status())?.availableReplicas === 2, 120_000);

  const demand = (t: number) =>
    t < RAMP_S
      ? (PEAK * t) / RAMP_S
      : t < RAMP_S + HOLD_S
        ? PEAK
        : t < 2 * RAMP_S + HOLD_S
          ? PEAK * (1 - (t - RAMP_S - HOLD_S) / RAMP_S)
          : 0;
  const started = Date.now();
  const sizes: Array<{ t: number; value: number }> = [];
  const observe = async () => {
    const s = await status();
    const seen = { ready: s?.readyReplicas ?? 0, desired: s?.desiredReplicas ?? 0 };
    sizes.push({ t: (Date.now() - started) / 1000, value: seen.desired });
    return seen;
  };
  const result = await runLeaseRamp({
    apiUrl: plane.apiUrl,
    pool: name,
    targetPort: plane.targetPort,
    demand,
    durationMs: (2 * RAMP_S + HOLD_S + 5) * 1000,
    maxClients: PEAK,
    sessionMs: 5_000,
    sampleEveryMs: 1_000,
    observe,
  });
  // Then until the pool is back at min, still sampling.
  const tail: RampSample[] = [];
  await waitUntil(
    'back to 2 members',
    async () => {
      const seen = await observe();
      tail.push({
        t: Math.round(((Date.now() - started) / 1000) * 10) / 10,
        demand: 0,
        held: 0,
        denials: 0,
        ...seen,
      });
      const members = await plane.proxies.list(plane.namespace, {
        labelSelector: `crawl.example.com/pool=${name}`,
      });
      return seen.desired === 2 && members.items.length === 2;
    },
    DOWN_S * 1000 + 10 * 60_000,
  );
  const samples = [...result.samples, ...tail.filter((_, i) => i % 2 === 0)];
  const backAt = tail[tail.length - 1]!.t;
  const changes = directionChanges(sizes);
  console.log(formatRamp(samples));
  console.log(
    `\n## autoscaling ramp 0 → ${PEAK} → 0 leases, pool min 2 max 40 maxLeases 5 target 0.8, ${load.stop()}`,
  );
  console.log(`  stabilization windows: up ${UP_S} s, down ${DOWN_S} s; ramp ${RAMP_S} s, hold ${HOLD_S} s`);
  console.log(
    `  leases granted ${result.granted}, refused ${result.denials}; broken (a CONNECT through a leased proxy failed) ${result.broken}`,
  );
  console.log(
    `  last refusal ${result.lastDenialAt === undefined ? '-' : (result.lastDenialAt - RAMP_S).toFixed(1)} s after the demand peaked (${((result.lastDenialAt ?? RAMP_S) - RAMP_S) / UP_S} scale-up windows)`,
  );
  console.log(
    `  largest size ${Math.max(...sizes.map((s) => s.value))}; back to 2 members ${(backAt - (2 * RAMP_S + HOLD_S)).toFixed(1)} s after the demand ended`,
  );
  console.log(
    `  direction changes of the size: ${changes.length} at ${changes.map((t) => `${t.toFixed(0)} s`).join(', ') || '-'}`,
  );

  mkdirSync(args.out, { recursive: true });
  const csv = [
    't,demand,held,ready,desired,denials',
    ...samples.map((s) => `${s.t},${s.demand},${s.held},${s.ready},${s.desired},${s.denials}`),
  ];
  writeFileSync(join(args.out, 'autoscale-ramp.csv'), `${csv.join('\n')}\n`);
  const long = samples.flatMap((s) => [
    { t: s.t, series: 'demand (clients)', value: s.demand },
    { t: s.t, series: 'leases held', value: s.held },
    { t: s.t, series: 'ready members x 5', value: s.ready * 5 },
    { t: s.t, series: 'refused / s', value: s.denials },
  ]);
  const spec = vegaLite.compile({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: `ProxyPool autoscaling: 0 → ${PEAK} → 0 leases (up ${UP_S} s, down ${DOWN_S} s windows)`,
    width: 900,
    height: 360,
    background: 'white',
    data: { values: long },
    mark: { type: 'line', interpolate: 'step-after' },
    encoding: {
      x: { field: 't', type: 'quantitative', title: 'seconds' },
      y: { field: 'value', type: 'quantitative', title: 'leases' },
      color: { field: 'series', type: 'nominal', title: null },
    },
  }).spec;
  const view = new vega.View(vega.parse(spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const png = new Resvg(svg, { fitTo: { mode: 'width', value: 1200 }, background: 'white' }).render().asPng();
  writeFileSync(join(args.out, 'autoscale-ramp.png'), png);
  console.log(`  curve saved: ${join(args.out, 'autoscale-ramp.png')} and .csv`);
} finally {
  await plane.pools.delete(plane.namespace, name).catch(() => undefined);
  await plane.stop();
}
