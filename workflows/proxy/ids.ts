import type { ProxyRef } from './types.js';

/**
 * Stable, readable workflow ID. The UID makes a Proxy deleted and recreated
 * under the same name a new workflow, so a late signal for the old one can
 * never start the new one (and the reuse policy rejects restarting a run
 * that completed).
 */
export function proxyWorkflowId(ref: ProxyRef): string {
  return `proxy/${ref.namespace}/${ref.name}/${ref.uid}`;
}

/** The reverse of proxyWorkflowId; undefined for any other ID. */
export function parseProxyWorkflowId(workflowId: string): ProxyRef | undefined {
  const parts = workflowId.split('/');
  if (parts.length !== 4 || parts[0] !== 'proxy') return undefined;
  const [, namespace, name, uid] = parts as [string, string, string, string];
  if (!namespace || !name || !uid) return undefined;
  return { namespace, name, uid };
}
