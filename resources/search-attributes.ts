/**
 * Custom search attributes that make Proxy workflows findable in the Web UI
 * and with `temporal workflow list --query`. Registered with the dev server
 * at start (`--search-attribute Name=Keyword`) and, on a real cluster, with
 * `temporal operator search-attribute create` (see README, Operations).
 */
export const SEARCH_ATTRIBUTES = {
  ProxyNamespace: 'Keyword',
  ProxyName: 'Keyword',
  ProxyProvider: 'Keyword',
  ProxyPhase: 'Keyword',
  ProxyMode: 'Keyword',
} as const;

export type SearchAttributeName = keyof typeof SEARCH_ATTRIBUTES;
