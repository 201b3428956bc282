/**
 * A fleet of Ready External Proxies made directly in the apiserver, with
 * the status a healthy one has (no worker, no prober): what an api process
 * with `--no-prober` serves and shows, for the dashboard's scale test and
 * bench. Their health is flipped by status writes, as the workflows would.
 */
import type { ProxyClient } from '../../kube/proxies.js';
import type { Proxy, ProxyStatus } from '../../resources/proxy-schema.js';

export function readyStatus(healthy: boolean, now = new Date()): ProxyStatus {
  const at = now.toISOString().replace(/\.\d+Z$/, 'Z');
  return {
    phase: 'Ready',
    latencyMillis: 12,
    conditions: [
      { type: 'Ready', status: 'True', reason: 'Ready', message: '', lastTransitionTime: at },
      {
        type: 'Healthy',
        status: healthy ? 'True' : 'False',
        reason: healthy ? 'ProbeSucceeded' : 'ProbeFailed',
        message: healthy ? '' : 'the probe target stopped answering',
        lastTransitionTime: at,
      },
    ],
  };
}

/** Runs `work` over `items`, `concurrency` at a time. */
export async function inBatches<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<unknown>,
) {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

export async function applyReadyFleet(
  proxies: ProxyClient,
  namespace: string,
  count: number,
  endpointPort: number,
): Promise<Proxy[]> {
  const names = Array.from({ length: count }, (_, i) => `px-${String(i).padStart(4, '0')}`);
  const made: Proxy[] = [];
  await inBatches(names, 32, async (name) => {
    const created = await proxies.create({
      metadata: { name, namespace },
      spec: {
        mode: 'External',
        endpoint: { host: '127.0.0.1', port: endpointPort },
        attributes: { region: name.endsWith('7') ? 'eu' : 'us' },
      },
    });
    await proxies.writeStatus({ namespace, name, uid: created.metadata.uid! }, readyStatus(true));
    made.push(created);
  });
  return made;
}
