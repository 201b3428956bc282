/**
 * The one source of truth for the Proxy and ProviderHealth resources.
 *
 * The CRD YAML under infra/k8s/crds/ is generated from these schema literals
 * (`npm run gen:crds`, and a unit test fails when the committed YAML drifts),
 * and the TypeScript types below are derived from the same literals with
 * json-schema-to-ts, so the apiserver's view and the code's view cannot
 * disagree. Pure data: safe to import from the workflow sandbox.
 */
import type { FromSchema } from 'json-schema-to-ts';

export const GROUP = 'crawl.example.com';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const PROXY_PLURAL = 'proxies';
export const PROVIDER_HEALTH_PLURAL = 'providerhealths';
export const PROXY_POOL_PLURAL = 'proxypools';

export const FINALIZER = 'crawl.example.com/finalizer';
export const ANNOTATION_SKIP_CLEANUP = 'crawl.example.com/skip-cleanup';
export const LABEL_CLOUD_INIT = 'crawl.example.com/cloud-init';
/** On a Secret that holds a proxy's credentials (generated ones and those an External Proxy references). */
export const LABEL_PROXY_CREDENTIALS = 'crawl.example.com/proxy-credentials';
/** On every Proxy a ProxyPool made: the pool's name (the scale subresource's selector). */
export const LABEL_POOL = 'crawl.example.com/pool';
/** On every Proxy a ProxyPool made: the hash of the template it was made from. */
export const LABEL_POOL_TEMPLATE_HASH = 'crawl.example.com/pool-template-hash';
/**
 * On a Proxy an operator cordoned ("true"; from the dashboard or
 * `kubectl annotate`): held leases keep working, no new lease is granted,
 * nothing else changes (its health is still probed, its workflow untouched).
 */
export const ANNOTATION_CORDONED = 'crawl.example.com/cordoned';

import { DEFAULT_MAX_LEASES, DEFAULT_PORT } from './proxy-defaults.js';

export { DEFAULT_MAX_LEASES, DEFAULT_PORT };
export const DEFAULT_HEALTH_CHECK = {
  probeURL: 'https://www.gstatic.com/generate_204',
  intervalSeconds: 30,
  timeoutSeconds: 10,
  failureThreshold: 3,
  successThreshold: 1,
  expectedStatusCodes: [200, 204],
} as const;

export const PHASES = ['Pending', 'Provisioning', 'Ready', 'Unhealthy', 'Deleting', 'Failed'] as const;
export type ProxyPhase = (typeof PHASES)[number];

const conditionSchema = {
  type: 'object',
  required: ['type', 'status', 'lastTransitionTime', 'reason', 'message'],
  properties: {
    type: { type: 'string', maxLength: 316 },
    status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
    observedGeneration: { type: 'integer', format: 'int64', minimum: 0 },
    lastTransitionTime: { type: 'string', format: 'date-time' },
    reason: { type: 'string', maxLength: 1024 },
    message: { type: 'string', maxLength: 32768 },
  },
  additionalProperties: false,
} as const;

