/**
 * A wire-level fake of the Compute Engine REST API (v1), enough of it for
 * the gcp provider driven by the real `@google-cloud/compute` client:
 * instances insert, get, delete and aggregatedList; zoneOperations get, wait
 * and list. It listens on 127.0.0.1 on a random port, requires a bearer
 * token, records every request, and answers the way the API does:
 *
 * - insert returns a zone operation (PENDING, then RUNNING, then DONE after
 *   `timing.insertMs`); the VM exists at once as PROVISIONING and becomes
 *   RUNNING with an external NAT IP when the operation is DONE; a second
 *   insert of a taken name is 409 alreadyExists;
 * - delete returns an operation; the VM is STOPPING until it is DONE after
 *   `timing.deleteMs`, then gone; a delete while another operation runs on
 *   the VM is 400 resourceNotReady; a missing VM is 404 notFound;
 * - errors use the API's body: `{"error":{"code","message","errors":[{"reason","domain","message"}]}}`,
 *   a 404's message naming the resource (`The resource 'projects/p/zones/z/instances/n' was not found`);
 * - an insert naming an image, machine type or network listed in `missing`
 *   is refused synchronously, 404 naming that resource (as GCE does: no
 *   operation is made); with `denyExternalIp` (the organization policy
 *   `constraints/compute.vmExternalIpAccess`) an insert asking for an
 *   external IP is 412 conditionNotMet naming the constraint; any request
 *   in a zone of `missingZones`, or for another project, is 404 naming the
 *   zone or project;
 * - aggregatedList filters on `labels.KEY = VALUE` server-side, pages with
 *   maxResults and pageToken, and with returnPartialSuccess reports an
 *   unreachable zone as a per-scope `warning` (code UNREACHABLE) plus the
 *   top-level `unreachables` list (without it: 503);
 * - zoneOperations.list filters on `FIELD = VALUE` / `FIELD != VALUE`
 *   joined by AND; wait holds the request until the operation is DONE or
 *   `timing.waitMaxMs` passes;
 * - the insert body is kept and echoed the way GCE does: the NIC's network
 *   or subnetwork, an access config (and so an external IP) only when the
 *   body asked for one, an internal IP (`networkIP`) always, scheduling,
 *   service accounts and metadata; a subnetwork or disk type listed in
 *   `missing` is a synchronous 404 like an image; a Spot VM whose
 *   scheduling allows automatic restart or host migration is 400, as GCE
 *   refuses it;
 * - `addProject` serves a second project on the same endpoint (same token,
 *   one request log), for a switch of `gcp.project`; a project neither
 *   serves is 404 naming the project.
 *
 * Time moves lazily: an operation's state is computed from the clock when
 * read, so there are no background timers. External IPs are loopback
 * addresses (127.0.1.x): nothing that dials them leaves the machine.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  authorization: string | undefined;
  body: unknown;
  /** The body exactly as sent. */
  rawBody: string;
  /** The HTTP status answered (set once the answer is sent). */
  status?: number;
}

export interface FakeInstance {
  id: string;
  name: string;
  zone: string;
  status: string;
  natIP?: string;
  /** The internal IP: assigned at insert (loopback too, so nothing dials off the machine). */
  networkIP: string;
  creationTimestamp: string;
  labels: Record<string, string>;
  /** The insert body as received (metadata, disks, NICs...). */
  resource: Record<string, unknown>;
}

export interface FakeOperation {
  id: string;
  name: string;
  zone: string;
  operationType: 'insert' | 'delete';
  targetName: string;
  insertTime: string;
  startMs: number;
  doneAtMs: number;
  error?: { codes: string[]; httpStatus: number; message: string };
}

export interface CannedError {
  status: number;
  reason: string;
  message?: string;
}

const HOST_BASE = 'https://www.googleapis.com/compute/v1';

