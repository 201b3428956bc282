/**
 * External Proxies created in a burst get their first verdict within
 * seconds (issue 25). The api process is the real CLI `api` (its prober
 * usually probes a new Proxy before the bridge has started its workflow);
 * the worker and bridge are this file's control plane. 50 External Proxies
 * on one working forward proxy are applied at once and must all become
 * Ready through verdict transitions alone: no report re-sent by the
 * anti-entropy pass (its counter on the api's /metrics stays 0), so none
 * waited for it. Then 50 more are applied while the api process is down,
 * and all 100 are Ready once it is back. Last, the race made certain: with
 * no bridge running, 20 more get their first verdicts before any workflow
 * exists; once a bridge starts the workflows, the held verdicts land.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { leaseApiUrl, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import { createProxy, proxyCondition } from '../helpers/kube.js';
import { startProbeTarget, type ProbeTarget } from '../helpers/prober-fixtures.js';
import { eventually } from '../helpers/temporal.js';

const BURST = 50;

describe('External Proxies applied in a burst', () => {
  let cp: ControlPlane;
  let upstream: ForwardProxy;
  let target: ProbeTarget;
  const apis: CliProcess[] = [];

  beforeAll(async () => {
    cp = await startControlPlane({ prefix: 'ext-burst' });
    upstream = await startForwardProxy({ host: '127.0.0.1', port: 0 });
    target = await startProbeTarget();
  });
  afterAll(async () => {
    for (const api of apis) await api.stop(30_000).catch(() => undefined);
    await cp?.close();
    await upstream?.close();
    await target?.close();
  });

  function startApi(): CliProcess {
    const api = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      ...testServerArgs(),
      // Only this file's Proxies: its prober must not probe and signal other tests'.
      '--watch-namespaces',
      cp.namespace,
    ]);
    apis.push(api);
    return api;
  }

  const apply = (names: string[]) =>
    Promise.all(
      names.map((name) =>
        createProxy(cp.api, cp.namespace, name, {
          mode: 'External',
          endpoint: { host: '127.0.0.1', port: upstream.port },
          healthCheck: { probeURL: target.url, intervalSeconds: 5, timeoutSeconds: 2 },
        }),
      ),
    );

  const readyNames = async (): Promise<Set<string>> => {
    const list = await cp.api.list(cp.namespace);
    return new Set(
      list.items.filter((p) => proxyCondition(p, 'Ready')?.status === 'True').map((p) => p.metadata.name),
    );
  };

  /** Seconds from now until every name is Ready (polled, with a deadline far above the goal of 30 s). */
  const secondsUntilReady = async (names: string[], since: number): Promise<number> => {
    await eventually(
      `${names.length} Proxies Ready`,
      async () => {
        const ready = await readyNames();
        return names.every((n) => ready.has(n)) || undefined;
      },
      { timeoutMs: 150_000, intervalMs: 250 },
    );
    return (Date.now() - since) / 1000;
  };

  const signals = async (apiUrl: string, kind: 'transition' | 'resync'): Promise<number> => {
    const text = await (await fetch(`${apiUrl}/metrics`)).text();
    const m = new RegExp(`^egress_prober_signals_total\\{kind="${kind}"\\} (\\d+)`, 'm').exec(text);
    expect(m, `the ${kind} counter on /metrics`).not.toBeNull();
    return Number(m![1]);
  };
  const resyncs = (apiUrl: string) => signals(apiUrl, 'resync');
  /** The api's catalog (its informer) lists `count` healthy proxies: it follows the apiserver's watch, a moment behind. */
  const leasableReaches = (apiUrl: string, count: number) =>
    eventually(
      `the lease API lists ${count} healthy proxies`,
      async () => {
        const body = (await (await fetch(`${apiUrl}/v1/proxies?healthy=true`)).json()) as { count: number };
        return body.count === count || undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );

  it('50 applied at once are all Ready through their first verdicts, and so are 50 applied while the api restarts', async () => {
    let api = startApi();
    let apiUrl = await leaseApiUrl(api, 150_000);
    await api.waitFor(/prober started/, 60_000);

    const first = Array.from({ length: BURST }, (_, i) => `ext-a${i}`);
    const appliedAt = Date.now();
    await apply(first);
    const firstSeconds = await secondsUntilReady(first, appliedAt);
    console.log(
      `issue 25: ${BURST} External Proxies applied at once, all Ready after ${firstSeconds.toFixed(1)} s`,
    );
    // Every verdict landed as a transition: none was lost and re-sent by anti-entropy.
    expect(await resyncs(apiUrl)).toBe(0);
    await leasableReaches(apiUrl, BURST);

    // The api process restarts; 50 more arrive while it is down.
    expect(await api.stop(30_000)).toBe(0);
    const second = Array.from({ length: BURST }, (_, i) => `ext-b${i}`);
    const secondAt = Date.now();
    await apply(second);
    api = startApi();
    apiUrl = await leaseApiUrl(api, 150_000);
    const secondSeconds = await secondsUntilReady([...first, ...second], secondAt);
    console.log(
      `issue 25: ${BURST} more applied while the api restarted, all ${2 * BURST} Ready ${secondSeconds.toFixed(1)} s after the apply`,
    );
    expect(await resyncs(apiUrl)).toBe(0);
    await leasableReaches(apiUrl, 2 * BURST);

    // The race made certain: no bridge, so every first verdict is sent before its workflow exists.
    await cp.bridge.stop();
    const late = Array.from({ length: 20 }, (_, i) => `ext-c${i}`);
    const transitionsBefore = await signals(apiUrl, 'transition');
    await apply(late);
    await eventually(
      'every first verdict sent with no workflow to take it',
      async () =>
        (await signals(apiUrl, 'transition')) >= transitionsBefore + late.length ? true : undefined,
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect([...(await readyNames())].filter((n) => n.startsWith('ext-c'))).toEqual([]);
    const bridge = cp.createBridge();
    const bridgeAt = Date.now();
    await bridge.start();
    try {
      const lateSeconds = await secondsUntilReady(late, bridgeAt);
      console.log(
        `issue 25: ${late.length} Proxies whose verdicts came before their workflows, all Ready ${lateSeconds.toFixed(1)} s after the bridge started`,
      );
      // Held and delivered, not lost and re-sent by anti-entropy.
      expect(await resyncs(apiUrl)).toBe(0);
    } finally {
      await bridge.stop();
    }
  }, 400_000);
});
