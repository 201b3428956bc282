/**
 * What the gcp provider needs to know of the control plane that calls it
 * to own a firewall rule: the installation it serves and the provider
 * entries configured. The Provider contract hands check() and listByTag()
 * only a signal (the decorators pass on nothing more), so the two
 * activities that call them for the control plane (provider checks, orphan
 * GC's listing) open this scope around the call, and the provider reads it
 * once, synchronously, when the call starts. AsyncLocalStorage keeps it to
 * that call: concurrent calls (two workers in one process) each see their own.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export interface ControlPlaneScope {
  /** The installation identity: what the rule's name and mark are made from. */
  installation: string;
  /** Every configured provider entry (name and type). */
  entries: readonly { name: string; type: string }[];
  /** Set by orphan GC's listing: rules of entries no longer configured are deleted. */
  collectFirewallRules?: boolean;
}

const storage = new AsyncLocalStorage<ControlPlaneScope>();

export function withControlPlaneScope<T>(scope: ControlPlaneScope, fn: () => T): T {
  return storage.run(scope, fn);
}

/** The scope of the call running now, if a control-plane activity opened one. */
export function controlPlaneScope(): ControlPlaneScope | undefined {
  return storage.getStore();
}

/** The scope for an installation and a registry of built providers. */
export function scopeOf(
  installation: string,
  registry: { names(): string[]; get(name: string): { type: string } | undefined },
): ControlPlaneScope {
  return {
    installation,
    entries: registry.names().map((name) => ({ name, type: registry.get(name)?.type ?? '' })),
  };
}
