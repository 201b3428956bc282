/**
 * The providers config file: YAML, a list of named provider instances.
 *
 *   providers:
 *     - name: local            # what Proxy.spec.provider refers to
 *       type: local            # one of PROVIDER_TYPES
 *       local:                 # the block named after the type; optional when every field has a default
 *         startDelaySeconds: 5
 *
 * Validation is strict: unknown fields, a block for another type, a bad
 * value, a name that is not a lowercase DNS-1123 label or a duplicate name
 * are all rejected with a message naming the field path
 * (`providers[1].local.startDelay: unknown field`).
 *
 * The list of provider types exists once, in PROVIDER_TYPES: the schema is
 * derived from it and `buildProviders` constructs from it (the seed kept two
 * lists, contract §13).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { localConfigSchema, type LocalConfig } from './local/config.js';
import { createLocalProvider } from './local/provider.js';
import { kubernetesConfigSchema, type KubernetesConfig } from './kubernetes/config.js';
import { createKubernetesProvider } from './kubernetes/provider.js';
import { awsConfigSchema, type AwsConfig } from './aws/config.js';
import { createAwsProvider } from './aws/provider.js';
import { gcpConfigSchema, type GcpConfig } from './gcp/config.js';
import { createGcpProvider } from './gcp/provider.js';
import { kvmConfigSchema, type KvmConfig } from './kvm/config.js';
import { createKvmProvider } from './kvm/provider.js';
import { proxmoxConfigSchema, type ProxmoxConfig } from './proxmox/config.js';
import { createProxmoxProvider } from './proxmox/provider.js';
import type { Provider } from './types.js';
import type { ClaimStore, ClaimStoreFactory, SecretReader } from './shared/claims.js';
import { listConfigSchema, type ListConfig } from './list/config.js';
import { createListProvider } from './list/provider.js';
import { vendorConfigSchema, type VendorConfig } from './vendor/config.js';
import { createVendorProvider } from './vendor/provider.js';
import { withMetrics, type ProviderRequestMetrics } from './metrics.js';
import { withTracing } from './tracing.js';
import { providerHealthSchema, type ProviderHealth } from './health-config.js';
import { currencySchema, makesSpot, pricesSchema, type EntryPrices, type PriceBook } from './prices.js';

/** What a provider factory may use; passed in by the composition root. */
export interface ProviderDeps {
  logger: Logger;
  /** Root for providers that keep state on disk (each uses a subdirectory unless configured). */
  stateRoot: string;
  /**
   * When set, `buildProviders` wraps every provider it builds in
   * `withMetrics` (the contract's WithMetrics): no provider counts its own
   * calls. Every provider is also wrapped in `withTracing` (operation spans,
   * a direct call with tracing off).
   */
  requestMetrics?: ProviderRequestMetrics;
  /** A namespace-scoped install's namespaces (`--watch-namespaces`): the kubernetes provider lists pods there only. */
  watchNamespaces?: readonly string[];
  /**
   * The installation identity the worker serves (what the instances' installation
   * mark carries): for a provider that owns resources besides instances (the gcp
   * firewall rule, named and marked per installation). Absent: such resources are
   * not managed (a tool that builds providers for something else).
   */
  installation?: string;
  /**
   * Every configured provider entry (name and type), built or not: whose
   * resources are still wanted. `buildProviders` fills it from the config it
   * builds; absent, a provider collects nothing of other entries.
   */
  entries?: readonly ProviderEntryRef[];
  /**
   * Where a provider without a backend of its own (vendor, list) keeps its
   * claims: the worker's apiserver. Absent: such a provider cannot be built.
   */
  claims?: ClaimStoreFactory;
  /** Reads a Secret a provider's config names (a vendor account's credentials). */
  readSecret?: SecretReader;
}

/** A configured provider entry, by name and type. */
export interface ProviderEntryRef {
  name: string;
  type: string;
}

export interface ProviderTypeDefinition<S extends z.ZodType> {
  /** The block under `<type>:`; a strict object. */
  configSchema: S;
  /** Must not dial anything (contract §7); throw ProvidersConfigError only for config problems. */
  build(name: string, config: z.output<S>, deps: ProviderDeps): Provider;
}

/** The claim store of a provider that keeps claims (vendor, list); a process without an apiserver cannot build one. */
function claimStore(deps: ProviderDeps, type: string, name: string, namespace: string): ClaimStore {
  if (!deps.claims)
    throw new ProvidersConfigError(`provider "${name}": type "${type}" keeps its claims in Kubernetes`, [
      `type: "${type}" needs the worker's apiserver for its claims`,
    ]);
  return deps.claims(name, namespace);
}

