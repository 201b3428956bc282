/**
 * The firewall part of the Compute fake (gcp-fake.ts, which routes
 * `global/firewalls[/<name>]` here and serves the global operations):
 * firewalls insert, get, list, update (PUT) and delete, as GCE does them
 * where the managed firewall rule depends on it:
 *
 * - a change is a global operation, applied when it is DONE
 *   (`timing.firewallMs`): until then get and list show the rule as it was;
 * - insert and update validate at once (name, network, source ranges,
 *   allowed; a network in the fake's `missing` is 404; a taken name, or
 *   one with an insert still running, 409; update cannot move a rule to
 *   another network: 400);
 * - the rule is echoed as GCE does (full network URL, priority, direction,
 *   disabled, logConfig), and list pages by `maxResults` and `pageToken`.
 *
 * The rules are this Map (by name); `edit` is a hand edit in the console,
 * `age` makes a rule older.
 */
import type { ServerResponse } from 'node:http';

/** A firewall rule as the fake keeps it: what GET answers. */
export type FakeFirewall = Record<string, unknown> & { name: string; creationTimestamp: string };

/** What the firewall part uses of the fake serving it. */
export interface FirewallHost {
  readonly project: string;
  /** The API's URL base (`https://www.googleapis.com/compute/v1`): full resource URLs start with it. */
  readonly base: string;
  /** Resource paths that do not exist (`projects/<p>/global/networks/<n>`). */
  readonly missing: ReadonlySet<string>;
  /** Applies every operation whose time has come. */
  settle(): void;
  /** A new resource id. */
  newId(): string;
  /** A timestamp as the API writes creationTimestamp. */
  timestamp(d: Date): string;
  /** Answers `res` with a new global operation on `global/firewalls/<target>` that runs `apply` when DONE. */
  startOperation(
    res: ServerResponse,
    type: 'insert' | 'update' | 'delete',
    target: string,
    apply: () => void,
  ): void;
  /** Whether an insert of `target` is still running. */
  insertRunning(target: string): boolean;
  json(res: ServerResponse, status: number, body: unknown): void;
  error(res: ServerResponse, status: number, reason: string, message: string): void;
}

export class FakeFirewalls extends Map<string, FakeFirewall> {
  constructor(private readonly host: FirewallHost) {
    super();
  }

  /** A rule as GET answers it (operations due are applied first). */
  read(name: string): FakeFirewall | undefined {
    this.host.settle();
    return this.get(name);
  }

  /** A hand edit in the console: fields changed at once, no operation. */
  edit(name: string, changes: Record<string, unknown>): void {
    const rule = this.read(name);
    if (rule === undefined) throw new Error(`no firewall rule ${name}`);
    Object.assign(rule, changes);
  }

  /** Makes a rule look `ms` older (GC leaves young ones alone). */
  age(name: string, ms: number): void {
    const rule = this.read(name);
    if (rule === undefined) throw new Error(`no firewall rule ${name}`);
    rule.creationTimestamp = this.host.timestamp(new Date(Date.parse(rule.creationTimestamp) - ms));
  }

  /** `global/firewalls` (`rest` empty) or `global/firewalls/<name>`; false for a method or path it does not serve. */
  serve(method: string, res: ServerResponse, rest: string[], query: URLSearchParams, body: unknown): boolean {
    if (rest.length === 0) {
      if (method === 'POST') return this.write(res, 'insert', undefined, body);
      if (method === 'GET') return this.list(res, query);
      return false;
    }
    if (rest.length !== 1) return false;
    const name = rest[0]!;
    const rule = this.get(name);
    if (rule === undefined) {
      const path = `projects/${this.host.project}/global/firewalls/${name}`;
      this.host.error(res, 404, 'notFound', `The resource '${path}' was not found`);
      return true;
    }
    if (method === 'GET') this.host.json(res, 200, rule);
    else if (method === 'PUT') this.write(res, 'update', rule, body);
    else if (method === 'DELETE') this.host.startOperation(res, 'delete', name, () => this.delete(name));
    else return false;
    return true;
  }

  /** Insert or update (PUT: the whole rule replaced), validated at once as GCE does. */
  private write(
    res: ServerResponse,
    type: 'insert' | 'update',
    existing: FakeFirewall | undefined,
    body: unknown,
  ): true {
    const { host } = this;
    const r = (body ?? {}) as Record<string, unknown>;
    const name = str(r.name);
    const invalid = (field: string, value: unknown): true => {
      host.error(res, 400, 'invalid', `Invalid value for field 'resource.${field}': '${String(value)}'.`);
      return true;
    };
    if (!/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name) || (existing && name !== existing.name))
      return invalid('name', name);
    const network = str(r.network).replace(/^https:\/\/[^/]+\/compute\/v1\//, '');
    const path = network.startsWith('projects/') ? network : `projects/${host.project}/${network}`;
    if (!/^projects\/[^/]+\/global\/networks\/[a-z][-a-z0-9]*$/.test(path))
      return invalid('network', network);
    if (host.missing.has(path)) {
      host.error(res, 404, 'notFound', `The resource '${path}' was not found`);
      return true;
    }
    if (existing && existing.network !== `${host.base}/${path}`) return invalid('network', network);
    const ranges = (r.sourceRanges ?? []) as unknown[];
    const bad = ranges.find((v) => !/^[0-9a-f.:]+\/\d{1,3}$/.test(str(v)));
    if (bad !== undefined) return invalid('sourceRanges', bad);
    if (((r.allowed ?? []) as unknown[]).length === 0 && ((r.denied ?? []) as unknown[]).length === 0)
      return invalid('allowed', '[]');
    if (type === 'insert' && (this.has(name) || host.insertRunning(name))) {
      const message = `The resource 'projects/${host.project}/global/firewalls/${name}' already exists`;
      host.error(res, 409, 'alreadyExists', message);
      return true;
    }
    const rule: FakeFirewall = {
      kind: 'compute#firewall',
      id: existing?.id ?? host.newId(),
      creationTimestamp: existing?.creationTimestamp ?? host.timestamp(new Date()),
      priority: 1000,
      direction: 'INGRESS',
      disabled: false,
      logConfig: { enable: false },
      ...r,
      name,
      network: `${host.base}/${path}`,
      selfLink: `${host.base}/projects/${host.project}/global/firewalls/${name}`,
    };
    host.startOperation(res, type, name, () => this.set(name, rule));
    return true;
  }

  private list(res: ServerResponse, query: URLSearchParams): true {
    const maxResults = Math.min(Number(query.get('maxResults') ?? '500') || 500, 500);
    const offset = Number(query.get('pageToken') ?? '0') || 0;
    const all = [...this.values()].sort((a, b) => a.name.localeCompare(b.name));
    const body: Record<string, unknown> = {
      kind: 'compute#firewallList',
      items: all.slice(offset, offset + maxResults),
    };
    if (offset + maxResults < all.length) body.nextPageToken = String(offset + maxResults);
    this.host.json(res, 200, body);
    return true;
  }
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}
