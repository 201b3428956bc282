/**
 * "Is this Proxy gone?" on the real apiserver: only a 404 whose Status names
 * the Proxy counts. A 404 that says nothing about the object (here: a path
 * the apiserver does not serve, as with an unserved API version) is an
 * error, never "gone" — "gone" makes a Proxy's workflow delete its instance.
 */
import { ApiException, KubeConfig } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { createProxyClient, isProxyNotFound } from '../../kube/proxies.js';
import { createNamespace, createProxy, kubeConfig, proxyClient } from '../helpers/kube.js';

describe('the direct Proxy reader', () => {
  it('answers undefined for a missing Proxy or another UID, and throws on a 404 that is not about the Proxy', async () => {
    const kc = kubeConfig();
    const namespace = await createNamespace(kc, 'reader');
    const created = await createProxy(proxyClient(kc), namespace, 'present', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: 3128 },
    });
    const reader = createProxyClient(kc);
    const uid = created.metadata.uid!;
    expect((await reader.read({ namespace, name: 'present', uid }))?.metadata.uid).toBe(uid);
    expect(await reader.read({ namespace, name: 'present', uid: 'another-uid' })).toBeUndefined();
    expect(await reader.read({ namespace, name: 'absent', uid })).toBeUndefined();
    expect(await reader.read({ namespace: 'no-such-namespace', name: 'absent', uid })).toBeUndefined();

    // The same apiserver behind a path it does not serve: every request is a bare 404.
    const misrouted = new KubeConfig();
    misrouted.loadFromOptions({
      clusters: kc.clusters.map((c) => ({ ...c, server: `${c.server}/not-an-api-prefix` })),
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.getCurrentContext(),
    });
    const error = await createProxyClient(misrouted)
      .read({ namespace, name: 'present', uid })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(ApiException);
    expect((error as ApiException<unknown>).code).toBe(404);
    expect(isProxyNotFound(error, 'present')).toBe(false);
  });
});