export const proxySpecSchema = {
  type: 'object',
  required: ['mode'],
  properties: {
    mode: {
      type: 'string',
      enum: ['Managed', 'External'],
      description:
        'Managed proxies are provisioned by a provider; External ones are only tracked and health-checked.',
      'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'mode is immutable' }],
    },
    provider: {
      type: 'string',
      minLength: 1,
      maxLength: 63,
      description: 'Name of a configured provider instance (not its type). Required iff mode is Managed.',
      'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'provider is immutable' }],
    },
    placement: {
      type: 'object',
      properties: {
        region: { type: 'string' },
        zone: { type: 'string' },
        machineType: { type: 'string' },
        image: { type: 'string' },
      },
      additionalProperties: false,
    },
    port: { type: 'integer', minimum: 1, maximum: 65535, default: DEFAULT_PORT },
    cloudInit: {
      type: 'object',
      properties: {
        inline: { type: 'string' },
        secretRef: {
          type: 'object',
          required: ['name'],
          properties: {
            name: { type: 'string', minLength: 1 },
            key: { type: 'string', default: 'userdata' },
          },
          additionalProperties: false,
        },
      },
      additionalProperties: false,
      'x-kubernetes-validations': [
        {
          rule: 'has(self.inline) != has(self.secretRef)',
          message: 'exactly one of inline or secretRef must be set',
        },
      ],
    },
    endpoint: {
      type: 'object',
      required: ['host'],
      properties: {
        host: { type: 'string', minLength: 1 },
        port: { type: 'integer', minimum: 1, maximum: 65535, default: DEFAULT_PORT },
        credentialsSecretRef: {
          type: 'object',
          description:
            "The proxy's username and password: a Secret in the Proxy's namespace, labelled crawl.example.com/proxy-credentials=true. The prober and the gateway send them; a lease's proxyURL carries them to a tenant allowed the proxy.",
          required: ['name'],
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 253 },
            usernameKey: { type: 'string', minLength: 1, maxLength: 253, default: 'username' },
            passwordKey: { type: 'string', minLength: 1, maxLength: 253, default: 'password' },
          },
          additionalProperties: false,
          'x-kubernetes-validations': [
            {
              rule: "self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
              message: 'name must be a Secret name (a DNS subdomain)',
            },
            {
              rule: "self.usernameKey.matches('^[-._a-zA-Z0-9]+$') && self.passwordKey.matches('^[-._a-zA-Z0-9]+$')",
              message: 'usernameKey and passwordKey must be Secret keys (letters, digits, -, _ and .)',
            },
            {
              rule: 'self.usernameKey != self.passwordKey',
              message: 'usernameKey and passwordKey must differ',
            },
          ],
        },
      },
      additionalProperties: false,
    },
    attributes: { type: 'object', additionalProperties: { type: 'string' } },
    maxLeases: { type: 'integer', minimum: 0, default: DEFAULT_MAX_LEASES },
    drainTimeoutSeconds: {
      type: 'integer',
      minimum: 0,
      maximum: 86400,
      description:
        'When set (and above 0), replacing or deleting the instance first drains it: no new leases, held leases keep working, and the instance goes once its last lease ended or after this many seconds. Unset: replaced and deleted at once.',
    },
    healthCheck: {
      type: 'object',
      default: {},
      properties: {
        probeURL: { type: 'string', minLength: 1, default: DEFAULT_HEALTH_CHECK.probeURL },
        intervalSeconds: { type: 'integer', minimum: 1, default: DEFAULT_HEALTH_CHECK.intervalSeconds },
        timeoutSeconds: { type: 'integer', minimum: 1, default: DEFAULT_HEALTH_CHECK.timeoutSeconds },
        failureThreshold: { type: 'integer', minimum: 1, default: DEFAULT_HEALTH_CHECK.failureThreshold },
        successThreshold: { type: 'integer', minimum: 1, default: DEFAULT_HEALTH_CHECK.successThreshold },
        expectedStatusCodes: {
          type: 'array',
          items: { type: 'integer', minimum: 100, maximum: 599 },
          minItems: 1,
          default: [...DEFAULT_HEALTH_CHECK.expectedStatusCodes],
        },
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
  'x-kubernetes-validations': [
    {
      rule: "self.mode != 'Managed' || has(self.provider)",
      message: 'provider is required when mode is Managed',
    },
    {
      rule: "self.mode != 'External' || !has(self.provider)",
      message: 'provider must not be set when mode is External',
    },
    {
      rule: "self.mode != 'External' || has(self.endpoint)",
      message: 'endpoint is required when mode is External',
    },
    {
      rule: "self.mode != 'Managed' || !has(self.endpoint)",
      message: 'endpoint must not be set when mode is Managed',
    },
    // A field-level rule does not fire when the field disappears, so removal
    // of provider needs this whole-object form.
    {
      rule: 'has(self.provider) == has(oldSelf.provider)',
      message: 'provider is immutable (it cannot be added or removed)',
    },
  ],
} as const;

export const proxyStatusSchema = {
  type: 'object',
  properties: {
    phase: { type: 'string', enum: [...PHASES] },
    providerID: { type: 'string' },
    ip: { type: 'string' },
    port: {
      type: 'integer',
      minimum: 1,
      maximum: 65535,
      description:
        "The port the instance is reached on, when its provider chose it (a vendor's super-proxy, a proxy list's entry); absent: spec.port.",
    },
    expiresAt: {
      type: 'string',
      format: 'date-time',
      description:
        "When the provider ends the instance by itself (a vendor session's lifetime): a pool replaces the member, drained, before then; a Proxy of its own is replaced in place when it ends.",
    },
    latencyMillis: { type: 'integer', format: 'int64' },
    lastHealthReportTime: {
      type: 'string',
      format: 'date-time',
      description:
        "When the prober last reported this Proxy's health to the control plane: a verdict change, a latency change (at most every 10 minutes) or a re-send. The prober probes every healthCheck.intervalSeconds but reports only changes; probe recency is in the proxy_operator_healthcheck_* metrics.",
    },
    observedGeneration: { type: 'integer', format: 'int64' },
    specHash: { type: 'string' },
    message: { type: 'string' },
    conditions: {
      type: 'array',
      items: conditionSchema,
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
    },
  },
  additionalProperties: false,
} as const;

export const providerTargetSchema = {
  type: 'object',
  required: ['name', 'ready', 'lastTransitionTime'],
  properties: {
    name: { type: 'string' },
    address: { type: 'string' },
    ready: { type: 'boolean' },
    reason: { type: 'string' },
    message: { type: 'string', maxLength: 1024 },
    latencyMillis: { type: 'integer', format: 'int64' },
    lastTransitionTime: { type: 'string', format: 'date-time' },
    details: { type: 'object', additionalProperties: { type: 'string' } },
  },
  additionalProperties: false,
} as const;

export const providerHealthStatusSchema = {
  type: 'object',
  properties: {
    type: { type: 'string' },
    conditions: {
      type: 'array',
      items: conditionSchema,
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
    },
    targets: { type: 'array', items: providerTargetSchema },
    targetsReady: { type: 'string' },
    lastCheckTime: { type: 'string', format: 'date-time' },
  },
  additionalProperties: false,
} as const;

/**
 * A Proxy spec as a ProxyPool's template holds it: the Proxy's own schema
 * and rules, less the transition rules (`oldSelf`), which guard a Proxy's
 * immutable fields; a pool changes them by making new Proxies.
 */
function withoutTransitionRules<T>(schema: T): T {
  if (Array.isArray(schema)) return schema.map(withoutTransitionRules) as T;
  if (schema && typeof schema === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(schema as Record<string, unknown>)) {
      if (key === 'x-kubernetes-validations' && Array.isArray(value)) {
        const kept = (value as Array<{ rule: string }>).filter((v) => !v.rule.includes('oldSelf'));
        if (kept.length > 0) out[key] = kept;
        continue;
      }
      out[key] = withoutTransitionRules(value);
    }
    return out as T;
  }
  return schema;
}

