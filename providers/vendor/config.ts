/**
 * The `vendor` provider's config block: one vendor account.
 *
 *   - name: oxylabs
 *     type: vendor
 *     vendor:
 *       preset: oxylabs                 # endpoint, templates and limits from providers/vendor/presets.ts
 *       credentialsSecretRef: { namespace: egress-proxies, name: oxylabs-account }
 *       country: de                     # when a Proxy names none (optional)
 *       sessionLifetimeSeconds: 1800    # within the preset's bounds
 *
 * Without a preset, `endpoint`, `usernameTemplate` and `passwordTemplate`
 * are required and the custom rules apply (presets.ts, CUSTOM_RULES).
 * Everything a template could get wrong is refused here, with the field
 * named: a template that does not parse, an unknown placeholder, `{password}`
 * in the username, no `{session}` that is always sent, a `params` value or a
 * rendering (with the params and sample values) holding characters the
 * vendor does not allow, a lifetime outside its bounds or not in whole
 * minutes for `{minutes}`. The account's own values are not known here
 * (they live in the Secret): render-time checks cover them, and never quote
 * the password.
 */
import { z } from 'zod';
import { CUSTOM_RULES, PRESET_NAMES, PRESETS, type PresetName, type VendorPreset } from './presets.js';
import {
  BUILTIN_PLACEHOLDERS,
  companionsOf,
  isBuiltinPlaceholder,
  newSessionId,
  placeholdersOf,
  renderCredentials,
  TemplateError,
  type SessionRules,
  type VendorCharRules,
  type VendorTemplates,
} from './template.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A Secret's data key. */
const SECRET_KEY = /^[-._a-zA-Z0-9]+$/;

const dnsLabel = z
  .string()
  .max(63, 'must be at most 63 characters')
  .regex(DNS_LABEL, 'must be a lowercase DNS-1123 label (a-z, 0-9, "-", starting and ending alphanumeric)');
const secretKey = z
  .string()
  .min(1)
  .max(253)
  .regex(SECRET_KEY, 'must be a Secret data key (letters, digits, "-", "_", ".")');

/** Sample values a template is rendered with at load: within every preset's rules. */
const SAMPLE_ACCOUNT = { username: 'sampleuser1', password: 'samplePassw0rd' };
const SAMPLE_COUNTRY = 'us';

const rawSchema = z.strictObject({
  /** Endpoint, templates and limits from a preset (providers/vendor/presets.ts). */
  preset: z.enum(PRESET_NAMES).optional(),
  /** The vendor's super-proxy. Default: the preset's; required without one. */
  endpoint: z
    .strictObject({
      host: z.string().min(1).max(253),
      port: z.int().min(1).max(65_535),
    })
    .optional(),
  /** The account's username and password. */
  credentialsSecretRef: z.strictObject({
    namespace: dnsLabel,
    name: z
      .string()
      .max(253, 'must be at most 253 characters')
      .regex(DNS_SUBDOMAIN, 'must be a lowercase DNS-1123 subdomain'),
    usernameKey: secretKey.default('username'),
    passwordKey: secretKey.default('password'),
  }),
  /** Default: the preset's; required without one. */
  usernameTemplate: z.string().min(1).max(1_024).optional(),
  /** Default: the preset's; required without one. */
  passwordTemplate: z.string().min(1).max(1_024).optional(),
  /** Fixed values for the templates' other placeholders (Bright Data's `zone`). */
  params: z
    .record(
      z.string().regex(/^[A-Za-z][A-Za-z0-9_]*$/, 'a params key is a placeholder name'),
      z.string().max(256),
    )
    .default({}),
  /** How long a session keeps its exit address. Default: the preset's; within its bounds. */
  sessionLifetimeSeconds: z.int().positive().optional(),
  /** The country of a Proxy whose attributes name none: lowercase ISO 3166-1 alpha-2. */
  country: z
    .string()
    .regex(/^[a-z]{2}$/, 'must be a lowercase ISO 3166-1 alpha-2 code such as "us"')
    .optional(),
  /** The Proxy attributes that give its country, first found wins. */
  countryAttributes: z.array(z.string().min(1).max(63)).min(1).default(['country', 'geo']),
  /** Where the provider keeps its session claims. */
  claimsNamespace: dnsLabel.default('egress-proxies'),
});