function defineType<S extends z.ZodType>(def: ProviderTypeDefinition<S>): ProviderTypeDefinition<S> {
  return def;
}

/** A type whose name is reserved and whose blocks are accepted, but which this version cannot build. */
export function notImplemented(type: string) {
  return defineType({
    // Its fields are not specified yet: accept any mapping so a config written
    // for a later version fails with the clear message below, not a schema error.
    configSchema: z.record(z.string(), z.unknown()),
    build(name) {
      throw new ProvidersConfigError(
        `provider "${name}": type "${type}" is not implemented in this version`,
        [`type: "${type}" is not implemented in this version`],
      );
    },
  });
}

export const PROVIDER_TYPES = {
  local: defineType({
    configSchema: localConfigSchema,
    build: (name: string, config: LocalConfig, deps: ProviderDeps) =>
      createLocalProvider({
        name,
        config,
        logger: deps.logger,
        stateDir: config.stateDir ?? join(deps.stateRoot, 'local', name),
      }),
  }),
  kubernetes: defineType({
    configSchema: kubernetesConfigSchema,
    build: (name: string, config: KubernetesConfig, deps: ProviderDeps) =>
      createKubernetesProvider({ name, config, logger: deps.logger, listNamespaces: deps.watchNamespaces }),
  }),
  gcp: defineType({
    configSchema: gcpConfigSchema,
    build: (name: string, config: GcpConfig, deps: ProviderDeps) =>
      createGcpProvider({
        name,
        config,
        logger: deps.logger,
        installation: deps.installation,
        entries: deps.entries,
      }),
  }),
  aws: defineType({
    configSchema: awsConfigSchema,
    build: (name: string, config: AwsConfig, deps: ProviderDeps) =>
      createAwsProvider({
        name,
        config,
        logger: deps.logger,
        onInterruption: () => deps.requestMetrics?.interrupted(name),
        installation: deps.installation,
        entries: deps.entries,
      }),
  }),
  kvm: defineType({
    configSchema: kvmConfigSchema,
    build: (name: string, config: KvmConfig, deps: ProviderDeps) =>
      createKvmProvider({ name, config, logger: deps.logger }),
  }),
  list: defineType({
    configSchema: listConfigSchema,
    build: (name: string, config: ListConfig, deps: ProviderDeps) =>
      createListProvider({
        name,
        config,
        logger: deps.logger,
        claims: claimStore(deps, 'list', name, config.claimsNamespace),
      }),
  }),
  vendor: defineType({
    configSchema: vendorConfigSchema,
    build: (name: string, config: VendorConfig, deps: ProviderDeps) => {
      if (!deps.readSecret)
        throw new ProvidersConfigError(`provider "${name}": type "vendor" reads its account's Secret`, [
          'type: "vendor" needs the worker\'s apiserver for its account\'s Secret',
        ]);
      return createVendorProvider({
        name,
        config,
        logger: deps.logger,
        claims: claimStore(deps, 'vendor', name, config.claimsNamespace),
        readSecret: deps.readSecret,
      });
    },
  }),
  proxmox: defineType({
    configSchema: proxmoxConfigSchema,
    build: (name: string, config: ProxmoxConfig, deps: ProviderDeps) =>
      createProxmoxProvider({ name, config, logger: deps.logger }),
  }),
} as const;

export type ProviderTypeName = keyof typeof PROVIDER_TYPES;
export const PROVIDER_TYPE_NAMES = Object.keys(PROVIDER_TYPES) as [ProviderTypeName, ...ProviderTypeName[]];

type ConfigOf<K extends ProviderTypeName> = z.output<(typeof PROVIDER_TYPES)[K]['configSchema']>;

/**
 * One validated entry: the type's block, parsed with its defaults, is
 * `config`; `health` (optional) is the prober's settings for its Proxies
 * (health-config.ts), which no provider reads; `prices` (optional) what its
 * instances and traffic cost (prices.ts), which no provider reads either.
 */
export type ProviderConfigEntry = {
  [K in ProviderTypeName]: {
    name: string;
    type: K;
    config: ConfigOf<K>;
    health?: ProviderHealth;
    prices?: EntryPrices;
  };
}[ProviderTypeName];

export interface ProvidersConfig {
  /** The currency of every price in the file (present whenever an entry has prices). */
  currency?: string;
  providers: ProviderConfigEntry[];
}

/** The entries' prices, for the cost meters (api, gateway) and the pools' budgets (worker). */
export function priceBookOf(config: ProvidersConfig): PriceBook {
  const entries: PriceBook['entries'] = Object.fromEntries(
    config.providers.flatMap((p) =>
      p.prices ? [[p.name, { spot: makesSpot(p.type, p.config), prices: p.prices }] as const] : [],
    ),
  );
  return config.currency !== undefined ? { currency: config.currency, entries } : { entries };
}

