/**
 * Durability: a worker that stops (gracefully, or killed with SIGKILL) in
 * the middle of a create, and a workflow that continues as new, all converge
 * with exactly one instance and the same state.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Proxy } from '../../resources/proxy-schema.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider } from '../../providers/local/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { readRecord } from '../../providers/local/store.js';
import { MARK_UID, type Provider } from '../../providers/types.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { healthChangedSignal, stateQuery } from '../../workflows/proxy/messages.js';
import { createProxy, deleteProxy, getProxy, isProvisioned, waitForProxy } from '../helpers/kube.js';
import { throughProxy } from '../helpers/kube.js';
import {
  FAST_TIMING,
  privateLoopbackRange,
  startControlPlane,
  type ControlPlane,
} from '../helpers/control-plane.js';
import type { CrashWorkerArgs } from '../helpers/crash-worker.js';
import { eventually } from '../helpers/temporal.js';
import { startTarget } from '../helpers/net.js';

describe('Proxy workflow durability', () => {
  let cp: ControlPlane;
  let target: Awaited<ReturnType<typeof startTarget>>;

  beforeAll(async () => {
    // A short history budget forces continue-as-new within seconds.
    cp = await startControlPlane({ prefix: 'durable', maxHistoryEvents: 60 });
    target = await startTarget('durable ok');
  });
  afterAll(async () => {
    await cp?.close();
    await target?.close();
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);
  const provisioned = isProvisioned;
  const remove = (name: string) => deleteProxy(cp.api, cp.namespace, name);

  it('a worker stopped gracefully mid-create (instance made, ID not yet recorded) ends with exactly one Running instance', async () => {
    // The real local provider, with its create held open after the backend
    // has made the instance: the window in which a crash loses the ID. A
    // graceful stop cancels the activity, so the server retries it at once;
    // the SIGKILL test below covers a worker that just disappears.
    const inner = createLocalProvider({
      name: 'gated',
      config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
      stateDir: `${cp.stateRoot}/gated`,
      logger: cp.logger,
    });
    let entered!: () => void;
    const createEntered = new Promise<void>((r) => (entered = r));
    let holdCreates = true;
    const gated: Provider = {
      name: 'gated',
      type: inner.type,
      async create(req, signal) {
        const id = await inner.create(req, signal);
        if (holdCreates) {
          entered();
          await new Promise<void>((_resolve, reject) => {
            signal.addEventListener('abort', () => reject(new Error('worker shutting down')), { once: true });
          });
        }
        return id;
      },
      get: (id, signal) => inner.get(id, signal),
      delete: (id, signal) => inner.delete(id, signal),
      listByTag: (signal) => inner.listByTag(signal),
      close: () => inner.close(),
    };
    cp.registry.add(gated);

    const created = await createProxy(cp.api, cp.namespace, 'crash', {
      mode: 'Managed',
      provider: 'gated',
      port: 18280,
    });
    await createEntered;
    expect(
      (await inner.listByTag(AbortSignal.timeout(5_000))).filter((i) => i.uid === created.metadata.uid),
    ).toHaveLength(1);

    holdCreates = false;
    await cp.restartWorker();

    const running = await waitFor('crash', 'Running after the restart', provisioned);
    const mine = (await inner.listByTag(AbortSignal.timeout(5_000))).filter(
      (i) => i.uid === created.metadata.uid,
    );
    expect(mine).toHaveLength(1);
    expect(mine[0]!.id).toBe(running.status?.providerID);
    expect(await throughProxy(cp.kc, running, target.port)).toBe('durable ok');
    await remove('crash');
  });

  it('a worker killed (SIGKILL) mid-create and replaced ends with exactly one Running instance', async () => {
    // Its own control plane without an in-process worker: the task queue's
    // first worker is a child process that creates the instance, then blocks
    // in create (the ID is never returned) until it is killed.
    const range = privateLoopbackRange();
    const plane = await startControlPlane({
      prefix: 'killed',
      startWorker: false,
      providersYaml: (root) =>
        `providers:\n  - name: local\n    type: local\n    local:\n      stateDir: ${root}/local\n      addressRange: ${range}\n`,
    });
    const stateDir = `${plane.stateRoot}/local`;
    const args: CrashWorkerArgs = {
      temporalAddress: inject('temporalAddress'),
      namespace: inject('temporalNamespace'),
      taskQueue: plane.taskQueue,
      kubeconfigPath: inject('kubeconfigPath'),
      workflowBundlePath: inject('workflowBundlePath'),
      stateDir,
      addressRange: range,
      installation: 'test-installation',
      timing: FAST_TIMING,
    };
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fileURLToPath(new URL('../helpers/crash-worker.ts', import.meta.url)),
        JSON.stringify(args),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<NodeJS.Signals | null>((r) =>
      child.once('exit', (_code, signal) => r(signal)),
    );
    const childSays = (marker: string) =>
      eventually(`the child worker to print ${marker}`, () => {
        if (child.exitCode !== null) throw new Error(`child worker exited ${child.exitCode}: ${err}`);
        return Promise.resolve(out.includes(marker) ? true : undefined);
      });

    try {
      await childSays('WORKER-RUNNING');
      const created = await createProxy(plane.api, plane.namespace, 'killed', {
        mode: 'Managed',
        provider: 'local',
        port: 18282,
      });
      const uid = created.metadata.uid!;
      await childSays('CREATE-ENTERED');

      // The instance exists (read from disk: the child owns the state dir).
      const record = await readRecord(stateDir, instanceNameFromUid(uid));
      expect(record.kind).toBe('ok');
      expect(record.kind === 'ok' && record.record.labels[MARK_UID]).toBe(uid);
      const lockHolder = async () =>
        (JSON.parse(await readFile(`${stateDir}/owner.lock`, 'utf8')) as { pid: number }).pid;
      expect(await lockHolder()).toBe(child.pid);

      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');

      // A replacement on the same task queue, state dir and address range.
      // The server notices the dead attempt after the heartbeat timeout and
      // retries it here; the local provider takes over the dead owner's lock
      // and adopts the instance the killed worker made.
      await plane.startWorker();
      const running = await eventually(
        'killed: Provisioned=True after the replacement worker started',
        async () => {
          const p = await getProxy(plane.api, plane.namespace, 'killed');
          return provisioned(p) ? p : undefined;
        },
        { timeoutMs: 45_000, intervalMs: 250 },
      );
      expect(await lockHolder()).toBe(process.pid);
      const mine = await plane.instancesOf(uid);
      expect(mine).toHaveLength(1);
      expect(mine[0]!.id).toBe(running.status?.providerID);
      expect(await throughProxy(cp.kc, running, target.port)).toBe('durable ok');
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
      await plane.close();
    }
  }, 60_000);

  it('continue-as-new carries the state: same instance, same conditions, no second create', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'long', {
      mode: 'Managed',
      provider: 'local',
      port: 18281,
    });
    const ref = { namespace: cp.namespace, name: 'long', uid: created.metadata.uid! };
    const running = await waitFor('long', 'Running', provisioned);
    const firstRun = await cp.client.workflow.getHandle(proxyWorkflowId(ref)).describe();

    const continued = await eventually(
      'the first run continued as new',
      async () => {
        const d = await cp.client.workflow.getHandle(proxyWorkflowId(ref), firstRun.runId).describe();
        return d.status.name === 'CONTINUED_AS_NEW' ? d : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(continued.historyLength).toBeLessThan(120);

    const latest = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const view = await latest.query(stateQuery);
    expect((await latest.describe()).runId).not.toBe(firstRun.runId);
    expect(view).toMatchObject({
      providerID: running.status?.providerID,
      instanceState: 'Running',
      ip: running.status?.ip,
    });
    const provisionedSince = running.status?.conditions?.find(
      (c) => c.type === 'Provisioned',
    )?.lastTransitionTime;
    expect(view.conditions.find((c) => c.type === 'Provisioned')?.lastTransitionTime).toBe(provisionedSince);
    const mine = await cp.instancesOf(ref.uid);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.createdAt?.getTime()).toBeLessThan(Date.parse(continued.closeTime!.toISOString()));
    await remove('long');
  });

  it('signals arriving around continue-as-new are not lost: the last of a burst spanning several runs wins', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'burst', {
      mode: 'Managed',
      provider: 'local',
      port: 18283,
    });
    const ref = { namespace: cp.namespace, name: 'burst', uid: created.metadata.uid! };
    const running = await waitFor('burst', 'Running', provisioned);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const firstRunId = (await handle.describe()).runId;

    // 80 verdicts, each a change, sent as fast as the client goes: with
    // maxHistoryEvents 60 the run continues as new several times mid-burst.
    const count = 80;
    for (let i = 1; i <= count; i++) {
      await handle.signal(healthChangedSignal, {
        ip: running.status!.ip!,
        healthy: true,
        latencyMillis: i,
        checkedAt: new Date(Date.UTC(2026, 10, 30, 12, 0, i)).toISOString(),
      });
    }
    const view = await eventually('the last verdict applied', async () => {
      const v = await handle.query(stateQuery);
      return v.health.latencyMillis === count ? v : undefined;
    });
    expect(view).toMatchObject({ providerID: running.status?.providerID, instanceState: 'Running' });
    // Visibility may lag the runs by a moment.
    const runs = await eventually('three or more runs listed', async () => {
      const ids: string[] = [];
      for await (const run of cp.client.workflow.list({ query: `WorkflowId = '${proxyWorkflowId(ref)}'` })) {
        ids.push(run.runId);
      }
      return ids.length >= 3 ? ids : undefined;
    });
    expect(runs).toContain(firstRunId);
    const written = await waitFor(
      'burst',
      'the last latency written',
      (p) => p.status?.latencyMillis === count,
    );
    expect(written.status?.phase).toBe('Ready');
    await remove('burst');
  });
});