/** The parsed block, with every default resolved. */
export interface VendorConfig {
  preset?: PresetName;
  endpoint: { host: string; port: number };
  credentialsSecretRef: { namespace: string; name: string; usernameKey: string; passwordKey: string };
  usernameTemplate: string;
  passwordTemplate: string;
  params: Record<string, string>;
  sessionLifetimeSeconds: number;
  country?: string;
  countryAttributes: string[];
  claimsNamespace: string;
  /** The templates and the vendor's rules, as renderCredentials takes them. */
  templates: VendorTemplates;
  /** The lifetime bounds that applied. */
  lifetime: VendorPreset['lifetime'];
  idleTimeoutSeconds?: number;
}

type Ctx = z.core.$RefinementCtx;

function refuse(ctx: Ctx, path: PropertyKey[], message: string): void {
  ctx.addIssue({ code: 'custom', path, message });
}

/** First character of `text` the rule refuses, or undefined. */
function offending(text: string, rule: { pattern: RegExp }): string | undefined {
  for (const ch of text) if (!rule.pattern.test(ch)) return ch;
  return undefined;
}

function checkTemplates(
  ctx: Ctx,
  templates: { usernameTemplate: string; passwordTemplate: string },
  params: Record<string, string>,
): boolean {
  let ok = true;
  const fields = ['usernameTemplate', 'passwordTemplate'] as const;
  const names: Partial<Record<(typeof fields)[number], string[]>> = {};
  for (const field of fields) {
    try {
      names[field] = placeholdersOf(templates[field]);
    } catch (err) {
      if (!(err instanceof TemplateError)) throw err;
      refuse(ctx, [field], err.message);
      ok = false;
      continue;
    }
    for (const name of names[field]) {
      if (!isBuiltinPlaceholder(name) && !Object.hasOwn(params, name)) {
        refuse(
          ctx,
          [field],
          `unknown placeholder {${name}}: not built in (${BUILTIN_PLACEHOLDERS.join(', ')}) and not a key of params`,
        );
        ok = false;
      }
    }
  }
  if (!ok) return false;
  if (names.usernameTemplate!.includes('password')) {
    refuse(ctx, ['usernameTemplate'], '{password} may not be in the username (usernames are logged)');
    ok = false;
  }
  // A session id that is not always sent is no sticky session: it must appear outside any
  // optional segment, or in one whose other placeholders always have a value.
  const alwaysSet = (name: string) =>
    name !== 'country' && (isBuiltinPlaceholder(name) || (params[name] ?? '') !== '');
  const sessionSent = fields.some((field) =>
    companionsOf(templates[field], 'session').some((others) => others.every(alwaysSet)),
  );
  if (!sessionSent) {
    refuse(
      ctx,
      ['usernameTemplate'],
      names.usernameTemplate!.includes('session') || names.passwordTemplate!.includes('session')
        ? '{session} is only in optional segments that may be dropped: a session id must always be sent'
        : 'neither usernameTemplate nor passwordTemplate has {session}: a session id must be sent',
    );
    ok = false;
  }
  return ok;
}

function checkRendering(
  ctx: Ctx,
  config: { usernameTemplate: string; passwordTemplate: string; params: Record<string, string> },
  rules: { session: SessionRules; chars: VendorCharRules },
  lifetimeSeconds: number,
): void {
  const t: VendorTemplates = {
    username: config.usernameTemplate,
    password: config.passwordTemplate,
    session: rules.session,
  };
  const used = new Set([...placeholdersOf(t.username), ...placeholdersOf(t.password)]);
  let valuesOk = true;
  for (const [key, value] of Object.entries(config.params)) {
    if (isBuiltinPlaceholder(key)) {
      refuse(ctx, ['params', key], `{${key}} is built in: a params key cannot replace it`);
      valuesOk = false;
      continue;
    }
    const bad = offending(value, rules.chars.value);
    if (bad !== undefined) {
      refuse(ctx, ['params', key], `holds ${JSON.stringify(bad)}; allowed: ${rules.chars.value.describe}`);
      valuesOk = false;
    }
  }
  if (!valuesOk) return;
  if (used.has('minutes') && lifetimeSeconds % 60 !== 0) {
    refuse(
      ctx,
      ['sessionLifetimeSeconds'],
      `{minutes} is in a template: ${lifetimeSeconds} is not whole minutes`,
    );
    return;
  }
  // Rendered with and without a country, so optional segments are checked both ways.
  for (const country of [SAMPLE_COUNTRY, undefined]) {
    let rendered;
    try {
      rendered = renderCredentials(t, {
        account: SAMPLE_ACCOUNT,
        params: config.params,
        session: newSessionId(rules.session, () => 0.5),
        country,
        lifetimeSeconds,
      });
    } catch (err) {
      if (!(err instanceof TemplateError)) throw err;
      const field = /password template/.test(err.message) ? 'passwordTemplate' : 'usernameTemplate';
      refuse(ctx, [field], err.message);
      return;
    }
    const u = offending(rendered.username, rules.chars.username);
    if (u !== undefined || rendered.username.includes(':')) {
      refuse(
        ctx,
        ['usernameTemplate'],
        `renders a username holding ${JSON.stringify(u ?? ':')}; allowed: ${rules.chars.username.describe}`,
      );
      return;
    }
    const p = offending(rendered.password, rules.chars.password);
    if (p !== undefined) {
      refuse(
        ctx,
        ['passwordTemplate'],
        `renders a password holding ${JSON.stringify(p)} outside the account's password; allowed: ${rules.chars.password.describe}`,
      );
      return;
    }
  }
}

