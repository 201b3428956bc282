/**
 * The prober end to end on real sockets: real forward proxies (the `local`
 * provider's, switched to `refuse-egress` to stop forwarding), a real HTTP
 * and HTTPS probe target, and proxies that accept TCP and then misbehave.
 * Reports go to an in-test recorder in place of Temporal (the workflow side
 * is covered in prober-temporal.test.ts), so every signal can be counted.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { createProber, type ProbeEvent, type Prober } from '../../prober/prober.js';
import { createStaticProbeTargets, type ProbeTarget, type StaticProbeTargets } from '../../prober/targets.js';
import type { HealthReport, HealthVerdict, ProxyRef } from '../../workflows/proxy/types.js';
import { eventually } from '../helpers/temporal.js';
import {
  selfSignedCert,
  startFaultProxy,
  startProbeTarget,
  type FaultMode,
  type FaultProxy,
  type ProbeTarget as Target,
  type SelfSignedCert,
} from '../helpers/prober-fixtures.js';

type Entry =
  | { kind: 'probe'; key: string; ok: boolean; reason?: string }
  | { kind: 'signal'; key: string; report: HealthReport };

/** Probe results and signals in the order they happened, per proxy key. */
class Journal {
  readonly entries: Entry[] = [];
  readonly signal = (ref: ProxyRef, report: HealthReport): void => {
    this.entries.push({ kind: 'signal', key: `${ref.namespace}/${ref.name}`, report });
  };
  readonly onProbe = (e: ProbeEvent): void => {
    this.entries.push({
      kind: 'probe',
      key: e.key,
      ok: e.result.ok,
      ...(e.result.reason ? { reason: e.result.reason } : {}),
    });
  };
  signals(key: string, from = 0): HealthReport[] {
    return this.entries.slice(from).flatMap((e) => (e.kind === 'signal' && e.key === key ? [e.report] : []));
  }
  probes(key: string, from = 0): Array<{ ok: boolean; reason?: string }> {
    return this.entries.slice(from).flatMap((e) => (e.kind === 'probe' && e.key === key ? [e] : []));
  }
  /** The probe results for `key` that came before its `n`-th signal (1-based) counted from `from`. */
  probesBeforeSignal(key: string, n: number, from = 0): boolean[] {
    const results: boolean[] = [];
    let seen = 0;
    for (const e of this.entries.slice(from)) {
      if (e.key !== key) continue;
      if (e.kind === 'signal' && ++seen === n) return results;
      if (e.kind === 'probe') results.push(e.ok);
    }
    throw new Error(`no signal #${n} for ${key}`);
  }
  get length(): number {
    return this.entries.length;
  }
}

/** The trailing run of equal results at the end of `results`. */
function trailingRun(results: boolean[], value: boolean): number {
  let n = 0;
  for (let i = results.length - 1; i >= 0 && results[i] === value; i--) n++;
  return n;
}

const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });

function target(
  key: string,
  proxy: { host: string; port: number },
  probeURL: string,
  over: Partial<ProbeTarget> = {},
  hc = {},
): ProbeTarget {
  const [namespace, name] = key.split('/') as [string, string];
  return {
    key,
    ref: { namespace, name, uid: `uid-${name}` },
    host: proxy.host,
    port: proxy.port,
    healthCheck: {
      probeURL,
      intervalSeconds: 1,
      timeoutSeconds: 2,
      successThreshold: 2,
      failureThreshold: 3,
      expectedStatusCodes: [200, 204],
      ...hc,
    },
    condition: 'Unknown',
    ...over,
  };
}

