/**
 * A provider whose new instances stay Provisioning until the test lets them
 * go: a test that must act while an operation is in flight (restart a server
 * mid-create) ends that window itself, instead of racing a start delay that a
 * loaded machine can outlast.
 *
 * `holdProvisioning(registry, name)` returns a registry that is `registry`
 * but for `name`, which is wrapped: the same name, type and capabilities
 * (a quick provider stays quick), every call passed on, and an instance
 * created while holding reads Provisioning (no IP), in `get` and
 * `listByTag` alike, for as long as the real one reads Running, until
 * `release()`. Vitest-free.
 */
import type { ProviderRegistry } from '../../providers/config.js';
import type { Instance, Listing, Provider } from '../../providers/types.js';

export interface HeldProvisioning {
  /** The registry to give the worker (and to read instances through). */
  readonly registry: ProviderRegistry;
  /** Instances the provider creates from now on read Provisioning until `release()`. */
  hold(): void;
  /** Every held instance reads its real state again, and new ones are not held. */
  release(): void;
}

export function holdProvisioning(registry: ProviderRegistry, name: string): HeldProvisioning {
  const inner = registry.get(name);
  if (!inner) throw new Error(`holdProvisioning: no provider named ${name}`);
  let holding = false;
  const held = new Set<string>();
  const seen = (instance: Instance): Instance => {
    if (!held.has(instance.id) || instance.state !== 'Running') return instance;
    const provisioning: Instance = { ...instance, state: 'Provisioning' };
    delete provisioning.ip;
    return provisioning;
  };
  const provider: Provider = {
    name: inner.name,
    type: inner.type,
    capabilities: inner.capabilities,
    async create(req, signal) {
      const id = await inner.create(req, signal);
      if (holding) held.add(id);
      return id;
    },
    get: async (id, signal) => seen(await inner.get(id, signal)),
    delete: (id, signal) => inner.delete(id, signal),
    async listByTag(signal, options) {
      const listing = await inner.listByTag(signal, options);
      const view: Listing = listing.map(seen);
      if (listing.unlisted) view.unlisted = listing.unlisted;
      return view;
    },
    ...(inner.check ? { check: inner.check.bind(inner) } : {}),
    ...(inner.idAliases ? { idAliases: inner.idAliases.bind(inner) } : {}),
    ...(inner.close ? { close: inner.close.bind(inner) } : {}),
  };
  return {
    registry: {
      get: (n) => (n === name ? provider : registry.get(n)),
      unbuilt: (n) => registry.unbuilt?.(n),
      names: () => registry.names(),
      close: () => registry.close(),
    },
    hold: () => {
      holding = true;
    },
    release: () => {
      holding = false;
      held.clear();
    },
  };
}
