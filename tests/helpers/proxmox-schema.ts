/**
 * The Proxmox VE API schema, loaded at run time from the pve-docs
 * `apidata.js` files in `../shared/proxmox/` (or EP_PROXMOX_SCHEMA_DIR), and
 * a validator of requests and answers against it.
 *
 * Licence: those files are AGPL-3.0-or-later. Nothing of them is copied
 * into this repository: they are read and evaluated (in a vm context; they
 * define `const apiSchema = [...]`) when the tests run, and where they are
 * absent the schema checks are skipped with a printed notice.
 *
 * The validator is ours. It handles what the research notes list: indexed
 * names (`net[n]`), Perl regexes (`(?^:...)`), named formats without a
 * regex (a few, by PVE's documented grammar; others are accepted and
 * counted), booleans sent as 0/1, property strings (`k=v,...` with a default
 * key and aliases) and `additionalProperties: 0`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { runInNewContext } from 'node:vm';

export const SCHEMA_VERSIONS = ['9.1.3', '8.4.2'] as const;
export type SchemaVersion = (typeof SCHEMA_VERSIONS)[number];

interface Prop {
  type?: string;
  optional?: number | boolean;
  enum?: string[];
  pattern?: string;
  format?: string | Record<string, Prop>;
  minimum?: number | string;
  maximum?: number | string;
  maxLength?: number;
  properties?: Record<string, Prop>;
  items?: Prop;
  additionalProperties?: number | boolean | Prop;
  alias?: string;
  keyAlias?: string;
  default_key?: number | boolean;
  requires?: string;
}

export interface MethodInfo {
  parameters?: { additionalProperties?: number; properties?: Record<string, Prop> };
  returns?: Prop;
  permissions?: { check?: unknown[]; user?: string };
  proxyto?: string;
}

interface PathNode {
  path: string;
  info?: Record<string, MethodInfo>;
  children?: PathNode[];
}

/**
 * The shared folder's place on the machines this project is developed on
 * (`/work/shared` beside `/work/<checkout>`): a clean clone made elsewhere
 * (CI clones into a temporary directory) still finds the schemas there.
 */
const MACHINE_SHARED_PROXMOX = '/work/shared/proxmox';

/**
 * Where the schema files are: EP_PROXMOX_SCHEMA_DIR, else `shared/proxmox`
 * in the nearest ancestor of the repository that has one (`../shared/proxmox`
 * for a checkout beside it; a worktree one level deeper finds the same),
 * else the machine's shared folder.
 */
export function schemaDir(): string {
  const fromEnv = process.env.EP_PROXMOX_SCHEMA_DIR;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  let dir = resolve(process.cwd());
  for (;;) {
    const parent = dirname(dir);
    if (parent === dir) return MACHINE_SHARED_PROXMOX;
    const candidate = join(parent, 'shared', 'proxmox');
    if (existsSync(candidate)) return candidate;
    dir = parent;
  }
}

export function schemaAvailable(version: SchemaVersion): boolean {
  return existsSync(join(schemaDir(), `apidata-pve${version}.js`));
}

export class PveSchema {
  private readonly routes: Array<{ template: string; re: RegExp; names: string[]; node: PathNode }> = [];
  /** Named formats met that this validator does not check (accepted). */
  readonly uncheckedFormats = new Set<string>();

  constructor(readonly version: SchemaVersion) {
    const src = readFileSync(join(schemaDir(), `apidata-pve${version}.js`), 'utf8');
    const tree = runInNewContext(`${src};apiSchema`, {}, { timeout: 10_000 }) as PathNode[];
    const walk = (n: PathNode) => {
      const names: string[] = [];
      const re = new RegExp(
        '^' +
          n.path.replace(/\{([^}]+)\}|[^{]+/g, (m, name?: string) => {
            if (name === undefined) return m.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
            names.push(name);
            return '([^/]+)';
          }) +
          '$',
      );
      this.routes.push({ template: n.path, re, names, node: n });
      for (const c of n.children ?? []) walk(c);
    };
    tree.forEach(walk);
    // Literal paths before templated ones (`/nodes/{node}/qemu` before `/nodes/{node}/{x}`).
    this.routes.sort((a, b) => a.names.length - b.names.length);
  }

  /** The schema entry for a concrete (encoded) path. */
  match(
    method: string,
    path: string,
  ): { template: string; pathParams: Record<string, string>; info?: MethodInfo } | undefined {
    for (const r of this.routes) {
      const m = r.re.exec(path);
      if (m === null) continue;
      const pathParams: Record<string, string> = {};
      r.names.forEach((n, i) => (pathParams[n] = decodeURIComponent(m[i + 1]!)));
      return { template: r.template, pathParams, info: r.node.info?.[method] };
    }
    return undefined;
  }

