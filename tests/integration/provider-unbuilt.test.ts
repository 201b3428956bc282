/**
 * A providers config naming a type this version cannot build (the seed's
 * sample names gcp and kvm) fails only that provider: the worker runs, a
 * Proxy on a built provider comes up, and a Proxy on the unbuilt one is
 * Failed with ProviderNotConfigured and the reason.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { notImplemented } from '../../providers/config.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import {
  createProxy,
  deleteProxy,
  isProvisioned,
  proxyCondition,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';

describe('a provider this version cannot build', () => {
  let cp: ControlPlane;

  beforeAll(async () => {
    cp = await startControlPlane({
      prefix: 'unbuilt',
      providersYaml: (root, range) => `providers:
  - name: local
    type: local
    local: { stateDir: ${root}/local, addressRange: ${range} }
  - name: gcp-eu
    type: gcp
    gcp:
      project: my-project
`,
      // Whatever this version implements, gcp is unbuildable here.
      providerTypes: { gcp: notImplemented('gcp') },
    });
  });
  afterAll(async () => {
    await cp?.close();
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);

  it('fails only its Proxies, with ProviderNotConfigured and the reason; the others run', async () => {
    expect(cp.registry.names()).toEqual(['local']);
    await createProxy(cp.api, cp.namespace, 'fine', { mode: 'Managed', provider: 'local', port: 18191 });
    await createProxy(cp.api, cp.namespace, 'cloud', { mode: 'Managed', provider: 'gcp-eu', port: 18192 });
    await waitFor('fine', 'Running', isProvisioned);
    const failed = await waitFor('cloud', 'Failed', (x) => x.status?.phase === 'Failed');
    expect(proxyCondition(failed, 'Provisioned')).toMatchObject({
      status: 'False',
      reason: 'ProviderNotConfigured',
    });
    expect(proxyCondition(failed, 'Provisioned')?.message).toContain(
      'type "gcp" is not implemented in this version',
    );
    for (const name of ['fine', 'cloud']) {
      await deleteProxy(cp.api, cp.namespace, name);
      await waitForProxyGone(cp.api, cp.namespace, name);
    }
  });
});
