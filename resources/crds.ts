/**
 * Builds the two CustomResourceDefinitions from the schema literals. The
 * apiserver rejects JSON-Schema keywords outside its structural subset, so
 * `additionalProperties: false` (our TypeScript-side strictness) is dropped
 * here: the apiserver prunes unknown fields instead, which is the Kubernetes
 * convention.
 */
import {
  GROUP,
  VERSION,
  PROXY_PLURAL,
  PROVIDER_HEALTH_PLURAL,
  PROXY_POOL_PLURAL,
  proxyPoolSpecSchema,
  proxyPoolStatusSchema,
  proxySpecSchema,
  proxyStatusSchema,
  providerHealthStatusSchema,
} from './proxy-schema.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function structural(schema: unknown): Json {
  if (Array.isArray(schema)) return schema.map(structural);
  if (schema && typeof schema === 'object') {
    const out: { [key: string]: Json } = {};
    for (const [key, value] of Object.entries(schema as Record<string, unknown>)) {
      if (key === 'additionalProperties' && value === false) continue;
      out[key] = structural(value);
    }
    return out;
  }
  return schema as Json;
}

export function proxyCrd(): Json {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${PROXY_PLURAL}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: 'Namespaced',
      names: {
        kind: 'Proxy',
        listKind: 'ProxyList',
        plural: PROXY_PLURAL,
        singular: 'proxy',
        shortNames: ['px'],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Mode', type: 'string', jsonPath: '.spec.mode' },
            { name: 'Provider', type: 'string', jsonPath: '.spec.provider' },
            { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
            { name: 'IP', type: 'string', jsonPath: '.status.ip' },
            { name: 'Healthy', type: 'string', jsonPath: '.status.conditions[?(@.type=="Healthy")].status' },
            { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description:
                'Proxy is one HTTP egress proxy, provisioned by a provider (Managed) or tracked (External).',
              required: ['spec'],
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                spec: structural(proxySpecSchema),
                status: structural(proxyStatusSchema),
              },
            },
          },
        },
      ],
    },
  };
}

export function providerHealthCrd(): Json {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${PROVIDER_HEALTH_PLURAL}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: 'Cluster',
      names: {
        kind: 'ProviderHealth',
        listKind: 'ProviderHealthList',
        plural: PROVIDER_HEALTH_PLURAL,
        singular: 'providerhealth',
        shortNames: ['ph'],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Type', type: 'string', jsonPath: '.status.type' },
            { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
            { name: 'Targets', type: 'string', jsonPath: '.status.targetsReady' },
            { name: 'Last Check', type: 'date', jsonPath: '.status.lastCheckTime' },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description:
                'ProviderHealth reports the latest check of one configured provider. Written by the control plane.',
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                status: structural(providerHealthStatusSchema),
              },
            },
          },
        },
      ],
    },
  };
}

/**
 * The ProxyPool: N Proxies from one template. The scale subresource makes
 * `kubectl scale` and an HorizontalPodAutoscaler (or KEDA) work on it; its
 * selector is the pool label every member carries.
 */
export function proxyPoolCrd(): Json {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${PROXY_POOL_PLURAL}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: 'Namespaced',
      names: {
        kind: 'ProxyPool',
        listKind: 'ProxyPoolList',
        plural: PROXY_POOL_PLURAL,
        singular: 'proxypool',
        shortNames: ['pxpool'],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: {
            status: {},
            scale: {
              specReplicasPath: '.spec.replicas',
              statusReplicasPath: '.status.replicas',
              labelSelectorPath: '.status.selector',
            },
          },
          additionalPrinterColumns: [
            // The size kept: spec.replicas, or the autoscaler's choice.
            { name: 'Desired', type: 'integer', jsonPath: '.status.desiredReplicas' },
            { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
            { name: 'Up-to-date', type: 'integer', jsonPath: '.status.updatedReplicas' },
            { name: 'Available', type: 'integer', jsonPath: '.status.availableReplicas' },
            { name: 'Cost/h', type: 'string', jsonPath: '.status.costPerHour' },
            { name: 'Leases', type: 'integer', jsonPath: '.status.autoscaling.activeLeases', priority: 1 },
            { name: 'Rotated', type: 'integer', jsonPath: '.status.rotation.rotatedTotal', priority: 1 },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description:
                'ProxyPool keeps a number of Managed Proxies made from one template, replacing them in a rolling way that drains their leases first.',
              required: ['spec'],
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                spec: structural(proxyPoolSpecSchema),
                status: structural(proxyPoolStatusSchema),
              },
            },
          },
        },
      ],
    },
  };
}

export const CRD_FILES = {
  'proxies.crawl.example.com.yaml': proxyCrd,
  'providerhealths.crawl.example.com.yaml': providerHealthCrd,
  'proxypools.crawl.example.com.yaml': proxyPoolCrd,
} as const;