export class ProvidersConfigError extends Error {
  override readonly name = 'ProvidersConfigError';
  /** One line per problem, each starting with the field path. */
  readonly issues: string[];
  constructor(message: string, issues: string[]) {
    super(message);
    this.issues = issues;
  }
}

/** Lowercase RFC 1123 label: what spec.provider and the ProviderHealth object name accept. */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const providerNameSchema = z
  .string()
  .min(1, 'must not be empty')
  .max(63, 'must be at most 63 characters')
  .regex(DNS_LABEL, 'must be a lowercase DNS-1123 label (a-z, 0-9, "-", starting and ending alphanumeric)');

const blockShape: Record<ProviderTypeName, z.ZodOptional<z.ZodType>> = Object.fromEntries(
  PROVIDER_TYPE_NAMES.map((t) => [t, (PROVIDER_TYPES[t].configSchema as z.ZodType).optional()]),
) as Record<ProviderTypeName, z.ZodOptional<z.ZodType>>;

const entrySchema = z
  .strictObject({
    name: providerNameSchema,
    type: z.enum(PROVIDER_TYPE_NAMES),
    health: providerHealthSchema.optional(),
    prices: pricesSchema.optional(),
    ...blockShape,
  })
  .transform((entry, ctx) => {
    for (const other of PROVIDER_TYPE_NAMES) {
      if (other !== entry.type && entry[other] !== undefined) {
        ctx.addIssue({ code: 'custom', path: [other], message: `block does not match type "${entry.type}"` });
      }
    }
    // A session is what a vendor sells; other entries' Proxies are instances, priced by the hour.
    if (entry.prices?.perSession !== undefined && entry.type !== 'vendor')
      ctx.addIssue({
        code: 'custom',
        path: ['prices', 'perSession'],
        message: `is for vendor entries only (type "${entry.type}" is priced per instance-hour)`,
      });
    const schema: z.ZodType = PROVIDER_TYPES[entry.type].configSchema;
    const block = entry[entry.type];
    let config: unknown = block;
    if (block === undefined) {
      // No block: the type's defaults, or its required-field errors.
      const parsed = schema.safeParse({});
      if (parsed.success) config = parsed.data;
      else
        for (const issue of parsed.error.issues)
          ctx.addIssue({ code: 'custom', path: [entry.type, ...issue.path], message: issue.message });
    }
    return {
      name: entry.name,
      type: entry.type,
      config,
      ...(entry.health ? { health: entry.health } : {}),
      ...(entry.prices ? { prices: entry.prices } : {}),
    } as ProviderConfigEntry;
  });

const fileSchema = z
  .strictObject({ currency: currencySchema.optional(), providers: z.array(entrySchema) })
  .superRefine((file, ctx) => {
    // Prices without a currency would be numbers of nothing: stated once, here.
    const priced = file.providers.findIndex((p) => p.prices !== undefined);
    if (priced >= 0 && file.currency === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['currency'],
        message: `is required when an entry has prices (providers[${priced}].prices): a three-letter code such as USD`,
      });
    const seen = new Map<string, number>();
    file.providers.forEach((p, i) => {
      const first = seen.get(p.name);
      if (first === undefined) seen.set(p.name, i);
      else
        ctx.addIssue({
          code: 'custom',
          path: ['providers', i, 'name'],
          message: `duplicate provider name "${p.name}" (first used at providers[${first}].name)`,
        });
    });
  });

/** `providers[1].local.startDelay` from zod's path segments. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += out === '' ? String(seg) : `.${String(seg)}`;
  }
  return out === '' ? '(top level)' : out;
}

function issueLines(issues: readonly z.core.$ZodIssue[]): string[] {
  const lines: string[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) lines.push(`${formatPath([...issue.path, key])}: unknown field`);
    } else {
      lines.push(`${formatPath(issue.path)}: ${issue.message}`);
    }
  }
  return lines;
}

/** Parses and validates a providers config; throws ProvidersConfigError naming every bad field. */
export function parseProvidersConfig(text: string, sourceName: string): ProvidersConfig {
  let raw: unknown;
  try {
    raw = parseYaml(text, { uniqueKeys: true, prettyErrors: true });
  } catch (err) {
    const detail = err instanceof Error ? err.message.split('\n')[0] : 'unparsable';
    throw new ProvidersConfigError(`${sourceName}: invalid YAML: ${detail}`, [`(yaml): ${detail}`]);
  }
  if (raw === null || raw === undefined) raw = {};
  const result = fileSchema.safeParse(raw);
  if (!result.success) {
    const lines = issueLines(result.error.issues);
    throw new ProvidersConfigError(
      `${sourceName}: invalid providers config:\n  ${lines.join('\n  ')}`,
      lines,
    );
  }
  return result.data;
}

