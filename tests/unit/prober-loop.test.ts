/**
 * The prober's loop on a manual clock, with the network replaced by an
 * injected probe function (or, for a port the socket layer rejects, the real
 * probe, which fails before any socket exists): nothing a probe does stops a
 * proxy from being probed again, and the latency rule holds through the
 * prober, not only in latencyWorthReporting.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import type { ProbeRequest, ProbeResult } from '../../prober/probe.js';
import { createProber, type ProbeEvent, type Prober } from '../../prober/prober.js';
import { createStaticProbeTargets, type ProbeTarget } from '../../prober/targets.js';
import type { HealthReport } from '../../workflows/proxy/types.js';
import { ManualClock } from '../helpers/prober-fixtures.js';

/** Timers the event loop still holds. */
const pendingTimers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

const INTERVAL_MS = 10_000;

function target(over: Partial<ProbeTarget> = {}): ProbeTarget {
  return {
    key: 'ns/p1',
    ref: { namespace: 'ns', name: 'p1', uid: 'uid-1' },
    host: '127.0.0.1',
    port: 3128,
    healthCheck: {
      probeURL: 'http://127.0.0.1:1/',
      intervalSeconds: INTERVAL_MS / 1000,
      timeoutSeconds: 1,
      failureThreshold: 2,
      successThreshold: 2,
      expectedStatusCodes: [204],
    },
    condition: 'Unknown',
    ...over,
  };
}

/** Resolves pending promise callbacks (probe completions) without moving the clock. */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('prober loop', () => {
  let prober: Prober | undefined;
  afterEach(async () => {
    await prober?.stop();
    prober = undefined;
  });

  async function start(options: {
    target: ProbeTarget;
    probe?: (req: ProbeRequest) => Promise<ProbeResult>;
    onProbe?: (e: ProbeEvent) => void;
  }) {
    const clock = new ManualClock();
    const signals: HealthReport[] = [];
    const logs: Array<{ level: number; msg: string; proxy?: string }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logs.push(JSON.parse(chunk.toString()) as (typeof logs)[number]);
        done();
      },
    });
    const probes: ProbeEvent[] = [];
    prober = createProber({
      targets: createStaticProbeTargets([options.target]),
      signal: (_ref, report) => signals.push(report),
      logger: pino({ level: 'warn' }, sink),
      registry: new Registry(),
      clock,
      // Seeded first probes at half an interval, then exactly one interval apart.
      random: () => 0.5,
      onProbe: (e) => {
        probes.push(e);
        options.onProbe?.(e);
      },
      ...(options.probe ? { probe: options.probe } : {}),
    });
    await prober.start();
    await settle();
    const p = prober;
    /** Moves the clock to `t` in one-second steps, letting each probe finish and reschedule. */
    const runUntil = async (t: number) => {
      for (let now = clock.now() + 1_000; now <= t; now += 1_000) {
        clock.advanceTo(now);
        await settle();
      }
    };
    return { clock, signals, logs, probes, prober: p, runUntil };
  }

  it('a probe that throws or rejects is a failed ProberError probe, logged, and the proxy keeps being probed', async () => {
    const outcomes: Array<'throw' | 'reject' | 'ok'> = ['throw', 'reject', 'ok', 'ok'];
    let calls = 0;
    const { signals, logs, prober, runUntil } = await start({
      target: target(),
      probe: () => {
        const outcome = outcomes[calls++] ?? 'ok';
        if (outcome === 'throw') throw new Error('boom (sync)');
        if (outcome === 'reject') return Promise.reject(new Error('boom (async)'));
        return Promise.resolve({ ok: true, status: 204, durationMs: 7 });
      },
    });
    // Never probed (Unknown): the first probe at once, then one per interval.
    await runUntil(3 * INTERVAL_MS);
    expect(calls).toBe(4);
    expect(prober.stats()).toMatchObject({ probes: 4, failures: 2 });
    expect(signals).toHaveLength(2);
    expect(signals[0]).toMatchObject({ healthy: false, reason: 'ProberError' });
    expect(signals[0]!.message).toContain('boom (async)');
    expect(signals[1]).toMatchObject({ healthy: true, latencyMillis: 7 });
    const thrown = logs.filter((l) => l.msg === 'probe threw; counted as a failed probe');
    expect(thrown.map((l) => l.proxy)).toEqual(['ns/p1', 'ns/p1']);
    await runUntil(6 * INTERVAL_MS);
    expect(calls).toBe(7);
  });

  it('a port that makes connect throw synchronously fails with ConnectFailed, and the proxy keeps being probed', async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const timersBefore = pendingTimers();
      // The real probe: it must fail before any socket exists, without throwing.
      const { signals, probes, prober, runUntil } = await start({ target: target({ port: 70_000 }) });
      await runUntil(3 * INTERVAL_MS);
      expect(probes.map((p) => p.result.reason)).toEqual([
        'ConnectFailed',
        'ConnectFailed',
        'ConnectFailed',
        'ConnectFailed',
      ]);
      expect(prober.verdict('ns/p1')).toBe('Unhealthy');
      expect(signals).toHaveLength(1);
      expect(signals[0]).toMatchObject({ healthy: false, reason: 'ConnectFailed' });
      expect(signals[0]!.message).toContain('ERR_SOCKET_BAD_PORT');
      // No probe timeout timer left behind to fire into a missing socket
      // (the prober runs on the manual clock; only probes use real timers).
      expect(pendingTimers()).toBeLessThanOrEqual(timersBefore);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('a throwing onProbe hook is logged and changes nothing: verdicts and the schedule go on', async () => {
    let calls = 0;
    const { signals, logs, prober, runUntil } = await start({
      target: target(),
      probe: () => {
        calls++;
        return Promise.resolve({ ok: true, status: 204, durationMs: 3 });
      },
      onProbe: () => {
        throw new Error('hook bug');
      },
    });
    await runUntil(3 * INTERVAL_MS);
    expect(calls).toBe(4);
    expect(prober.verdict('ns/p1')).toBe('Healthy');
    expect(signals).toEqual([expect.objectContaining({ healthy: true, latencyMillis: 3 })]);
    expect(logs.filter((l) => l.msg === 'onProbe threw; ignored')).toHaveLength(4);
  });

  it('a lasting latency change sends one latency signal (one slow probe sends none); a second change within the report interval is held back until it is up', async () => {
    let latency = 10;
    const { signals, prober, runUntil } = await start({
      // Seeded Healthy at 10 ms, as after a restart: the latency rule is rate-limited from the seed.
      target: target({ condition: 'Healthy', latencyMillis: 10 }),
      probe: () => Promise.resolve({ ok: true, status: 204, durationMs: latency }),
    });
    // Probes at 5 s, 15 s, ... 605 s, all at the seeded latency: nothing to say.
    await runUntil(606_000);
    expect(signals).toEqual([]);

    // One slow probe is not the proxy's latency: the median of the last five is still 10 ms.
    latency = 500;
    await runUntil(616_000);
    latency = 10;
    await runUntil(666_000); // five probes at 10 ms since: the slow one is out of the window
    expect(signals).toEqual([]);

    latency = 100;
    await runUntil(686_000); // the 675 and 685 s probes at 100 ms: the median of five is still 10 ms
    expect(signals).toEqual([]);
    await runUntil(696_000); // the 695 s probe: three of the last five at 100 ms, +90 ms
    expect(signals).toEqual([expect.objectContaining({ healthy: true, latencyMillis: 100 })]);

    latency = 300;
    await runUntil(1_294_000); // probes at 705 ... 1285 s: within ten minutes of the 695 s report
    expect(signals).toHaveLength(1);

    await runUntil(1_296_000); // the 1295 s probe: ten minutes after the last report
    expect(signals).toHaveLength(2);
    expect(signals[1]).toMatchObject({ healthy: true, latencyMillis: 300 });
    expect(prober.stats().signals).toEqual({ transition: 0, latency: 2, resync: 0, reason: 0 });
  });
});