  /** PVE's parameter check: field → message, empty when the parameters pass. */
  checkParams(info: MethodInfo, params: Record<string, string>): Record<string, string> {
    const errors: Record<string, string> = {};
    const props = info.parameters?.properties ?? {};
    const closed = !info.parameters?.additionalProperties;
    for (const [key, value] of Object.entries(params)) {
      const prop = lookup(props, key);
      if (prop === undefined) {
        if (closed)
          errors[key] =
            'property is not defined in schema and the schema does not allow additional properties';
        continue;
      }
      const problem = this.checkValue(prop, value);
      if (problem !== undefined) errors[key] = problem;
      if (prop.requires !== undefined && params[prop.requires] === undefined)
        errors[prop.requires] = `parameter is required by '${key}'`;
    }
    for (const [key, prop] of Object.entries(props))
      if (!prop.optional && !key.includes('[n]') && params[key] === undefined)
        errors[key] = 'property is missing and it is not optional';
    return errors;
  }

  private checkValue(prop: Prop, value: string): string | undefined {
    switch (prop.type) {
      case 'integer':
      case 'number': {
        const ok = prop.type === 'integer' ? /^-?\d+$/.test(value) : /^-?\d+(\.\d+)?$/.test(value);
        if (!ok) return `type check ('${prop.type}') failed - got '${value.slice(0, 40)}'`;
        const n = Number(value);
        if (prop.minimum !== undefined && n < Number(prop.minimum))
          return `value must have a minimum value of ${String(prop.minimum)}`;
        if (prop.maximum !== undefined && n > Number(prop.maximum))
          return `value must have a maximum value of ${String(prop.maximum)}`;
        return undefined;
      }
      case 'boolean':
        return /^(?:0|1|true|false|on|off|yes|no)$/i.test(value)
          ? undefined
          : `type check ('boolean') failed - got '${value.slice(0, 40)}'`;
      default:
        break;
    }
    if (prop.maxLength !== undefined && value.length > prop.maxLength)
      return `value may only be ${prop.maxLength} characters long`;
    if (prop.enum !== undefined && !prop.enum.includes(value))
      return `value '${value.slice(0, 40)}' does not have a value in the enumeration '${prop.enum.join(', ')}'`;
    if (prop.pattern !== undefined && !perlRegex(prop.pattern).test(value))
      return `value does not match the regex pattern`;
    if (typeof prop.format === 'string') return this.checkNamedFormat(prop.format, value);
    if (typeof prop.format === 'object') return this.checkPropertyString(prop.format, value);
    return undefined;
  }

  private checkNamedFormat(format: string, value: string): string | undefined {
    const bad = (what: string) => `invalid format - ${what}`;
    switch (format) {
      case 'pve-tag-list': {
        for (const tag of value.split(/[;, ]+/).filter((t) => t !== ''))
          if (!/^[a-z0-9_][a-z0-9_\-+.]*$/i.test(tag))
            return bad(`invalid characters in tag '${tag.slice(0, 40)}'`);
        return undefined;
      }
      case 'pve-node':
      case 'dns-name':
        return /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$/.test(
          value,
        )
          ? undefined
          : bad(`value does not look like a valid ${format === 'pve-node' ? 'node name' : 'DNS name'}`);
      case 'pve-vmid':
        return /^[1-9][0-9]{2,8}$/.test(value) ? undefined : bad('value does not look like a valid VM ID');
      case 'pve-storage-id':
      case 'pve-poolid':
        return /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i.test(value) ? undefined : bad(`invalid ${format}`);
      case 'pve-configid':
        return /^[a-z][a-z0-9_]+$/i.test(value) ? undefined : bad('invalid configuration ID');
      case 'pve-configid-list':
        return value.split(/[,; ]+/).every((v) => /^[a-z][a-z0-9_]+$/i.test(v))
          ? undefined
          : bad('invalid configuration ID');
      case 'mac-addr':
        return /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(value) ? undefined : bad('invalid MAC address');
      case 'pve-storage-content':
        return /^[a-z]+$/.test(value) ? undefined : bad('invalid content type');
      case 'pve-qm-ipconfig':
        return value.split(',').every((kv) => /^(gw|gw6|ip|ip6)=\S+$/.test(kv))
          ? undefined
          : bad('invalid ipconfig');
      default:
        this.uncheckedFormats.add(format);
        return undefined;
    }
  }

  /** `k=v,k=v` against a format object: known keys (aliases included), one default key, typed values. */
  private checkPropertyString(format: Record<string, Prop>, value: string): string | undefined {
    const defaultKey = Object.entries(format).find(([, p]) => p.default_key)?.[0];
    for (const part of value.split(',')) {
      const eq = part.indexOf('=');
      let key: string;
      let v: string;
      if (eq < 0) {
        if (defaultKey === undefined) return `invalid format - format error\n${part}: no default key`;
        key = defaultKey;
        v = part;
      } else {
        key = part.slice(0, eq);
        v = part.slice(eq + 1);
      }
      const p = format[key];
      if (p === undefined)
        return `invalid format - format error\n${key}: property is not defined in schema and the schema does not allow additional properties`;
      if (p.alias !== undefined) continue; // `virtio=<mac>`: the key names the model, the value is the MAC
      const problem = this.checkValue(p, v);
      if (problem !== undefined) return `invalid format - format error\n${key}: ${problem}`;
    }
    return undefined;
  }