export async function loadProvidersConfig(path: string): Promise<ProvidersConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const raw = (err as { code?: unknown }).code;
    const code = typeof raw === 'string' ? raw : 'error';
    throw new ProvidersConfigError(`${path}: cannot read providers config (${code})`, [
      `(file): cannot read (${code})`,
    ]);
  }
  return parseProvidersConfig(text, path);
}

/** The embedded config `dev` uses: one `local` provider named `local`, all defaults. */
export const DEV_PROVIDERS_YAML = `# Embedded providers config for \`egress-proxies dev\`.
providers:
  - name: local
    type: local
`;

/**
 * `dev`'s providers: `local`, and with `dev --node` a `kubernetes` provider
 * on the node's cluster (the dev apiserver itself) running the Squid image
 * imported into the node. Its pods go in their Proxy's namespace, and may
 * reach the node's gateway (the IP echo their sample probes) besides the internet.
 */
export function devProvidersConfig(node?: {
  kubeconfig: string;
  image: string;
  /** The node's gateway, where dev's IP echo for pods listens: the one internal target its pods may reach. */
  gateway: string;
}): ProvidersConfig {
  const yaml = node
    ? `${DEV_PROVIDERS_YAML}  - name: kubernetes
    type: kubernetes
    kubernetes:
      kubeconfig: ${JSON.stringify(node.kubeconfig)}
      image: ${JSON.stringify(node.image)}
      egress: { allowCidrs: [${JSON.stringify(`${node.gateway}/32`)}] }
`
    : DEV_PROVIDERS_YAML;
  return parseProvidersConfig(yaml, '<embedded dev providers config>');
}

/** The built providers, by configured name. */
export interface ProviderRegistry {
  /** The provider configured under `name`, or undefined (the caller raises its own "unknown provider"). */
  get(name: string): Provider | undefined;
  /**
   * Why a configured provider could not be built (a type this version does
   * not build, say), or undefined. Such a provider is in no other list: its
   * Proxies fail ProviderNotConfigured with this reason.
   */
  unbuilt?(name: string): string | undefined;
  /** Configured names, in config order. */
  names(): string[];
  /** Releases every provider's listeners and connections. */
  close(): Promise<void>;
}

/**
 * Constructs every configured provider (no dialling: contract §7). An entry
 * whose build throws a ProvidersConfigError (a type this version does not
 * build, a block its factory rejects) fails only that provider: it is
 * logged and kept as unbuilt with its reason, so one unbuildable entry
 * (the seed's sample config names gcp and kvm) does not stop the worker
 * serving the others. Any other error aborts the set and closes the ones
 * already built.
 */
export function buildProviders(
  config: ProvidersConfig,
  deps: ProviderDeps,
  /** The factories by type; tests swap one for an unbuildable type whatever this version implements. */
  types: Partial<Record<ProviderTypeName, Pick<ProviderTypeDefinition<z.ZodType>, 'build'>>> = PROVIDER_TYPES,
): ProviderRegistry {
  const built = new Map<string, Provider>();
  const unbuilt = new Map<string, string>();
  // Every entry of this config, the unbuilt ones too: a provider must not collect what they made.
  const entries = config.providers.map(({ name, type }) => ({ name, type }));
  const factoryDeps: ProviderDeps = { ...deps, entries };
  try {
    for (const entry of config.providers) {
      const def = types[entry.type] ?? PROVIDER_TYPES[entry.type];
      try {
        const provider = def.build(entry.name, entry.config, factoryDeps);
        // Tracing outside metrics: the operation span covers all of the call, the count included.
        built.set(
          entry.name,
          withTracing(deps.requestMetrics ? withMetrics(provider, deps.requestMetrics) : provider),
        );
      } catch (err) {
        if (!(err instanceof ProvidersConfigError)) throw err;
        unbuilt.set(entry.name, err.message);
        deps.logger.error(
          { provider: entry.name, type: entry.type, reason: err.message },
          'provider not built; its Proxies fail ProviderNotConfigured',
        );
      }
    }
  } catch (err) {
    void closeAll([...built.values()]);
    throw err;
  }
  return {
    get: (name) => built.get(name),
    unbuilt: (name) => unbuilt.get(name),
    names: () => [...built.keys()],
    close: () => closeAll([...built.values()]),
  };
}

async function closeAll(providers: Provider[]): Promise<void> {
  await Promise.allSettled(providers.map((p) => (p.close === undefined ? Promise.resolve() : p.close())));
}