export class FakeCompute {
  readonly requests: RecordedRequest[] = [];
  readonly instances = new Map<string, FakeInstance>();
  readonly operations: FakeOperation[] = [];
  readonly token: string;
  readonly timing = { insertMs: 0, deleteMs: 0, waitMaxMs: 2_000 };
  /** Zones the aggregated list walks (the ones holding VMs are added). */
  readonly zones = new Set<string>(['europe-west1-b', 'us-central1-a']);
  readonly unreachableZones = new Set<string>();
  /** Zones that do not exist: every request in one is 404 naming the zone. */
  readonly missingZones = new Set<string>();
  /** Resource paths (`projects/<p>/global/images/<i>`, `.../zones/<z>/machineTypes/<t>`, `.../global/networks/<n>`) that do not exist. */
  readonly missing = new Set<string>();
  /** The organization policy constraints/compute.vmExternalIpAccess denies every VM an external IP. */
  denyExternalIp = false;
  private readonly server: Server;
  private nextId = 1000;
  private nextIp = 2;
  private readonly canned: { match: (r: RecordedRequest) => boolean; error: CannedError; times: number }[] =
    [];
  private readonly failingInserts: {
    match: (body: Record<string, unknown>, zone: string) => boolean;
    codes: string[];
    httpStatus: number;
  }[] = [];
  private readonly stalls: { match: (r: RecordedRequest) => boolean; released: Promise<void> }[] = [];
  private readonly open = new Set<ServerResponse>();
  /** Other projects served on this endpoint (addProject). */
  private readonly siblings = new Map<string, FakeCompute>();

  private constructor(
    readonly project: string,
    token?: string,
  ) {
    this.token = token ?? `fake-token-${randomUUID()}`;
    this.server = createServer((req, res) => void this.handle(req, res));
    // Never close an idle keep-alive connection first: a client reusing it
    // at that moment gets ECONNRESET (the real API keeps them far longer).
    this.server.keepAliveTimeout = 120_000;
  }

