/**
 * The coordinates of the project's custom resources (group, version,
 * plurals), for the few places whose very subject is the CRD or the wire:
 * a manifest a user applies with kubectl, an RBAC message that names a
 * resource, a Proxy built as data in a unit test. Everything that reads or
 * writes an object goes through the typed clients beside this file
 * (`proxies.ts`, `provider-healths.ts`, `proxy-pools.ts`) instead.
 */
export {
  API_VERSION,
  GROUP,
  PROVIDER_HEALTH_PLURAL,
  PROXY_PLURAL,
  PROXY_POOL_PLURAL,
  VERSION,
} from '../resources/proxy-schema.js';
