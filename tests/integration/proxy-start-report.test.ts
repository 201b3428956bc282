/**
 * A fresh run's first local activity writes the status its create leaves,
 * address included, before the run has the activity's result. A prober
 * can read that address and report on it meanwhile; when the workflow task
 * waiting on the activity heartbeats, the report reaches the run first.
 * Here, on the real dev server, with the real timing activity around a
 * create and a status write the test holds: the report is kept until the
 * create is taken, and applied then (not dropped as naming an unknown
 * address, which left the Proxy un-Ready until the prober's next re-send).
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTimingActivities } from '../../activities/drift-activities.js';
import type { CreateInstanceResult, KubeActivities } from '../../activities/types.js';
import type { ProviderRegistry } from '../../providers/config.js';
import type { Provider } from '../../providers/types.js';
import { PROXY_WORKFLOW_TYPE } from '../../workflows/proxy/client.js';
import { healthChangedSignal, stateQuery } from '../../workflows/proxy/messages.js';
import { DEFAULT_TIMING, type ProxyWorkflowInput } from '../../workflows/proxy/types.js';
import { desiredSpec } from '../helpers/desired-spec.js';
import { eventually, uniqueTaskQueue, workflowBundle } from '../helpers/temporal.js';

const EventType = proto.temporal.api.enums.v1.EventType;
const IP = '127.0.0.93';

type Write = Parameters<KubeActivities['writeProxyStatus']>[0];

describe('a health report that reaches a run before its create at the start', () => {
  let connection: Connection;
  let client: Client;
  let native: NativeConnection;
  let worker: Worker;
  let running: Promise<void>;
  let taskQueue: string;
  let releaseCreate: (created: CreateInstanceResult) => void = () => undefined;
  let createCalled = false;
  const writes: Write[] = [];

  beforeAll(async () => {
    connection = await Connection.connect({ address: inject('temporalAddress') });
    client = new Client({ connection, namespace: inject('temporalNamespace') });
    native = await NativeConnection.connect({ address: inject('temporalAddress') });
    taskQueue = uniqueTaskQueue('start-report');
    const registry = {
      get: (name: string) =>
        name === 'held' ? ({ capabilities: { quickCreate: true } } as unknown as Provider) : undefined,
      names: () => ['held'],
    } as unknown as ProviderRegistry;
    const timing = createTimingActivities({
      registry,
      timing: DEFAULT_TIMING,
      sweepOn: false,
      // Held by the test for as long as it takes: past the workflow task's heartbeat.
      createAtStartMs: 60_000,
      createInstance: () => {
        createCalled = true;
        return new Promise<CreateInstanceResult>((resolve) => (releaseCreate = resolve));
      },
      writeProxyStatus: (input) => {
        writes.push(input);
        return Promise.resolve('written');
      },
    });
    worker = await Worker.create({
      connection: native,
      namespace: inject('temporalNamespace'),
      taskQueue,
      workflowBundle: workflowBundle(),
      activities: {
        ...timing,
        writeProxyStatus: (input: Write) => {
          writes.push(input);
          return Promise.resolve('written' as const);
        },
        getInstance: () => Promise.resolve({ found: true, state: 'Running', ip: IP }),
      },
    });
    running = worker.run();
  });
  afterAll(async () => {
    worker?.shutdown();
    await running;
    await native?.close();
    await connection?.close();
  });

  it('is kept until the create is taken, then applied: the Proxy goes Ready', async () => {
    const uid = randomBytes(8).toString('hex');
    const input: ProxyWorkflowInput = {
      ref: { namespace: 'ns', name: 'px-early', uid },
      desired: desiredSpec({ provider: 'held', specHash: 'h' }),
      recorded: {},
      recordedVersion: '7',
      indexedPhase: 'Pending',
    };
    const handle = await client.workflow.start(PROXY_WORKFLOW_TYPE, {
      taskQueue,
      workflowId: `start-report-${uid}`,
      args: [input],
      // The SDK heartbeats a task waiting on a local activity at 80 % of this.
      workflowTaskTimeout: '2s',
    });
    try {
      const types = async () => ((await handle.fetchHistory()).events ?? []).map((e) => e.eventType);
      await eventually('the create at the start is out', () =>
        Promise.resolve(createCalled ? true : undefined),
      );
      // Past one heartbeat: a task completed while the activity is still out.
      await eventually(
        'a heartbeat of the first workflow task',
        async () =>
          (await types()).filter((t) => t === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED).length >= 1
            ? true
            : undefined,
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      await handle.signal(healthChangedSignal, {
        ip: IP,
        healthy: true,
        latencyMillis: 12,
        checkedAt: new Date().toISOString(),
      });
      // Delivered to the run (a task completed after it) while the create is still held.
      await eventually(
        'the report delivered before the create is taken',
        async () => {
          const seen = await types();
          const signalled = seen.indexOf(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED);
          return signalled >= 0 &&
            seen.slice(signalled).includes(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
            ? true
            : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      expect(writes).toEqual([]);

      releaseCreate({ id: 'held/px-early', specHash: 'h', seen: { found: true, state: 'Running', ip: IP } });
      const view = await eventually(
        'the run Ready on the kept report',
        async () => {
          const v = await handle.query(stateQuery);
          return v.phase === 'Ready' ? v : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      expect(view.health?.verdict).toBe('Healthy');
      expect(view.ip).toBe(IP);
      // The first write rode in the first local activity, pinned to the bridge's version; the next is the run's.
      expect(writes[0]).toMatchObject({ resourceVersion: '7', status: { phase: 'Provisioning', ip: IP } });
      expect(writes.at(-1)).toMatchObject({ status: { phase: 'Ready' } });
      expect(writes.at(-1)!.resourceVersion).toBeUndefined();
      // The report came before the create's result in history: the case this test is about.
      const events = (await handle.fetchHistory()).events ?? [];
      const signalAt = events.findIndex(
        (e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
      );
      const markerAt = events.findIndex((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED);
      expect(signalAt).toBeGreaterThan(0);
      expect(markerAt).toBeGreaterThan(signalAt);
    } finally {
      await handle.terminate('test over').catch(() => undefined);
    }
  });
});
