/**
 * API calls share keep-alive connections (kube/connections.ts), on the real
 * apiserver over TLS: the calls go through a TCP relay that counts the
 * connections it accepts, against the client library as it comes, which
 * opens one per call.
 */
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { reuseConnections } from '../../kube/connections.js';
import { createNamespace, kubeConfig } from '../helpers/kube.js';
import { TcpRelay } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';
import { kubeConfigVia } from './gc-helpers.js';

const CALLS = 20;

describe('kube connections', () => {
  let relay: TcpRelay;

  // A relay of its own per case: connections a case left in its pool (they
  // live for the idle timeout) never count in the next.
  beforeEach(async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(inject('kubeconfigPath'));
    const apiserver = new URL(kc.getCurrentCluster()!.server);
    relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
    await relay.open();
  });
  afterEach(async () => {
    await relay?.cut();
  });

  /** A kubeconfig for the shared apiserver, reached through the counting relay. */
  function viaRelay(): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromFile(inject('kubeconfigPath'));
    return kubeConfigVia(kc, relay.port);
  }
  async function connectionsOpened(work: () => Promise<unknown>): Promise<number> {
    // Counted from the relay's side: a connection is accepted before its first request is read.
    const before = relay.accepted;
    await work();
    return relay.accepted - before;
  }

  it(`${CALLS} API calls in a row open one connection, not ${CALLS}`, async () => {
    const calls = (kc: KubeConfig) => async () => {
      const core = kc.makeApiClient(CoreV1Api);
      for (let i = 0; i < CALLS; i++) {
        const ns = await core.readNamespace({ name: 'default' });
        expect(ns.metadata?.name).toBe('default');
      }
    };
    // The library as it comes: the cost this module removes.
    expect(await connectionsOpened(calls(viaRelay()))).toBe(CALLS);
    expect(await connectionsOpened(calls(reuseConnections(viaRelay())))).toBe(1);
  });

  it('concurrent calls open no more connections than run at once, and reuse them after', async () => {
    const core = reuseConnections(viaRelay()).makeApiClient(CoreV1Api);
    const burst = () => Promise.all(Array.from({ length: 5 }, () => core.readNamespace({ name: 'default' })));
    const first = await connectionsOpened(burst);
    expect(first).toBeGreaterThanOrEqual(1);
    expect(first).toBeLessThanOrEqual(5);
    // The pool holds `first` connections: a second burst opens only what it
    // lacks (the library as it comes opens 5), a lone call opens none.
    expect(await connectionsOpened(burst)).toBeLessThanOrEqual(5 - first);
    expect(await connectionsOpened(() => core.readNamespace({ name: 'default' }))).toBe(0);
  });

  it('wrapping twice changes nothing: calls still share the pool', async () => {
    const core = reuseConnections(reuseConnections(viaRelay())).makeApiClient(CoreV1Api);
    await core.readNamespace({ name: 'default' });
    expect(
      await connectionsOpened(async () => {
        for (let i = 0; i < 3; i++) await core.readNamespace({ name: 'default' });
      }),
    ).toBe(0);
  });

  it('closes a connection idle past the idle timeout itself, and the next call opens a new one', async () => {
    const core = reuseConnections(viaRelay(), { idleTimeoutMs: 500 }).makeApiClient(CoreV1Api);
    const before = relay.live;
    await core.readNamespace({ name: 'default' });
    // The client closed its idle connection (the relay saw it go), before any server could.
    await eventually(
      'the idle connection closed',
      () => Promise.resolve(relay.live === before ? true : undefined),
      {
        timeoutMs: 10_000,
        intervalMs: 100,
      },
    );
    expect(await connectionsOpened(() => core.readNamespace({ name: 'default' }))).toBe(1);
  });

  it('a watch that waits past the idle timeout keeps its connection and still gets events', async () => {
    const kc = reuseConnections(viaRelay(), { idleTimeoutMs: 500 });
    const core = kc.makeApiClient(CoreV1Api);
    const namespace = await createNamespace(kubeConfig(), 'kube-conn');
    const seen: string[] = [];
    const opened = relay.accepted;
    const watching = await new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/configmaps`,
      {},
      (type, obj: { metadata?: { name?: string } }) => seen.push(`${type} ${obj.metadata?.name}`),
      () => undefined,
    );
    try {
      await eventually('the watch connected', () =>
        Promise.resolve(relay.accepted > opened ? true : undefined),
      );
      const withWatch = relay.live;
      // A call of its own on a second connection; once that one has been
      // closed as idle, the watch (connected before it, silent since) has
      // waited longer than the idle timeout.
      await core.readNamespace({ name: 'default' });
      await eventually(
        'the call’s connection closed as idle',
        () => Promise.resolve(relay.accepted - opened >= 2 && relay.live === withWatch ? true : undefined),
        { timeoutMs: 10_000, intervalMs: 100 },
      );
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'after-the-wait' } } });
      await eventually('the watch event', () =>
        Promise.resolve(seen.includes('ADDED after-the-wait') ? true : undefined),
      );
      // The watch's, the call's and the create's: the watch was not reopened.
      expect(relay.accepted - opened).toBe(3);
    } finally {
      watching.abort();
    }
  });

  it('after the pooled connections are dropped under it (an apiserver restart), calls recover on a new one', async () => {
    const core = reuseConnections(viaRelay()).makeApiClient(CoreV1Api);
    await core.readNamespace({ name: 'default' });
    await relay.cut();
    await relay.open();
    // A call racing the drop may fail ("socket hang up"), as on any pooled
    // client; the callers retry. At most that one.
    let failures = 0;
    await eventually('a call through a new connection', async () => {
      try {
        return (await core.readNamespace({ name: 'default' })).metadata?.name === 'default'
          ? true
          : undefined;
      } catch {
        failures += 1;
        return undefined;
      }
    });
    expect(failures).toBeLessThanOrEqual(1);
  });
});
