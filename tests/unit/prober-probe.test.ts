/**
 * The probe's failure paths that need no server: a port the socket layer
 * rejects makes `net.connect` throw synchronously. The probe must resolve a
 * ConnectFailed result rather than reject, and nothing may fire later (the
 * timeout timer or an abort once touched a socket that was never created,
 * which threw outside any promise and would crash the process).
 *
 * And TLS options of the prober's own config that Node refuses: the prober's
 * fault, so the probe rejects before contacting the proxy and the prober
 * reports ProberError (logged), never a failure of the proxy.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { probeThroughProxy, type ProbeTls } from '../../prober/probe.js';
import { createProber, type ProbeEvent } from '../../prober/prober.js';
import { createStaticProbeTargets } from '../../prober/targets.js';
import type { HealthReport } from '../../workflows/proxy/types.js';
import { ManualClock } from '../helpers/prober-fixtures.js';

/** Timers the event loop still holds (a timer left behind would fire into a missing socket). */
const pendingTimers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('probe: connect throws synchronously', () => {
  const uncaught: unknown[] = [];
  const record = (error: unknown) => uncaught.push(error);
  beforeEach(() => {
    uncaught.length = 0;
    process.on('uncaughtException', record);
  });
  afterEach(() => {
    process.off('uncaughtException', record);
  });

  it.each([70_000, Number.NaN, -1])(
    'port %s: a ConnectFailed result, and neither the timeout nor an abort throws afterwards',
    async (port) => {
      const controller = new AbortController();
      const timeoutMs = 50;
      const timersBefore = pendingTimers();
      const result = await probeThroughProxy({
        proxyHost: '127.0.0.1',
        proxyPort: port,
        url: new URL('http://127.0.0.1:1/'),
        timeoutMs,
        expectedStatusCodes: [204],
        signal: controller.signal,
      });
      expect(result).toMatchObject({ ok: false, reason: 'ConnectFailed' });
      expect(result.message).toContain('ERR_SOCKET_BAD_PORT');
      controller.abort();
      // Nothing left to fire later: the probe's timeout timer is gone with it.
      expect(pendingTimers()).toBeLessThanOrEqual(timersBefore);
      expect(uncaught).toEqual([]);
    },
  );
});

describe("probe: the prober's own TLS options are invalid", () => {
  // Node refuses a CA that is neither a string nor a Buffer, synchronously.
  const badTls = { ca: 42 } as unknown as ProbeTls;

  it('rejects (a prober fault) instead of resolving a failure of the proxy', async () => {
    // Nothing listens on port 1: a probe that contacted the proxy would resolve ConnectFailed.
    await expect(
      probeThroughProxy({
        proxyHost: '127.0.0.1',
        proxyPort: 1,
        url: new URL('https://probe.example.test/generate_204'),
        timeoutMs: 1_000,
        expectedStatusCodes: [204],
        tls: badTls,
      }),
    ).rejects.toThrow(/^the probe's TLS options are invalid: ERR_INVALID_ARG_TYPE: .*options\.ca/);
  });

  it('an http probe URL does not use the TLS options and is unaffected', async () => {
    const result = await probeThroughProxy({
      proxyHost: '127.0.0.1',
      proxyPort: 1,
      url: new URL('http://probe.example.test/'),
      timeoutMs: 1_000,
      expectedStatusCodes: [204],
      tls: badTls,
    });
    expect(result).toMatchObject({ ok: false, reason: 'ConnectFailed' });
  });

  it('the prober reports ProberError, logged, for every proxy, and keeps probing', async () => {
    const logs: Array<{ level: number; msg: string; proxy?: string }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logs.push(JSON.parse(chunk.toString()) as (typeof logs)[number]);
        done();
      },
    });
    const target = (name: string) => ({
      key: `ns/${name}`,
      ref: { namespace: 'ns', name, uid: `uid-${name}` },
      host: '127.0.0.1',
      port: 1,
      healthCheck: {
        probeURL: 'https://probe.example.test/generate_204',
        intervalSeconds: 10,
        timeoutSeconds: 1,
        failureThreshold: 1,
        successThreshold: 1,
        expectedStatusCodes: [204],
      },
      condition: 'Unknown' as const,
    });
    const clock = new ManualClock();
    const signals: HealthReport[] = [];
    const probes: ProbeEvent[] = [];
    const prober = createProber({
      targets: createStaticProbeTargets([target('p1'), target('p2')]),
      signal: (_ref, report) => signals.push(report),
      logger: pino({ level: 'warn' }, sink),
      registry: new Registry(),
      clock,
      random: () => 0.5,
      tls: badTls,
      onProbe: (e) => probes.push(e),
    });
    try {
      await prober.start();
      // Never probed (Unknown): both at once, then again one interval later.
      for (let now = 0; now <= 10_000; now += 1_000) {
        clock.advanceTo(now);
        await new Promise<void>((r) => setImmediate(r));
      }
      expect(probes.map((p) => [p.key, p.result.reason])).toEqual([
        ['ns/p1', 'ProberError'],
        ['ns/p2', 'ProberError'],
        ['ns/p1', 'ProberError'],
        ['ns/p2', 'ProberError'],
      ]);
      expect(signals).toHaveLength(2);
      expect(signals[0]).toMatchObject({ healthy: false, reason: 'ProberError' });
      expect(signals[0]!.message).toContain("the probe's TLS options are invalid");
      const thrown = logs.filter((l) => l.msg === 'probe threw; counted as a failed probe');
      expect(thrown.map((l) => l.proxy)).toEqual(['ns/p1', 'ns/p2', 'ns/p1', 'ns/p2']);
    } finally {
      await prober.stop();
    }
  });
});