  static async start(project: string): Promise<FakeCompute> {
    const fake = new FakeCompute(project);
    await new Promise<void>((resolve) => fake.server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async stop(): Promise<void> {
    for (const res of this.open) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // -- test controls --------------------------------------------------------

  /**
   * Serves another project on this endpoint with the same token: its own
   * VMs and operations, requests recorded in this fake's log. What a
   * switch of `gcp.project` meets (the identity may use both projects).
   */
  addProject(project: string): FakeCompute {
    if (project === this.project || this.siblings.has(project))
      throw new Error(`project ${project} is served`);
    const other = new FakeCompute(project, this.token);
    this.siblings.set(project, other);
    return other;
  }

  /** The bodies of the inserts this endpoint received for `project` (default: this fake's), in order. */
  insertBodies(project = this.project): Record<string, unknown>[] {
    const path = new RegExp(`^/compute/v1/projects/${project}/zones/[^/]+/instances$`);
    return this.requests
      .filter((r) => r.method === 'POST' && path.test(r.path))
      .map((r) => r.body as Record<string, unknown>);
  }

  /** How many requests went to each `METHOD path` (`GET /compute/v1/.../operations/x`), for call counts. */
  requestCounts(from = 0): Map<string, number> {
    const out = new Map<string, number>();
    for (const r of this.requests.slice(from)) {
      const key = `${r.method} ${r.path}`;
      out.set(key, (out.get(key) ?? 0) + 1);
    }
    return out;
  }

  /** The next `times` requests matching `match` get this error body. */
  failNext(match: (r: RecordedRequest) => boolean, error: CannedError, times = 1): void {
    this.canned.push({ match, error, times });
  }

  /**
   * Inserts matching `match` are accepted and their operation ends with these
   * error codes (what the API does when a zone has no capacity or an image
   * does not exist). Returns a function that stops it.
   */
  failInsertOperations(
    match: (body: Record<string, unknown>, zone: string) => boolean,
    codes: string[],
    httpStatus: number,
  ): () => void {
    const rule = { match, codes, httpStatus };
    this.failingInserts.push(rule);
    return () => {
      const i = this.failingInserts.indexOf(rule);
      if (i >= 0) this.failingInserts.splice(i, 1);
    };
  }

  /** Requests matching `match` hang until the returned function is called. */
  stall(match: (r: RecordedRequest) => boolean): () => void {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const entry = { match, released };
    this.stalls.push(entry);
    return () => {
      this.stalls.splice(this.stalls.indexOf(entry), 1);
      release();
    };
  }

  /** Puts a VM straight into the backend (RUNNING with an IP unless told otherwise). */
  putInstance(zone: string, name: string, labels: Record<string, string>, status = 'RUNNING'): FakeInstance {
    this.zones.add(zone);
    const inst: FakeInstance = {
      id: String(this.nextId++),
      name,
      zone,
      status,
      natIP: status === 'RUNNING' ? this.allocateIp() : undefined,
      networkIP: this.allocateInternalIp(),
      creationTimestamp: rfc3339(new Date()),
      labels,
      resource: { name },
    };
    this.instances.set(`${zone}/${name}`, inst);
    return inst;
  }

  instance(zone: string, name: string): FakeInstance | undefined {
    this.settle();
    return this.instances.get(`${zone}/${name}`);
  }

  /** Every operation still running finishes now. */
  finishOperations(): void {
    const now = Date.now();
    for (const op of this.operations) if (op.doneAtMs > now) op.doneAtMs = now;
    this.settle();
  }

  /** Starts a delete operation on a VM that runs for `ms`. */
  beginDelete(zone: string, name: string, ms: number): FakeOperation {
    this.settle();
    const inst = this.instances.get(`${zone}/${name}`);
    if (!inst) throw new Error(`no VM ${zone}/${name}`);
    inst.status = 'STOPPING';
    return this.newOperation(zone, 'delete', name, ms);
  }

  requestsTo(method: string, pathPart: string | RegExp): RecordedRequest[] {
    return this.requests.filter(
      (r) =>
        r.method === method &&
        (typeof pathPart === 'string' ? r.path.includes(pathPart) : pathPart.test(r.path)),
    );
  }

  // -- the API --------------------------------------------------------------

  private allocateIp(): string {
    const n = this.nextIp++;
    return `127.0.1.${(n % 250) + 2}`;
  }

  private nextInternalIp = 2;
  private allocateInternalIp(): string {
    const n = this.nextInternalIp++;
    return `127.0.2.${(n % 250) + 2}`;
  }

  private newOperation(
    zone: string,
    type: 'insert' | 'delete',
    target: string,
    ms: number,
    error?: FakeOperation['error'],
  ): FakeOperation {
    const now = Date.now();
    const op: FakeOperation = {
      id: String(this.nextId++),
      name: `operation-${now}-${randomUUID().slice(0, 8)}`,
      zone,
      operationType: type,
      targetName: target,
      insertTime: rfc3339(new Date(now)),
      startMs: now,
      doneAtMs: now + ms,
      ...(error ? { error } : {}),
    };
    this.operations.push(op);
    return op;
  }

  /** Applies every operation whose time has come. */
  private settle(): void {
    const now = Date.now();
    for (const op of this.operations) {
      if ((op as { applied?: boolean }).applied || now < op.doneAtMs) continue;
      (op as { applied?: boolean }).applied = true;
      const key = `${op.zone}/${op.targetName}`;
      const inst = this.instances.get(key);
      if (op.operationType === 'insert') {
        if (op.error) this.instances.delete(key);
        else if (inst && inst.status === 'PROVISIONING') {
          inst.status = 'RUNNING';
          inst.natIP = this.allocateIp();
        }
      } else if (op.operationType === 'delete') {
        this.instances.delete(key);
      }
    }
  }

  private status(op: FakeOperation): 'PENDING' | 'RUNNING' | 'DONE' {
    const now = Date.now();
    if (now >= op.doneAtMs) return 'DONE';
    return now - op.startMs < 5 ? 'PENDING' : 'RUNNING';
  }

  private opJson(op: FakeOperation): Record<string, unknown> {
    const status = this.status(op);
    const zoneUrl = `${HOST_BASE}/projects/${this.project}/zones/${op.zone}`;
    const out: Record<string, unknown> = {
      kind: 'compute#operation',
      id: op.id,
      name: op.name,
      zone: zoneUrl,
      operationType: op.operationType,
      targetLink: `${zoneUrl}/instances/${op.targetName}`,
      targetId: op.id,
      status,
      progress: status === 'DONE' ? 100 : 0,
      insertTime: op.insertTime,
      selfLink: `${zoneUrl}/operations/${op.name}`,
    };
    if (status === 'DONE') {
      out.endTime = rfc3339(new Date(op.doneAtMs));
      if (op.error) {
        out.httpErrorStatusCode = op.error.httpStatus;
        out.httpErrorMessage = op.error.httpStatus === 403 ? 'FORBIDDEN' : 'BAD REQUEST';
        out.error = { errors: op.error.codes.map((code) => ({ code, message: op.error!.message })) };
      }
    }
    return out;
  }

  private instanceJson(inst: FakeInstance): Record<string, unknown> {
    const zoneUrl = `${HOST_BASE}/projects/${this.project}/zones/${inst.zone}`;
    const resource = inst.resource as {
      networkInterfaces?: { network?: string; subnetwork?: string; accessConfigs?: unknown[] }[];
      disks?: unknown[];
      metadata?: unknown;
      tags?: unknown;
      machineType?: string;
      scheduling?: unknown;
      serviceAccounts?: unknown;
    };
    const nic = resource.networkInterfaces?.[0];
    // A VM put straight into the backend has the seed's NIC (with an external IP).
    const external = nic === undefined || (nic.accessConfigs ?? []).length > 0;
    return {
      kind: 'compute#instance',
      id: inst.id,
      name: inst.name,
      zone: zoneUrl,
      status: inst.status,
      creationTimestamp: inst.creationTimestamp,
      labels: inst.labels,
      machineType: resource.machineType
        ? `${zoneUrl}/machineTypes/${lastSegment(resource.machineType)}`
        : undefined,
      tags: resource.tags,
      metadata: resource.metadata,
      scheduling: resource.scheduling,
      serviceAccounts: resource.serviceAccounts,
      selfLink: `${zoneUrl}/instances/${inst.name}`,
      networkInterfaces: [
        {
          network: nic?.network,
          subnetwork: nic?.subnetwork,
          networkIP: inst.networkIP,
          ...(external
            ? {
                accessConfigs: [
                  {
                    type: 'ONE_TO_ONE_NAT',
                    name: 'External NAT',
                    ...(inst.natIP ? { natIP: inst.natIP } : {}),
                  },
                ],
              }
            : {}),
        },
      ],
    };
  }

  private error(res: ServerResponse, status: number, reason: string, message: string): void {
    this.json(res, status, {
      error: { code: status, message, errors: [{ message, domain: 'global', reason }] },
    });
  }

  private json(res: ServerResponse, status: number, body: unknown): void {
    res.statusCode = status;
    res.setHeader('content-type', 'application/json; charset=UTF-8');
    res.end(JSON.stringify(body));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.open.add(res);
    res.on('close', () => this.open.delete(res));
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://fake');
    let body: unknown = undefined;
    if (rawBody !== '') {
      try {
        body = JSON.parse(rawBody);
      } catch {
        body = rawBody;
      }
    }
    const rec: RecordedRequest = {
      method: req.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      authorization: req.headers.authorization,
      body,
      rawBody,
    };
    this.requests.push(rec);
    res.on('finish', () => (rec.status = res.statusCode));
    for (const s of [...this.stalls]) if (s.match(rec)) await s.released;
    if (rec.authorization !== `Bearer ${this.token}`) {
      this.error(res, 401, 'required', 'Request is missing required authentication credential.');
      return;
    }
    const canned = this.canned.find((c) => c.times > 0 && c.match(rec));
    if (canned) {
      canned.times--;
      this.error(res, canned.error.status, canned.error.reason, canned.error.message ?? canned.error.reason);
      return;
    }
    try {
      await this.dispatch(rec, url, res, body);
    } catch (err) {
      // A request the fake cannot honour (an unsupported filter) fails loudly, never silently.
      this.error(res, 400, 'invalid', (err as Error).message);
    }
  }

  private async dispatch(rec: RecordedRequest, url: URL, res: ServerResponse, body: unknown): Promise<void> {
    const sibling = this.siblings.get(url.pathname.split('/')[4] ?? '');
    if (sibling !== undefined) return sibling.dispatch(rec, url, res, body);
    this.settle();
    const prefix = `/compute/v1/projects/${this.project}`;
    if (!url.pathname.startsWith(`${prefix}/`)) {
      this.error(
        res,
        404,
        'notFound',
        `The resource 'projects/${url.pathname.split('/')[4] ?? ''}' was not found`,
      );
      return;
    }
    const rest = url.pathname.slice(prefix.length).split('/').filter(Boolean);
    // aggregated/instances
    if (rest[0] === 'aggregated' && rest[1] === 'instances' && rest.length === 2 && rec.method === 'GET') {
      this.aggregated(res, url.searchParams);
      return;
    }
    if (rest[0] !== 'zones' || rest.length < 3) {
      this.error(res, 404, 'notFound', 'unknown path');
      return;
    }
    const zone = rest[1]!;
    if (this.missingZones.has(zone)) {
      this.error(res, 404, 'notFound', `The resource 'projects/${this.project}/zones/${zone}' was not found`);
      return;
    }
    if (rest[2] === 'instances') {
      if (rest.length === 3 && rec.method === 'POST') return this.insert(res, zone, body);
      const name = rest[3] ?? '';
      if (rest.length === 4 && rec.method === 'GET') return this.getInstance(res, zone, name);
      if (rest.length === 4 && rec.method === 'DELETE') return this.deleteInstance(res, zone, name);
    }
    if (rest[2] === 'operations') {
      if (rest.length === 3 && rec.method === 'GET') return this.listOperations(res, zone, url.searchParams);
      const name = rest[3] ?? '';
      const op = this.operations.find((o) => o.zone === zone && o.name === name);
      if (!op) {
        this.error(
          res,
          404,
          'notFound',
          `The resource 'projects/${this.project}/zones/${zone}/operations/${name}' was not found`,
        );
        return;
      }
      if (rest.length === 4 && rec.method === 'GET') return this.json(res, 200, this.opJson(op));
      if (rest.length === 5 && rest[4] === 'wait' && rec.method === 'POST') {
        const holdMs = Math.max(0, Math.min(op.doneAtMs - Date.now(), this.timing.waitMaxMs));
        if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
        this.settle();
        return this.json(res, 200, this.opJson(op));
      }
    }
    this.error(res, 404, 'notFound', 'unknown path');
  }

  private insert(res: ServerResponse, zone: string, body: unknown): void {
    const resource = (body ?? {}) as Record<string, unknown>;
    const name = typeof resource.name === 'string' ? resource.name : '';
    if (!/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) {
      this.error(res, 400, 'invalid', `Invalid value for field 'resource.name': '${name}'.`);
      return;
    }
    for (const field of ['machineType', 'disks', 'networkInterfaces']) {
      if (resource[field] === undefined) {
        this.error(res, 400, 'required', `Required field 'resource.${field}' not specified`);
        return;
      }
    }
    // What GCE resolves synchronously: a missing image, machine type or network is a 404, no operation.
    for (const path of this.referencedResources(resource, zone)) {
      if (this.missing.has(path)) {
        this.error(res, 404, 'notFound', `The resource '${path}' was not found`);
        return;
      }
    }
    const scheduling = resource.scheduling as
      { provisioningModel?: string; automaticRestart?: boolean; onHostMaintenance?: string } | undefined;
    if (
      scheduling?.provisioningModel === 'SPOT' &&
      (scheduling.automaticRestart !== false || scheduling.onHostMaintenance !== 'TERMINATE')
    ) {
      this.error(
        res,
        400,
        'invalid',
        "Invalid value for field 'resource.scheduling': Spot VMs require automaticRestart false and onHostMaintenance TERMINATE.",
      );
      return;
    }
    const nics = (resource.networkInterfaces ?? []) as { accessConfigs?: unknown[] }[];
    if (this.denyExternalIp && nics.some((n) => (n.accessConfigs ?? []).length > 0)) {
      this.error(
        res,
        412,
        'conditionNotMet',
        `Constraint constraints/compute.vmExternalIpAccess violated for project 123456789012. Add instance projects/${this.project}/zones/${zone}/instances/${name} to the constraint to use external IP with it.`,
      );
      return;
    }
    const key = `${zone}/${name}`;
    if (this.instances.has(key)) {
      this.error(
        res,
        409,
        'alreadyExists',
        `The resource 'projects/${this.project}/zones/${zone}/instances/${name}' already exists`,
      );
      return;
    }
    this.zones.add(zone);
    const rule = this.failingInserts.find((r) => r.match(resource, zone));
    const failing = rule ? { codes: rule.codes, httpStatus: rule.httpStatus } : undefined;
    const inst: FakeInstance = {
      id: String(this.nextId++),
      name,
      zone,
      status: 'PROVISIONING',
      creationTimestamp: rfc3339(new Date()),
      labels: { ...((resource.labels as Record<string, string> | undefined) ?? {}) },
      networkIP: this.allocateInternalIp(),
      resource,
    };
    this.instances.set(key, inst);
    const op = this.newOperation(
      zone,
      'insert',
      name,
      this.timing.insertMs,
      failing ? { ...failing, message: `The operation failed: ${failing.codes.join(',')}` } : undefined,
    );
    this.settle();
    this.json(res, 200, this.opJson(op));
  }

  /** The image, machine type and network an insert body names, as full resource paths. */
  private referencedResources(resource: Record<string, unknown>, zone: string): string[] {
    const full = (ref: unknown, scope: string): string | undefined => {
      if (typeof ref !== 'string' || ref === '') return undefined;
      const path = ref.replace(/^https:\/\/[^/]+\/compute\/v1\//, '');
      return path.startsWith('projects/') ? path : `projects/${this.project}/${scope}${path}`;
    };
    const disks = (resource.disks ?? []) as {
      initializeParams?: { sourceImage?: unknown; diskType?: unknown };
    }[];
    const nics = (resource.networkInterfaces ?? []) as { network?: unknown; subnetwork?: unknown }[];
    return [
      full(disks[0]?.initializeParams?.sourceImage, ''),
      full(
        resource.machineType,
        resource.machineType?.toString().startsWith('zones/') ? '' : `zones/${zone}/`,
      ),
      full(nics[0]?.network, ''),
      full(nics[0]?.subnetwork, ''),
      full(disks[0]?.initializeParams?.diskType, ''),
    ].filter((p): p is string => p !== undefined);
  }

  private getInstance(res: ServerResponse, zone: string, name: string): void {
    const inst = this.instances.get(`${zone}/${name}`);
    if (!inst) {
      this.error(
        res,
        404,
        'notFound',
        `The resource 'projects/${this.project}/zones/${zone}/instances/${name}' was not found`,
      );
      return;
    }
    this.json(res, 200, this.instanceJson(inst));
  }

  private deleteInstance(res: ServerResponse, zone: string, name: string): void {
    const inst = this.instances.get(`${zone}/${name}`);
    if (!inst) {
      this.error(
        res,
        404,
        'notFound',
        `The resource 'projects/${this.project}/zones/${zone}/instances/${name}' was not found`,
      );
      return;
    }
    const busy = this.operations.some(
      (o) => o.zone === zone && o.targetName === name && this.status(o) !== 'DONE',
    );
    if (busy) {
      this.error(
        res,
        400,
        'resourceNotReady',
        `The resource 'projects/${this.project}/zones/${zone}/instances/${name}' is not ready`,
      );
      return;
    }
    inst.status = 'STOPPING';
    const op = this.newOperation(zone, 'delete', name, this.timing.deleteMs);
    this.settle();
    this.json(res, 200, this.opJson(op));
  }

  private listOperations(res: ServerResponse, zone: string, query: URLSearchParams): void {
    const terms = parseFilter(query.get('filter') ?? '');
    const all = this.operations.filter((o) => o.zone === zone).map((o) => this.opJson(o));
    const items = all.filter((o) => terms.every((t) => t.test(o)));
    this.json(res, 200, { kind: 'compute#operationList', items });
  }

  private aggregated(res: ServerResponse, query: URLSearchParams): void {
    const partial = query.get('returnPartialSuccess') === 'true';
    if (this.unreachableZones.size > 0 && !partial) {
      this.error(res, 503, 'backendError', 'Some zones are unavailable');
      return;
    }
    const terms = parseFilter(query.get('filter') ?? '');
    const maxResults = Math.min(Number(query.get('maxResults') ?? '500') || 500, 500);
    const offset = Number(query.get('pageToken') ?? '0') || 0;
    const matching = [...this.instances.values()]
      .filter((i) => !this.unreachableZones.has(i.zone))
      .map((i) => this.instanceJson(i))
      .filter((i) => terms.every((t) => t.test(i)))
      .sort((a, b) => String(a.name).localeCompare(String(b.name)));
    const page = matching.slice(offset, offset + maxResults);
    const items: Record<string, unknown> = {};
    for (const zone of [...this.zones].sort()) {
      const key = `zones/${zone}`;
      if (this.unreachableZones.has(zone)) {
        items[key] = {
          warning: {
            code: 'UNREACHABLE',
            message: `Scope '${key}' is unreachable.`,
            data: [{ key: 'scope', value: key }],
          },
        };
        continue;
      }
      const here = page.filter((i) => lastSegment(String(i.zone)) === zone);
      items[key] =
        here.length > 0
          ? { instances: here }
          : {
              warning: {
                code: 'NO_RESULTS_ON_PAGE',
                message: 'There are no results for scope on this page.',
                data: [{ key: 'scope', value: key }],
              },
            };
    }
    const body: Record<string, unknown> = { kind: 'compute#instanceAggregatedList', items };
    if (offset + maxResults < matching.length) body.nextPageToken = String(offset + maxResults);
    if (this.unreachableZones.size > 0)
      body.unreachables = [...this.unreachableZones].map((z) => `zones/${z}`);
    this.json(res, 200, body);
  }
}

function lastSegment(url: string): string {
  return url.split('/').pop() ?? '';
}

/** RFC 3339 with milliseconds and a numeric offset, as the API writes creationTimestamp. */
function rfc3339(d: Date): string {
  return d.toISOString().replace('Z', '-00:00');
}

interface FilterTerm {
  test(resource: Record<string, unknown>): boolean;
}

/**
 * The list-filter subset the provider uses: `FIELD = VALUE` and
 * `FIELD != VALUE`, values bare or double-quoted, FIELD possibly
 * `labels.KEY`, terms joined by AND (or juxtaposed) and optionally
 * parenthesised. Anything else is refused loudly, so a filter the fake
 * cannot honour never passes silently.
 */
export function parseFilter(filter: string): FilterTerm[] {
  const text = filter.trim();
  if (text === '') return [];
  const parts = text.split(/\s+AND\s+/).map((p) =>
    p
      .trim()
      .replace(/^\(\s*/, '')
      .replace(/\s*\)$/, ''),
  );
  return parts.map((part) => {
    const m = /^([a-zA-Z][\w.-]*)\s*(!=|=)\s*("([^"]*)"|([^\s"()]+))$/.exec(part);
    if (!m) throw new Error(`fake compute: unsupported filter term ${JSON.stringify(part)}`);
    const field = m[1]!;
    const op = m[2]!;
    const value = m[4] ?? m[5] ?? '';
    return {
      test(resource) {
        let actual: unknown = resource;
        for (const seg of field.startsWith('labels.') ? ['labels', field.slice(7)] : field.split('.')) {
          actual = (actual as Record<string, unknown> | undefined)?.[seg];
        }
        const equal =
          (typeof actual === 'string' || typeof actual === 'number' || typeof actual === 'boolean') &&
          String(actual) === value;
        return op === '=' ? equal : !equal;
      },
    };
  });
}
