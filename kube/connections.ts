/**
 * One keep-alive connection pool per apiserver for a KubeConfig.
 *
 * @kubernetes/client-node 1.4 builds a new `https.Agent` for every request
 * (`KubeConfig.createAgent`, called from `applySecurityAuthentication` and
 * `applyToFetchOptions`; kubernetes-client/javascript#2893), so every API
 * call opened a TCP connection, ran a TLS handshake and built a TLS context
 * from the CA, certificate and key again, on our side and the apiserver's.
 * A status write (a GET and a PATCH) cost two of those: at 1,000 Proxies
 * the worker's main thread spent most of a wake-up on them.
 *
 * `reuseConnections` wraps the instance's `createAgent` so that requests with
 * the same agent options share one agent with `keepAlive: true`. The options
 * are what the library read from the kubeconfig for this request (CA,
 * client certificate and key, TLS verification, server name): a rotated
 * certificate gives other options and so a fresh agent; beyond a few, the
 * oldest is closed once its requests have had a minute to finish. Bearer tokens are
 * request headers, not agent options, so a rotated token changes nothing
 * here. The library's own choice of agent class (proxy, plain HTTP, HTTPS)
 * is kept: it is called for each new set of options, with keepAlive added.
 */
import { createHash } from 'node:crypto';
import type { Agent } from 'node:http';
import type { KubeConfig } from '@kubernetes/client-node';

type CreateAgent = (cluster: unknown, agentOptions: Record<string, unknown>) => Agent;

/** How long a replaced agent's requests (a watch, a slow list) may go on before it is closed. */
const REPLACED_AGENT_GRACE_MS = 60_000;

/**
 * An idle pooled connection is closed by us after this long. The apiserver
 * closes idle connections after 90 s (its IdleTimeout): a request sent on a
 * connection the server is closing at that moment fails with "socket hang
 * up", so ours must close first.
 */
export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;

/** Agents kept per KubeConfig (one per request path and option set). */
const MAX_AGENTS = 4;

const wrapped = new WeakSet<KubeConfig>();

function optionsKey(cluster: unknown, options: Record<string, unknown>): string {
  const hash = createHash('sha256');
  const server = (cluster as { server?: unknown } | null)?.server;
  hash.update(`server=${String(server)}\0`);
  for (const name of Object.keys(options).sort()) {
    const value = options[name];
    if (value === undefined) continue;
    hash.update(`${name}=`);
    if (Buffer.isBuffer(value) || typeof value === 'string') hash.update(value);
    else hash.update(JSON.stringify(value) ?? typeof value);
    hash.update('\0');
  }
  return hash.digest('hex');
}

/**
 * Makes `kc` reuse connections across requests (see above). Idempotent;
 * returns `kc`. `idleTimeoutMs` is the agent's socket timeout: Node closes a
 * pooled connection idle that long; a request in flight (a watch waiting for
 * events) only gets a 'timeout' event nobody acts on.
 */
export function reuseConnections(kc: KubeConfig, opts: { idleTimeoutMs?: number } = {}): KubeConfig {
  if (wrapped.has(kc)) return kc;
  const target = kc as unknown as { createAgent?: CreateAgent };
  const original = target.createAgent;
  // A library version without the hook: leave it as it is (the test in
  // tests/integration/kube-connections.test.ts says so when that happens).
  if (typeof original !== 'function') return kc;
  const create = original.bind(kc);
  const agents = new Map<string, Agent>();
  target.createAgent = (cluster, agentOptions) => {
    const key = optionsKey(cluster, agentOptions);
    const known = agents.get(key);
    if (known) return known;
    const agent = create(cluster, {
      ...agentOptions,
      keepAlive: true,
      timeout: agentOptions.timeout ?? opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
    });
    agents.set(key, agent);
    // The request paths (API calls, watches) may each bring options of their
    // own, so a few agents live side by side; more than that means options
    // changed (a rotated certificate): the oldest goes, after a grace.
    for (const [oldKey, old] of agents) {
      if (agents.size <= MAX_AGENTS) break;
      agents.delete(oldKey);
      setTimeout(() => old.destroy(), REPLACED_AGENT_GRACE_MS).unref();
    }
    return agent;
  };
  wrapped.add(kc);
  return kc;
}