describe('health prober', () => {
  let cert: SelfSignedCert;
  let http: Target;
  let https: Target;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    cert = await selfSignedCert();
    http = await startProbeTarget();
    https = await startProbeTarget({ tls: cert });
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  afterAll(async () => {
    await Promise.all([http?.close(), https?.close()]);
  });

  async function forwardProxy(host = '127.0.0.1'): Promise<ForwardProxy> {
    const p = await startForwardProxy({ host, port: 0 });
    cleanups.push(() => p.close());
    return p;
  }

  async function startProber(
    targets: StaticProbeTargets,
    journal: Journal,
    registry = new Registry(),
  ): Promise<{ prober: Prober; registry: Registry }> {
    const prober = createProber({
      targets,
      signal: journal.signal,
      onProbe: journal.onProbe,
      logger,
      registry,
      tls: { ca: cert.cert },
    });
    await prober.start();
    cleanups.push(() => prober.stop());
    return { prober, registry };
  }

  const until = <T>(what: string, fn: () => T | undefined, timeoutMs = 30_000) =>
    eventually(what, () => Promise.resolve(fn()), { timeoutMs, intervalMs: 20 });

  it.each(['http', 'https'] as const)(
    '%s: Healthy after the success threshold, Unhealthy after the failure threshold when the proxy stops forwarding, healthy again; signals only on transitions',
    async (scheme) => {
      const proxy = await forwardProxy();
      const url = scheme === 'https' ? https.url : http.url;
      const key = `ns/${scheme}`;
      const journal = new Journal();
      const targets = createStaticProbeTargets([target(key, proxy, url)]);
      const { prober, registry } = await startProber(targets, journal);

      // Never probed: probed at once; Healthy exactly after two successes.
      await until('first verdict', () => journal.signals(key)[0]);
      expect(journal.signals(key)).toHaveLength(1);
      expect(journal.signals(key)[0]).toMatchObject({ ip: proxy.host, healthy: true });
      expect(journal.signals(key)[0]!.latencyMillis).toEqual(expect.any(Number));
      expect(journal.probesBeforeSignal(key, 1)).toEqual([true, true]);
      expect(prober.verdict(key)).toBe('Healthy');

      // Steady: probes go on, no signal.
      const steadyFrom = journal.length;
      await until('three more probes', () =>
        journal.probes(key, steadyFrom).length >= 3 ? true : undefined,
      );
      expect(journal.signals(key, steadyFrom)).toEqual([]);

      // The proxy stops forwarding: Unhealthy after exactly three consecutive failures.
      proxy.behaviour = 'refuse-egress';
      const brokenFrom = journal.length;
      const down = await until('Unhealthy', () => journal.signals(key, brokenFrom)[0]);
      expect(down).toMatchObject({
        ip: proxy.host,
        healthy: false,
        reason: scheme === 'https' ? 'ProxyRefused' : 'BadStatus',
      });
      expect(down.message).toContain('502');
      expect(down.latencyMillis).toBeUndefined();
      expect(trailingRun(journal.probesBeforeSignal(key, 1, brokenFrom), false)).toBe(3);
      expect(journal.probesBeforeSignal(key, 1, brokenFrom).filter((ok) => !ok)).toHaveLength(3);

      // Steady while broken.
      const brokenSteady = journal.length;
      await until('three more failing probes', () =>
        journal.probes(key, brokenSteady).length >= 3 ? true : undefined,
      );
      expect(journal.signals(key, brokenSteady)).toEqual([]);

      // Forwarding again: Healthy after two successes.
      proxy.behaviour = 'forward';
      const fixedFrom = journal.length;
      const up = await until('Healthy again', () => journal.signals(key, fixedFrom)[0]);
      expect(up).toMatchObject({ healthy: true });
      expect(trailingRun(journal.probesBeforeSignal(key, 1, fixedFrom), true)).toBe(2);

      // Three transitions, three signals, whatever the number of probes.
      const probes = journal.probes(key);
      expect(journal.signals(key)).toHaveLength(3);
      expect(probes.length).toBeGreaterThanOrEqual(11);
      expect(prober.stats().signals).toEqual({ transition: 3, latency: 0, resync: 0, reason: 0 });

      // Every failure carried the reason of the way the proxy broke.
      expect(
        journal
          .probes(key)
          .filter((p) => !p.ok)
          .every((p) => p.reason === (scheme === 'https' ? 'ProxyRefused' : 'BadStatus')),
      ).toBe(true);

      // Stopping the prober retires the series.
      await prober.stop();
      expect((await registry.metrics()).includes(`proxy="${key}"`)).toBe(false);
    },
  );

  it('a dropped proxy loses its metric series and is probed no more', async () => {
    const proxy = await forwardProxy();
    const journal = new Journal();
    const key = 'ns/dropped';
    const targets = createStaticProbeTargets([target(key, proxy, http.url)]);
    const { prober, registry } = await startProber(targets, journal);
    await until('a verdict', () => journal.signals(key)[0]);
    expect((await registry.metrics()).includes(`proxy="${key}"`)).toBe(true);

    targets.remove(key);
    const droppedAt = journal.length;
    expect(prober.verdict(key)).toBeUndefined();
    expect((await registry.metrics()).includes(`proxy="${key}"`)).toBe(false);

    // A proxy still tracked keeps being probed meanwhile; the dropped one never again.
    const other = 'ns/kept';
    targets.set(target(other, proxy, http.url));
    await until('three probes of the kept proxy', () =>
      journal.probes(other).length >= 3 ? true : undefined,
    );
    expect(journal.probes(key, droppedAt)).toEqual([]);
    expect((await registry.metrics()).includes(`proxy="${key}"`)).toBe(false);
  });

  it('counts every probe in the duration histogram and every failure in the counter', async () => {
    const proxy = await forwardProxy();
    const journal = new Journal();
    const key = 'ns/counted';
    const registry = new Registry();
    const targets = createStaticProbeTargets([target(key, proxy, http.url)]);
    const { prober } = await startProber(targets, journal, registry);
    await until('a verdict', () => journal.signals(key)[0]);
    proxy.behaviour = 'refuse-egress';
    await until('two failures', () =>
      journal.probes(key).filter((p) => !p.ok).length >= 2 ? true : undefined,
    );
    // Read the metrics and the journal in one synchronous step: both are updated together per probe.
    const [duration, failures] = await Promise.all([
      registry.getSingleMetric('proxy_operator_healthcheck_duration_seconds')!.get(),
      registry.getSingleMetric('proxy_operator_healthcheck_failures_total')!.get(),
    ]);
    const probes = journal.probes(key);
    const durationCount = duration.values.find(
      (v) => v.labels.proxy === key && (v as { metricName?: string }).metricName?.endsWith('_count'),
    )?.value;
    const failureCount = failures.values.find((v) => v.labels.proxy === key)?.value;
    expect(durationCount).toBe(probes.length);
    expect(failureCount).toBe(probes.filter((p) => !p.ok).length);
    await prober.stop();
  });

  it('no flap on restart: a verdict seeded from the Healthy condition is kept, and nothing is signalled', async () => {
    const proxy = await forwardProxy();
    const journal = new Journal();
    // Two proxies through the same forwarder: one the workflow already reports Healthy, one never probed.
    const seeded = target('ns/seeded', proxy, https.url, { condition: 'Healthy', latencyMillis: 3 });
    const fresh = target('ns/fresh', proxy, https.url);
    const targets = createStaticProbeTargets([seeded, fresh]);
    const { prober } = await startProber(targets, journal);
    expect(prober.verdict('ns/seeded')).toBe('Healthy');
    expect(prober.verdict('ns/fresh')).toBe('Unknown');
    await until('four probes of the seeded proxy', () =>
      journal.probes('ns/seeded').length >= 4 ? true : undefined,
    );
    await until('a verdict for the fresh one', () => journal.signals('ns/fresh')[0]);
    expect(journal.signals('ns/seeded')).toEqual([]);
    expect(journal.signals('ns/fresh')).toHaveLength(1);
    expect(prober.verdict('ns/seeded')).toBe('Healthy');

    // A seeded Unhealthy proxy that is in fact fine still needs the full success threshold.
    const sick = target('ns/seeded-sick', proxy, https.url, { condition: 'Unhealthy' });
    targets.set(sick);
    expect(prober.verdict('ns/seeded-sick')).toBe('Unhealthy');
    await until('recovery', () => journal.signals('ns/seeded-sick')[0]);
    expect(journal.probesBeforeSignal('ns/seeded-sick', 1)).toEqual([true, true]);
  });

  it('a replacement at a new address starts from Unknown; the old address is never reported again', async () => {
    const first = await forwardProxy('127.0.0.2');
    const second = await forwardProxy('127.0.0.3');
    const journal = new Journal();
    const key = 'ns/replaced';
    const targets = createStaticProbeTargets([target(key, first, http.url)]);
    const { prober } = await startProber(targets, journal);
    await until('healthy at the first address', () => journal.signals(key)[0]);

    targets.set(target(key, second, http.url, { condition: 'Healthy' }));
    expect(prober.verdict(key)).toBe('Unknown');
    const from = journal.length;
    const report = await until('healthy at the new address', () => journal.signals(key, from)[0]);
    expect(report).toMatchObject({ ip: '127.0.0.3', healthy: true });
    await first.close();
    const after = journal.length;
    await until('three more probes', () => (journal.probes(key, after).length >= 3 ? true : undefined));
    expect(journal.signals(key, from).map((r) => r.ip)).toEqual(['127.0.0.3']);
  });

  it('proxies that accept TCP and then hang, close, refuse CONNECT or answer garbage fail with a reason and keep being probed', async () => {
    const modes: FaultMode[] = ['close', 'garbage', 'status-403', 'status-407', 'status-502'];
    const faults: Array<{ key: string; mode: FaultMode | 'hang'; proxy: FaultProxy | ForwardProxy }> = [];
    for (const mode of modes) {
      const proxy = await startFaultProxy(mode);
      cleanups.push(() => proxy.close());
      faults.push({ key: `ns/${mode}`, mode, proxy });
    }
    const hang = await startForwardProxy({ host: '127.0.0.1', port: 0, behaviour: 'hang' });
    cleanups.push(() => hang.close());
    faults.push({ key: 'ns/hang', mode: 'hang', proxy: hang });

    const journal = new Journal();
    const targets = createStaticProbeTargets(
      faults.map((f) => target(f.key, f.proxy, https.url, {}, { failureThreshold: 1, timeoutSeconds: 1 })),
    );
    const { prober } = await startProber(targets, journal);
    const expected: Record<string, { reason: string; message: string }> = {
      close: { reason: 'ProtocolError', message: 'closed' },
      garbage: { reason: 'ProtocolError', message: 'not HTTP' },
      'status-403': { reason: 'ProxyRefused', message: '403' },
      'status-407': { reason: 'AuthFailed', message: '407' },
      'status-502': { reason: 'ProxyRefused', message: '502' },
      hang: { reason: 'Timeout', message: 'CONNECT' },
    };
    for (const f of faults) {
      const report = await until(`${f.mode}: Unhealthy`, () => journal.signals(f.key)[0]);
      expect(report.healthy, f.mode).toBe(false);
      expect(report.reason, f.mode).toBe(expected[f.mode]!.reason);
      expect(report.message, f.mode).toContain(expected[f.mode]!.message);
    }
    // No stuck loop: every one of them keeps being probed, and nothing is left running beyond one probe each.
    const from = journal.length;
    for (const f of faults) {
      await until(`${f.mode}: probed twice more`, () =>
        journal.probes(f.key, from).length >= 2 ? true : undefined,
      );
    }
    expect(prober.stats().inFlight).toBeLessThanOrEqual(faults.length);
    for (const f of faults) expect(journal.signals(f.key)).toHaveLength(1);
    const verdicts: Record<string, HealthVerdict | undefined> = Object.fromEntries(
      faults.map((f) => [f.mode, prober.verdict(f.key)]),
    );
    expect(new Set(Object.values(verdicts))).toEqual(new Set(['Unhealthy']));
  });

  it('an invalid probe URL fails every probe with InvalidProbeURL', async () => {
    const proxy = await forwardProxy();
    const journal = new Journal();
    const targets = createStaticProbeTargets([
      target('ns/bad-url', proxy, 'ftp://127.0.0.1/x', {}, { failureThreshold: 1 }),
    ]);
    await startProber(targets, journal);
    const report = await until('Unhealthy', () => journal.signals('ns/bad-url')[0]);
    expect(report).toMatchObject({ healthy: false, reason: 'InvalidProbeURL' });
  });
});