  /** Problems of an answer's `data` against `returns`, as `path: problem` lines; empty when it conforms. */
  checkReturns(info: MethodInfo, data: unknown): string[] {
    const out: string[] = [];
    if (info.returns !== undefined) checkData(info.returns, data, 'data', out);
    return out;
  }
}

function lookup(props: Record<string, Prop>, key: string): Prop | undefined {
  if (props[key] !== undefined) return props[key];
  const m = /^([a-z_-]+?)(\d+)$/.exec(key);
  if (m !== null) return props[`${m[1]}[n]`];
  return undefined;
}

const regexCache = new Map<string, RegExp>();
/** A PVE (Perl) pattern as an anchored JS RegExp: `(?^:x)` is a non-capturing group with default flags. */
function perlRegex(pattern: string): RegExp {
  let re = regexCache.get(pattern);
  if (re === undefined) {
    re = new RegExp(`^(?:${pattern.replace(/\(\?\^[a-z]*:/g, '(?:')})$`);
    regexCache.set(pattern, re);
  }
  return re;
}

function checkData(schema: Prop, data: unknown, at: string, out: string[]): void {
  if (data === null || data === undefined) {
    if (!schema.optional && schema.type !== 'null') out.push(`${at}: missing`);
    return;
  }
  switch (schema.type) {
    case 'object':
      if (typeof data !== 'object' || Array.isArray(data)) {
        out.push(`${at}: not an object`);
        return;
      }
      for (const [k, p] of Object.entries(schema.properties ?? {})) {
        const v = (data as Record<string, unknown>)[k];
        if (v === undefined) {
          if (!p.optional) out.push(`${at}.${k}: missing`);
          continue;
        }
        checkData(p, v, `${at}.${k}`, out);
      }
      return;
    case 'array':
      if (!Array.isArray(data)) {
        out.push(`${at}: not an array`);
        return;
      }
      if (schema.items !== undefined) data.forEach((d, i) => checkData(schema.items!, d, `${at}[${i}]`, out));
      return;
    case 'integer':
      if (!Number.isInteger(data)) out.push(`${at}: not an integer`);
      return;
    case 'number':
      if (typeof data !== 'number') out.push(`${at}: not a number`);
      return;
    case 'boolean':
      if (typeof data !== 'boolean' && data !== 0 && data !== 1) out.push(`${at}: not a boolean`);
      return;
    case 'string':
      if (typeof data !== 'string') out.push(`${at}: not a string`);
      else if (schema.enum !== undefined && !schema.enum.includes(data))
        out.push(`${at}: '${data}' not in enum`);
      return;
    default:
      return;
  }
}

/**
 * The privileges a PVE permission check needs, with its paths filled in;
 * `all` when any user may. A simplification of PVE's checker: a nested
 * group is flattened into the top-level `and`/`or`, and a `require_param`
 * leaf counts only when its parameter is given. That is exact for the calls
 * this provider makes (clone: VM.Clone on the template and VM.Allocate on
 * the new VMID, the pool leaf only with `pool`).
 */
export function permissionNeeds(
  info: MethodInfo,
  params: Record<string, string>,
): 'all' | { op: 'and' | 'or'; checks: Array<{ path: string; privs: string[]; any: boolean }> } {
  const perms = info.permissions;
  if (perms === undefined || perms.user === 'all' || perms.check === undefined) return 'all';
  const leaf = (c: unknown[]): { path: string; privs: string[]; any: boolean } | undefined => {
    if (c[0] !== 'perm') return undefined;
    const requireParam = c.indexOf('require_param');
    if (requireParam >= 0 && params[String(c[requireParam + 1])] === undefined) return undefined;
    const path = String(c[1]).replace(/\{([^}]+)\}/g, (_m, n: string) => params[n] ?? `{${n}}`);
    const anyIdx = c.indexOf('any');
    return { path, privs: c[2] as string[], any: anyIdx >= 0 && Boolean(c[anyIdx + 1]) };
  };
  const top = perms.check;
  if (top[0] === 'and' || top[0] === 'or') {
    const checks = top
      .slice(1)
      .flatMap((c) => {
        if (!Array.isArray(c)) return [];
        if (c[0] === 'or' || c[0] === 'and')
          return c.slice(1).map((x) => (Array.isArray(x) ? leaf(x) : undefined));
        return [leaf(c)];
      })
      .filter((x): x is { path: string; privs: string[]; any: boolean } => x !== undefined);
    return { op: top[0], checks };
  }
  const one = leaf(top);
  return one === undefined ? 'all' : { op: 'and', checks: [one] };
}
