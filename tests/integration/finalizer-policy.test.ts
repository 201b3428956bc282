/**
 * The finalizer admission policy (infra/k8s/admission) on an apiserver of
 * this test's own (it applies to every Proxy create on the apiserver it is
 * installed on, so not on the shared one): the apiserver puts our finalizer
 * on each new Managed Proxy, the bridge then sends no finalizer patch, and
 * the workflow still removes it at deletion; one removed by hand is put back
 * by the bridge, as on an apiserver without the policy.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds, installFinalizerPolicy } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { FINALIZER } from '../../resources/proxy-schema.js';
import { apiserverRequests } from '../helpers/apiserver-metrics.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import {
  createProxy,
  deleteProxy,
  getProxy,
  isProvisioned,
  kubeConfig,
  removeFinalizers,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';

/**
 * The apiserver's own count of the PATCHes of Proxies it applied (the main
 * resource, not status; answered 2xx): a patch that reaches a Proxy already
 * gone (a bridge's late finalizer patch of an earlier test's Proxy) changes
 * nothing and is not what these tests count.
 */
async function proxyPatches(kc: KubeConfig): Promise<number> {
  let applied = 0;
  for (const [key, count] of await apiserverRequests(kc, { byCode: true })) {
    if (/^PATCH proxies 2\d\d$/.test(key)) applied += count;
  }
  return applied;
}

describe('the finalizer admission policy', () => {
  let dir: string;
  let kube: LocalKubeApiServer;
  let cp: ControlPlane;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ep-finalizer-policy-'));
    kube = await startLocalKubeApiServer({ binDir: inject('kubeBinDir'), dataDir: join(dir, 'kube') });
    const kc = kubeConfig(kube.kubeconfigPath);
    await installCrds(kc);
    expect(await installFinalizerPolicy(kc)).toBe(true);
    // Installing again replaces what is there.
    expect(await installFinalizerPolicy(kc)).toBe(true);
    cp = await startControlPlane({ prefix: 'finalizer-policy', kubeconfigPath: kube.kubeconfigPath });
  });
  afterAll(async () => {
    await cp?.close();
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a Managed Proxy has the finalizer from its create; an External one none', async () => {
    const managed = await createProxy(cp.api, cp.namespace, 'px-managed-only', {
      mode: 'Managed',
      provider: 'local',
      port: 18301,
    });
    expect(managed.metadata.finalizers).toEqual([FINALIZER]);
    // One the creator set is kept beside ours.
    const held = await cp.api.create({
      metadata: { name: 'px-held', namespace: cp.namespace, finalizers: ['example.com/hold'] },
      spec: { mode: 'Managed', provider: 'local', port: 18304 },
    });
    expect([...(held.metadata.finalizers ?? [])].sort()).toEqual(['example.com/hold', FINALIZER].sort());
    await removeFinalizers(cp.api, cp.namespace, 'px-held');
    await deleteProxy(cp.api, cp.namespace, 'px-held');
    // The bridge may have put its finalizer back in between (as it does for
    // one removed by hand): then the run removes it, a PATCH that must land
    // here, not in the next test's count.
    await waitForProxyGone(cp.api, cp.namespace, 'px-held');
    const external = await createProxy(cp.api, cp.namespace, 'px-external', {
      mode: 'External',
      endpoint: { host: '203.0.113.7' },
    });
    expect(external.metadata.finalizers ?? []).toEqual([]);
    await deleteProxy(cp.api, cp.namespace, 'px-external');
    await deleteProxy(cp.api, cp.namespace, 'px-managed-only');
    await waitForProxyGone(cp.api, cp.namespace, 'px-managed-only');
  });

  it('provisions with no finalizer patch, and the finalizer goes at deletion', async () => {
    const before = await proxyPatches(cp.kc);
    await createProxy(cp.api, cp.namespace, 'px-policy', { mode: 'Managed', provider: 'local', port: 18302 });
    const provisioned = await waitForProxy(cp.api, cp.namespace, 'px-policy', 'Provisioned', isProvisioned);
    expect(provisioned.metadata.finalizers).toEqual([FINALIZER]);
    expect(await proxyPatches(cp.kc)).toBe(before);
    await deleteProxy(cp.api, cp.namespace, 'px-policy');
    await waitForProxyGone(cp.api, cp.namespace, 'px-policy');
    expect(await cp.instancesOf(provisioned.metadata.uid!)).toEqual([]);
  });

  it('a finalizer removed by hand is put back by the bridge', async () => {
    await createProxy(cp.api, cp.namespace, 'px-handled', {
      mode: 'Managed',
      provider: 'local',
      port: 18303,
    });
    await waitForProxy(cp.api, cp.namespace, 'px-handled', 'Provisioned', isProvisioned);
    await removeFinalizers(cp.api, cp.namespace, 'px-handled');
    await waitForProxy(cp.api, cp.namespace, 'px-handled', 'the finalizer back', (p) =>
      Boolean(p.metadata.finalizers?.includes(FINALIZER)),
    );
    const uid = (await getProxy(cp.api, cp.namespace, 'px-handled')).metadata.uid!;
    await deleteProxy(cp.api, cp.namespace, 'px-handled');
    await waitForProxyGone(cp.api, cp.namespace, 'px-handled');
    expect(await cp.instancesOf(uid)).toEqual([]);
  });
});
