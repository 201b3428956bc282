import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDrainNotifier } from '../../api/drain-notifier.js';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createStaticProxyCatalog, proxyViewFromResource } from '../../api/proxy-catalog.js';
import { API_VERSION } from '../../kube/coordinates.js';
import type { Proxy } from '../../resources/proxy-schema.js';

const at = '2026-12-03T10:00:00Z';

function proxy(name: string, ip: string, draining: boolean): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { name, namespace: 'ns', uid: `uid-${name}` },
    spec: { mode: 'Managed', provider: 'local' } as Proxy['spec'],
    status: {
      ip,
      conditions: [
        { type: 'Healthy', status: 'True', reason: 'ProbeSucceeded', message: '', lastTransitionTime: at },
        ...(draining
          ? [
              {
                type: 'Draining',
                status: 'True' as const,
                reason: 'Replacing',
                message: '',
                lastTransitionTime: at,
              },
            ]
          : []),
      ],
    },
  };
}

/** Polls `test` every 5 ms until it holds (or fails the test after 5 s). */
async function until(what: string, test: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('drain notifier', () => {
  it('tells a draining proxy’s workflow once no lease is left, after its grace, and never a non-draining one', async () => {
    const held = proxy('held', '127.0.0.2', true);
    const steady = proxy('steady', '127.0.0.3', false);
    const catalog = createStaticProxyCatalog([held, steady]);
    const store = new MemoryLeaseStore();
    const lease = await store.acquire({
      candidates: [proxyViewFromResource(held)],
      target: '',
      ttlMs: 60_000,
    });
    expect(lease.granted).toBeTruthy();
    const sent: Array<{ name: string; ip: string }> = [];
    const registry = new Registry();
    const notifier = createDrainNotifier({
      catalog,
      leaseStore: store,
      logger: pino({ level: 'silent' }),
      registry,
      checkEveryMs: 5,
      graceMs: 30,
      resendMs: 60_000,
      signal: (target, report) => {
        sent.push({ name: target.name, ip: report.ip });
        return Promise.resolve();
      },
    });
    notifier.start();
    try {
      const held = async () =>
        (await registry.getSingleMetric('egress_drain_checks_total')!.get()).values.find(
          (v) => v.labels.outcome === 'held',
        )?.value ?? 0;
      // Past the grace it reads the count and finds the lease: nothing is sent.
      let heldChecks = 0;
      await until('two held checks', () => {
        void held().then((n) => (heldChecks = n));
        return heldChecks >= 2;
      });
      expect(sent).toEqual([]);
      // The lease is released: one report, for the drained address.
      if (lease.granted) await store.release(lease.granted.id);
      await until('a report', () => sent.length > 0);
      expect(sent).toEqual([{ name: 'held', ip: '127.0.0.2' }]);
      // Not re-sent before resendMs, however many passes run.
      const passes = notifier.passes();
      await until('three more passes', () => notifier.passes() >= passes + 3);
      expect(notifier.sent()).toBe(1);
    } finally {
      await notifier.stop();
    }
  });

  it('waits out the grace before trusting a zero count (a replica may still grant one in that window)', async () => {
    const catalog = createStaticProxyCatalog([proxy('fresh', '127.0.0.4', true)]);
    const sent: string[] = [];
    let now = 1_000;
    const notifier = createDrainNotifier({
      catalog,
      leaseStore: new MemoryLeaseStore(),
      logger: pino({ level: 'silent' }),
      checkEveryMs: 5,
      graceMs: 2_000,
      now: () => now,
      signal: (target) => {
        sent.push(target.name);
        return Promise.resolve();
      },
    });
    notifier.start();
    try {
      // Time stands still inside the grace: passes run, none sends.
      await until('three passes', () => notifier.passes() >= 3);
      expect(sent).toEqual([]);
      now += 2_000;
      await until('a report after the grace', () => sent.length === 1);
    } finally {
      await notifier.stop();
    }
  });
});
