/**
 * The contract's decorators (WithMetrics, WithTracing) wrap a provider the
 * same way: something around each backend call, everything else passed
 * through. `buildProviders` applies them, so no provider counts or traces
 * its own operations.
 */
import type { Provider, ProviderOperation } from './types.js';

/** Runs one backend call; must return (or throw) what `call` does. */
export type AroundCall = <T>(operation: ProviderOperation, call: () => Promise<T>) => Promise<T>;

/** `provider` with `around` about each create/get/delete/listByTag; name, capabilities, check, credentialsOf, idAliases and close as they are. */
export function aroundEachCall(provider: Provider, around: AroundCall): Provider {
  const wrapped: Provider = {
    name: provider.name,
    type: provider.type,
    ...(provider.capabilities ? { capabilities: provider.capabilities } : {}),
    create: (req, signal) => around('create', () => provider.create(req, signal)),
    get: (id, signal) => around('get', () => provider.get(id, signal)),
    delete: (id, signal) => around('delete', () => provider.delete(id, signal)),
    listByTag: (signal, options) => around('list', () => provider.listByTag(signal, options)),
  };
  if (provider.check) wrapped.check = (signal) => provider.check!(signal);
  if (provider.credentialsOf) wrapped.credentialsOf = (id, signal) => provider.credentialsOf!(id, signal);
  if (provider.idAliases) wrapped.idAliases = (id) => provider.idAliases!(id);
  if (provider.close) wrapped.close = () => provider.close!();
  return wrapped;
}