export const vendorConfigSchema = rawSchema.transform((block, ctx): VendorConfig => {
  const preset = block.preset === undefined ? undefined : PRESETS[block.preset];
  const rules = preset ?? CUSTOM_RULES;
  let complete = true;
  const endpoint = block.endpoint ?? preset?.endpoint;
  if (endpoint === undefined) {
    refuse(ctx, ['endpoint'], 'required without a preset');
    complete = false;
  }
  const usernameTemplate = block.usernameTemplate ?? preset?.usernameTemplate;
  const passwordTemplate = block.passwordTemplate ?? preset?.passwordTemplate;
  for (const [field, value] of [
    ['usernameTemplate', usernameTemplate],
    ['passwordTemplate', passwordTemplate],
  ] as const) {
    if (value === undefined) {
      refuse(ctx, [field], 'required without a preset');
      complete = false;
    }
  }
  const lifetime = rules.lifetime;
  const sessionLifetimeSeconds = block.sessionLifetimeSeconds ?? lifetime.defaultSeconds;
  if (sessionLifetimeSeconds < lifetime.minSeconds || sessionLifetimeSeconds > lifetime.maxSeconds) {
    refuse(
      ctx,
      ['sessionLifetimeSeconds'],
      `${sessionLifetimeSeconds} is outside ${preset ? `the ${preset.name} preset's` : 'the'} bounds (${lifetime.minSeconds} to ${lifetime.maxSeconds} seconds)`,
    );
    complete = false;
  }
  if (complete) {
    const templates = { usernameTemplate: usernameTemplate!, passwordTemplate: passwordTemplate! };
    if (checkTemplates(ctx, templates, block.params))
      checkRendering(ctx, { ...templates, params: block.params }, rules, sessionLifetimeSeconds);
  }
  // On a refusal zod reports the issues and ignores what is returned.
  return {
    ...(block.preset === undefined ? {} : { preset: block.preset }),
    endpoint: endpoint ?? { host: '', port: 0 },
    credentialsSecretRef: block.credentialsSecretRef,
    usernameTemplate: usernameTemplate ?? '',
    passwordTemplate: passwordTemplate ?? '',
    params: block.params,
    sessionLifetimeSeconds,
    ...(block.country === undefined ? {} : { country: block.country }),
    countryAttributes: block.countryAttributes,
    claimsNamespace: block.claimsNamespace,
    templates: {
      username: usernameTemplate ?? '',
      password: passwordTemplate ?? '',
      session: rules.session,
      chars: rules.chars,
    },
    lifetime,
    ...(preset?.idleTimeoutSeconds === undefined ? {} : { idleTimeoutSeconds: preset.idleTimeoutSeconds }),
  };
});

/**
 * The country a Proxy's session asks for: the first of `countryAttributes`
 * the Proxy's attributes hold (lowercased), else the entry's `country`, else
 * none. A value that is not a two-letter code is refused, naming the
 * attribute (a typo must not silently become another country, or none).
 */
export function countryFor(
  config: Pick<VendorConfig, 'countryAttributes' | 'country'>,
  attributes: Readonly<Record<string, string>> | undefined,
): string | undefined {
  for (const key of config.countryAttributes) {
    const value = attributes?.[key];
    if (value === undefined || value === '') continue;
    const country = value.toLowerCase();
    if (!/^[a-z]{2}$/.test(country))
      throw new TemplateError(
        `attribute ${key}=${JSON.stringify(value)} is not a two-letter ISO 3166-1 country code`,
      );
    return country;
  }
  return config.country;
}
