/**
 * The contract's WithTracing decorator: each create/get/delete/listByTag
 * of a provider `buildProviders` makes is one operation span (tracing on),
 * named `<type> <operation>`, whose result is the ProviderError's class.
 * The requests a provider makes inside (`providerCall`: an apiserver or
 * Compute request, an SSH command) become its children through the active
 * context and inherit its operation. With tracing off it is a direct call.
 */
import { providerOperation } from '../tracing/seam.js';
import { aroundEachCall } from './decorate.js';
import type { Provider } from './types.js';

export function withTracing(provider: Provider): Provider {
  return aroundEachCall(provider, (operation, call) => providerOperation(provider, operation, call));
}
