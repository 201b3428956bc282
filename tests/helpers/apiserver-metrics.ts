/**
 * The apiserver's own count of the requests it served, read from its
 * `/metrics` with the kubeconfig's credentials (the kube client has no call
 * for a raw path). No vitest import: the benches use it too.
 */
import { get as httpsGet, type RequestOptions } from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

/**
 * Requests so far by verb and resource, keyed like `PATCH proxies` or
 * `PATCH proxies/status`; with `byCode`, by answer too (`PATCH proxies 404`).
 */
export async function apiserverRequests(
  kc: KubeConfig,
  opts: { byCode?: boolean } = {},
): Promise<Map<string, number>> {
  const options: RequestOptions = {};
  await kc.applyToHTTPSOptions(options);
  const server = new URL(kc.getCurrentCluster()!.server);
  const text = await new Promise<string>((resolve, reject) => {
    httpsGet({ ...options, host: server.hostname, port: server.port, path: '/metrics' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const label = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(line)?.[1] ?? '';
    const sub = label('subresource');
    const key = `${label('verb')} ${label('resource')}${sub ? `/${sub}` : ''}${opts.byCode ? ` ${label('code')}` : ''}`;
    counts.set(key, (counts.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return counts;
}