export const DEFAULT_POOL_DRAIN_TIMEOUT_SECONDS = 3600;

export const proxyPoolSpecSchema = {
  type: 'object',
  required: ['template'],
  properties: {
    replicas: { type: 'integer', minimum: 0, maximum: 10000, default: 1 },
    template: {
      type: 'object',
      required: ['spec'],
      properties: {
        metadata: {
          type: 'object',
          properties: {
            labels: { type: 'object', additionalProperties: { type: 'string' } },
            annotations: { type: 'object', additionalProperties: { type: 'string' } },
          },
          additionalProperties: false,
        },
        spec: withoutTransitionRules(proxySpecSchema),
      },
      additionalProperties: false,
      'x-kubernetes-validations': [
        {
          rule: "self.spec.mode == 'Managed'",
          message: 'a pool makes Managed proxies: template.spec.mode must be Managed',
        },
      ],
    },
    strategy: {
      type: 'object',
      // Whole, not {}: the CEL rule below is checked against the default as written.
      default: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: DEFAULT_POOL_DRAIN_TIMEOUT_SECONDS },
      properties: {
        maxSurge: { type: 'integer', minimum: 0, default: 1 },
        maxUnavailable: { type: 'integer', minimum: 0, default: 0 },
        drainTimeoutSeconds: {
          type: 'integer',
          minimum: 0,
          maximum: 86400,
          default: DEFAULT_POOL_DRAIN_TIMEOUT_SECONDS,
        },
      },
      additionalProperties: false,
      'x-kubernetes-validations': [
        {
          rule: 'self.maxSurge > 0 || self.maxUnavailable > 0',
          message: 'maxSurge and maxUnavailable cannot both be 0 (a rollout could never start)',
        },
      ],
    },
    rotation: {
      type: 'object',
      description:
        'Replace members (drain, surge, as in a rollout) when they age or collect ban reports: a new instance, a new address where the provider gives one.',
      properties: {
        maxAgeSeconds: {
          type: 'integer',
          minimum: 10,
          maximum: 31536000,
          description:
            'Replace each member once it is this old, less up to 10% jitter (deterministic per member) so members do not all fall due together.',
        },
        afterBans: {
          type: 'object',
          description:
            'Replace a member that collects `reports` banned reports from at least `distinctTargets` targets within `windowSeconds`.',
          properties: {
            reports: { type: 'integer', minimum: 1, maximum: 1000, default: 3 },
            distinctTargets: { type: 'integer', minimum: 1, maximum: 1000, default: 2 },
            windowSeconds: { type: 'integer', minimum: 10, maximum: 86400, default: 600 },
          },
          additionalProperties: false,
          'x-kubernetes-validations': [
            {
              rule: 'self.distinctTargets <= self.reports',
              message: 'afterBans.distinctTargets cannot exceed afterBans.reports',
            },
          ],
        },
      },
      additionalProperties: false,
    },
    autoscaling: {
      type: 'object',
      description:
        'Size the pool on lease demand (leases held and requests refused) instead of spec.replicas. One or the other per pool: an HPA or KEDA driving the scale subresource, or this.',
      required: ['maxReplicas'],
      properties: {
        minReplicas: { type: 'integer', minimum: 1, maximum: 10000, default: 1 },
        maxReplicas: { type: 'integer', minimum: 1, maximum: 10000 },
        targetUtilization: {
          type: 'number',
          minimum: 0.05,
          maximum: 1,
          default: 0.7,
          description: 'Wanted activeLeases / (ready members x maxLeases), between 0 and 1.',
        },
        scaleUpStabilizationSeconds: { type: 'integer', minimum: 0, maximum: 3600, default: 30 },
        scaleDownStabilizationSeconds: { type: 'integer', minimum: 0, maximum: 3600, default: 300 },
      },
      additionalProperties: false,
      'x-kubernetes-validations': [
        {
          rule: 'self.minReplicas <= self.maxReplicas',
          message: 'autoscaling.minReplicas cannot exceed autoscaling.maxReplicas',
        },
      ],
    },
    budget: {
      type: 'object',
      description:
        "What the pool's instances may cost, in the providers config's currency, at its entry's hourly price: autoscaling never keeps more members than the budget pays for (condition BudgetLimited); spec.replicas (kubectl scale) beyond it is kept but flagged; with maxPerDay, rotation waits while a replacement would take the last 24 hours over it.",
      required: ['maxPerHour'],
      properties: {
        maxPerHour: {
          type: 'number',
          minimum: 0,
          description: "The most the pool's running instances may cost per hour.",
        },
        maxPerDay: {
          type: 'number',
          minimum: 0,
          description:
            'The most they may cost over any 24 hours: a run rate above maxPerDay / 24 is not kept either.',
        },
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
} as const;

export const proxyPoolStatusSchema = {
  type: 'object',
  properties: {
    replicas: { type: 'integer', format: 'int32' },
    readyReplicas: { type: 'integer', format: 'int32' },
    updatedReplicas: { type: 'integer', format: 'int32' },
    availableReplicas: { type: 'integer', format: 'int32' },
    drainingReplicas: { type: 'integer', format: 'int32' },
    selector: { type: 'string' },
    templateHash: { type: 'string' },
    observedGeneration: { type: 'integer', format: 'int64' },
    desiredReplicas: {
      type: 'integer',
      format: 'int32',
      description: 'The size the pool keeps: spec.replicas, or the autoscaler’s choice.',
    },
    costPerHour: {
      type: 'string',
      description:
        "What the pool's running instances cost per hour now, at their entry's price (`0.2000 USD`), or `unknown` when the providers config gives no price for them. Instances only: relayed traffic is in egress_proxy_cost_total.",
    },
    costLastHour: {
      type: 'string',
      description:
        "What the pool's instances cost over the hour before the status was written (`0.1500 USD`), or `unknown`.",
    },
    autoscaling: {
      type: 'object',
      properties: {
        activeLeases: { type: 'integer', format: 'int32' },
        leaseCapacity: { type: 'integer', format: 'int32' },
        utilizationPercent: { type: 'integer', format: 'int32' },
        recentDenials: { type: 'integer', format: 'int32' },
        recommendation: { type: 'integer', format: 'int32' },
        lastScaleTime: { type: 'string', format: 'date-time' },
        lastReportTime: { type: 'string', format: 'date-time' },
      },
      additionalProperties: false,
    },
    rotation: {
      type: 'object',
      properties: {
        rotatedTotal: { type: 'integer', format: 'int64' },
        lastRotated: { type: 'string' },
        lastRotationReason: { type: 'string' },
        lastRotationTime: { type: 'string', format: 'date-time' },
        nextRotationTime: { type: 'string', format: 'date-time' },
      },
      additionalProperties: false,
    },
    conditions: {
      type: 'array',
      items: conditionSchema,
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
    },
  },
  additionalProperties: false,
} as const;

export type Condition = FromSchema<typeof conditionSchema>;
/** A spec as stored: the apiserver has materialised every default. */
export type ProxySpec = FromSchema<typeof proxySpecSchema>;
/** A spec as a user writes it: defaulted fields may be omitted. */
export type ProxySpecInput = FromSchema<typeof proxySpecSchema, { keepDefaultedPropertiesOptional: true }>;
export type ProxyStatus = FromSchema<typeof proxyStatusSchema>;
export type ProviderTarget = FromSchema<typeof providerTargetSchema>;
export type ProviderHealthStatus = FromSchema<typeof providerHealthStatusSchema>;
/** A pool spec as stored (defaults materialised). */
export type ProxyPoolSpec = FromSchema<typeof proxyPoolSpecSchema>;
export type ProxyPoolSpecInput = FromSchema<
  typeof proxyPoolSpecSchema,
  { keepDefaultedPropertiesOptional: true }
>;
export type ProxyPoolStatus = FromSchema<typeof proxyPoolStatusSchema>;

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  finalizers?: string[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface Proxy {
  apiVersion: typeof API_VERSION;
  kind: 'Proxy';
  metadata: ObjectMeta;
  spec: ProxySpec;
  status?: ProxyStatus;
}

export interface ProviderHealth {
  apiVersion: typeof API_VERSION;
  kind: 'ProviderHealth';
  metadata: ObjectMeta;
  status?: ProviderHealthStatus;
}

export interface ProxyPool {
  apiVersion: typeof API_VERSION;
  kind: 'ProxyPool';
  metadata: ObjectMeta;
  spec: ProxyPoolSpec;
  status?: ProxyPoolStatus;
}