describe('prober loop: gateway traffic (passive health)', () => {
  let prober: Prober | undefined;
  afterEach(async () => {
    await prober?.stop();
    prober = undefined;
  });

  it('traffic that succeeded within the interval passes due probes; failures count as failed probes; another instance is ignored', async () => {
    const clock = new ManualClock();
    const signals: HealthReport[] = [];
    const probes: ProbeEvent[] = [];
    prober = createProber({
      targets: createStaticProbeTargets([target({ condition: 'Healthy' })]),
      signal: (_ref, report) => signals.push(report),
      logger: pino({ level: 'silent' }),
      registry: new Registry(),
      clock,
      random: () => 0.5,
      onProbe: (e) => probes.push(e),
      probe: () => Promise.resolve({ ok: true, durationMs: 5 }),
    });
    await prober.start();
    const report = { proxy: 'ns/p1', uid: 'uid-1', host: '127.0.0.1', port: 3128, ok: 1, failures: 0 };
    const runTo = async (t: number) => {
      for (let now = clock.now() + 1_000; now <= t; now += 1_000) {
        clock.advanceTo(now);
        await settle();
      }
    };
    // Traffic every 3 s for 40 s: the seeded probe (due at 5 s) and every one after are passed.
    for (let t = 0; t <= 40_000; t += 3_000) {
      await runTo(t);
      prober.observeTraffic(report);
    }
    expect(probes).toEqual([]);
    expect(prober.stats().passiveSuccesses).toBeGreaterThanOrEqual(3);
    // Traffic stops: the next due probe goes out.
    await runTo(65_000);
    expect(probes.length).toBeGreaterThanOrEqual(1);
    // A report for another instance (an old address) counts for nothing.
    prober.observeTraffic({ ...report, host: '127.0.0.2', ok: 0, failures: 5, reason: 'ConnectFailed' });
    expect(prober.verdict('ns/p1')).toBe('Healthy');
    // A failure; then a window with a success and a failure after it: the success ends the first
    // run and the failure starts another, which the next failure completes (failureThreshold 2).
    prober.observeTraffic({ ...report, ok: 0, failures: 1, reason: 'ConnectFailed', message: 'refused' });
    prober.observeTraffic({ ...report, ok: 1, failures: 1, reason: 'ConnectFailed', message: 'refused' });
    expect(prober.verdict('ns/p1')).toBe('Healthy');
    prober.observeTraffic({
      ...report,
      ok: 0,
      failures: 1,
      reason: 'ConnectTimeout',
      message: 'no TCP connection',
    });
    expect(prober.verdict('ns/p1')).toBe('Unhealthy');
    expect(signals.at(-1)).toMatchObject({
      healthy: false,
      reason: 'ConnectTimeout',
      message: 'gateway traffic: no TCP connection',
    });
    expect(signals.at(-1)).not.toHaveProperty('latencyMillis');
  });
});
