/**
 * A wire-level fake of the Compute Engine REST API (v1), enough of it for
 * the gcp provider driven by the real `@google-cloud/compute` client:
 * instances insert, get, delete and aggregatedList; zoneOperations get, wait
 * and list; firewalls insert, get, list, update (PUT) and delete
 * (gcp-fake-firewalls.ts), and globalOperations get and wait. It listens
 * on 127.0.0.1 on a random port over TLS (a
 * certificate from a per-process test CA; `caFile` is the CA's PEM for
 * `gcp.endpointCaFile`), requires a bearer token, records every request,
 * and behaves like GCE where the provider's logic depends on it:
 *
 * - time passes (`timing`, small delays on by default, `DEFAULT_TIMING`):
 *   an operation is PENDING, then RUNNING, then DONE; a new VM answers 404
 *   to get, delete and lists for `visibleAfterMs`, is PROVISIONING, then
 *   STAGING, and RUNNING with its external IP only `runningLagMs` after its
 *   insert operation is DONE; a delete leaves it STOPPING until its
 *   operation is DONE; `wait` holds until the operation is DONE or
 *   `waitMaxMs` (GCE's two minutes by default) passes;
 * - insert validates synchronously, as GCE does: a malformed image path or
 *   an unknown machine type is 400 naming the field; an image, network,
 *   subnetwork, disk type or zone listed in `missing`/`missingZones` is
 *   404 naming the resource (no operation is made); metadata over GCE's
 *   limits (256 KiB a value, 512 KiB in all) is 400; a Spot VM whose
 *   scheduling allows automatic restart or host migration is 400; with
 *   `denyExternalIp` (the organization policy
 *   `constraints/compute.vmExternalIpAccess`) an insert asking for an
 *   external IP is 412 conditionNotMet; a taken name is 409;
 * - GCE-initiated changes can be injected: `preempt` (a Spot VM: deleted
 *   or TERMINATED per its instanceTerminationAction), `hostError`
 *   (TERMINATED), `stopStart` (back RUNNING with a new ephemeral IP),
 *   `repair` (REPAIRING for a while);
 * - `rateLimitPerSecond`: more calls than that in one second for one
 *   project are 403 rateLimitExceeded;
 * - aggregatedList filters on `labels.KEY = VALUE` server-side, pages with
 *   maxResults and pageToken, can answer `emptyPages` pages with no item
 *   but a next token first (as GCE does when a page's time runs out), and
 *   with returnPartialSuccess reports an unreachable zone as a per-scope
 *   `warning` (code UNREACHABLE) plus the top-level `unreachables` list
 *   (without it: 503);
 * - zoneOperations.list filters on `FIELD = VALUE` / `FIELD != VALUE`
 *   joined by AND;
 * - errors use the API's body: `{"error":{"code","message","errors":[{"reason","domain","message"}]}}`,
 *   a 404's message naming the resource (`The resource 'projects/p/zones/z/instances/n' was not found`);
 * - the insert body is kept and echoed the way GCE does (NIC, access
 *   config only when asked, internal IP, scheduling, service accounts,
 *   metadata);
 * - firewalls are gcp-fake-firewalls.ts (`firewalls`): each change a
 *   global operation applied when it is DONE (`timing.firewallMs`);
 * - `addProject` serves a second project on the same endpoint (same token,
 *   one request log, the same timing); a project neither serves is 404.
 *
 * Time moves lazily: states are computed from the clock when read, so
 * there are no background timers (only a held `wait`). External and
 * internal IPs are loopback addresses (127.0.1.x, 127.0.2.x): nothing that
 * dials them leaves the machine.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { serverTls, type ServerTls } from '../../local-servers/pki.js';
import { FakeFirewalls, type FakeFirewall, type FirewallHost } from './gcp-fake-firewalls.js';

export type { FakeFirewall };

/** The test CA and the fake's certificate (127.0.0.1), made once per process. */
let pki: Promise<ServerTls> | undefined;

function testPki(): Promise<ServerTls> {
  pki ??= serverTls('gcp-fake');
  return pki;
}

/** A placement the fake serves as Compute would: the benches' gcp Proxies all use it. */
export const FAKE_PLACEMENT = {
  zone: 'europe-west1-b',
  machineType: 'e2-micro',
  image: 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64',
} as const;

/**
 * The delays the fake runs with unless a test changes them: small (the
 * suite's time), but every one of them non-zero, so the provider meets
 * PENDING operations, an invisible new VM, STAGING and a VM without its
 * IP yet in every gcp test.
 */
export const DEFAULT_TIMING = {
  /** An operation is PENDING this long, then RUNNING. */
  pendingMs: 15,
  /** An insert operation is DONE after this. */
  insertMs: 120,
  /** A new VM answers 404 (get, delete, lists) this long after its insert. */
  visibleAfterMs: 40,
  /** A new VM turns RUNNING (with its external IP) this long after its insert operation is DONE. */
  runningLagMs: 40,
  /** A delete operation is DONE (the VM gone) after this. */
  deleteMs: 80,
  /** The longest a `wait` is held (GCE: about two minutes). */
  waitMaxMs: 120_000,
  /** A firewall insert, update or delete operation is DONE (and applied) after this. */
  firewallMs: 60,
};
export type FakeTiming = typeof DEFAULT_TIMING;

/** GCE's metadata limits: 256 KiB for one value, 512 KiB for all of them. */
const METADATA_VALUE_MAX = 256 * 1024;
const METADATA_TOTAL_MAX = 512 * 1024;
/** Machine types this fake's zones offer (predefined families and custom shapes). */
const MACHINE_TYPES =
  /^(?:(?:e2|n1|n2|n2d|n4|c2|c3|c3d|t2d|t2a)-(?:standard|highmem|highcpu)-\d{1,3}|e2-(?:micro|small|medium)|f1-micro|g1-small|(?:e2|n1|n2|n2d)-custom-\d{1,3}-\d{3,7})$/;
/** An image the API can resolve: projects/<p>/global/images/<name> or .../images/family/<family>. */
const IMAGE_PATH = /^projects\/[a-z][-a-z0-9.:]{0,62}\/global\/images\/(?:family\/)?[a-z][-a-z0-9]{0,62}$/;

/** A scheduled change of a VM by GCE itself (boot steps, preemption, repair...). */
interface Transition {
  atMs: number;
  status?: string;
  /** A new ephemeral external IP (RUNNING after a start), or none (stopped). */
  ip?: 'new' | 'none';
  /** The VM is gone (a preempted Spot VM with instanceTerminationAction DELETE). */
  remove?: boolean;
}

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
  /** Until then get, delete and lists answer as if the VM did not exist (GCE's short window after insert). */
  visibleAtMs?: number;
  /** What GCE does to it next, in time order. */
  transitions?: Transition[];
}

export interface FakeOperation {
  id: string;
  name: string;
  /** '' for a global operation. */
  zone: string;
  operationType: 'insert' | 'delete' | 'update';
  /** A global operation (firewalls): applies its change when DONE, targets `global/<collection>/<name>`. */
  global?: { collection: string; apply: () => void };
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
  /** Firewall rules by name; `read`, `edit` (a hand edit) and `age` them. */
  readonly firewalls: FakeFirewalls;
  readonly token: string;
  /** The delays (shared by the projects of one endpoint); `resetTiming` restores DEFAULT_TIMING. */
  readonly timing: FakeTiming;
  /** More requests than this in one second for one project are 403 rateLimitExceeded (unset: no limit). */
  rateLimitPerSecond: number | undefined;
  /** aggregatedList answers this many pages with no item and a next token before the real ones. */
  emptyPages = 0;
  /** More identities the endpoint serves: `Bearer <token>` values accepted besides `token` (requests record which). */
  readonly otherTokens = new Set<string>();
  /** The CA file a client must trust (`gcp.endpointCaFile`). */
  readonly caFile: string;
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
  /** When this project's recent requests came (the rate limit's window). */
  private readonly recent: number[] = [];
  /** Held `wait` requests, released at stop. */
  private readonly held = new Set<NodeJS.Timeout>();

  private constructor(
    readonly project: string,
    tls: ServerTls,
    token?: string,
    timing?: FakeTiming,
  ) {
    this.token = token ?? `fake-token-${randomUUID()}`;
    this.timing = timing ?? { ...DEFAULT_TIMING };
    this.caFile = tls.caFile;
    this.server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => void this.handle(req, res));
    // Never close an idle keep-alive connection first: a client reusing it
    // at that moment gets ECONNRESET (the real API keeps them far longer).
    this.server.keepAliveTimeout = 120_000;
    this.tls = tls;
    this.firewalls = new FakeFirewalls(this.firewallHost());
  }
  private readonly tls: ServerTls;

  static async start(project: string): Promise<FakeCompute> {
    const fake = new FakeCompute(project, await testPki());
    await new Promise<void>((resolve) => fake.server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get endpoint(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  /** The provider config fields that point a gcp provider here (endpoint and its CA). */
  get connection(): { endpoint: string; endpointCaFile: string } {
    return { endpoint: this.endpoint, endpointCaFile: this.caFile };
  }

  async stop(): Promise<void> {
    for (const f of [this, ...this.siblings.values()]) for (const t of f.held) clearTimeout(t);
    for (const res of this.open) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Back to DEFAULT_TIMING, no rate limit, no empty pages. */
  resetTiming(): void {
    Object.assign(this.timing, DEFAULT_TIMING);
    this.rateLimitPerSecond = undefined;
    this.emptyPages = 0;
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
    const other = new FakeCompute(project, this.tls, this.token, this.timing);
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

  /** Every operation still running finishes now, and every VM's pending boot step with it. */
  finishOperations(): void {
    const now = Date.now();
    for (const op of this.operations) {
      if (op.doneAtMs > now) op.doneAtMs = now;
      if (op.startMs > now - this.timing.pendingMs) op.startMs = now - this.timing.pendingMs;
    }
    for (const inst of this.instances.values()) {
      if (inst.visibleAtMs !== undefined && inst.visibleAtMs > now) inst.visibleAtMs = now;
      for (const t of inst.transitions ?? []) if (t.atMs > now) t.atMs = now;
    }
    this.settle();
  }

  /** Starts a delete operation on a VM that runs for `ms`. */
  beginDelete(zone: string, name: string, ms: number): FakeOperation {
    const inst = this.existing(zone, name);
    inst.status = 'STOPPING';
    inst.transitions = [];
    return this.newOperation(zone, 'delete', name, ms);
  }

  // -- what GCE does by itself ------------------------------------------------

  /**
   * Preempts a Spot VM, as GCE does when it needs the capacity: STOPPING,
   * then (after `timing.deleteMs`) gone with instanceTerminationAction
   * DELETE, or TERMINATED with STOP. A VM that is not Spot cannot be
   * preempted: an error, so a test cannot preempt the wrong VM by mistake.
   */
  preempt(zone: string, name: string): void {
    const inst = this.existing(zone, name);
    const scheduling = inst.resource.scheduling as
      { provisioningModel?: string; instanceTerminationAction?: string } | undefined;
    if (scheduling?.provisioningModel !== 'SPOT') throw new Error(`VM ${zone}/${name} is not a Spot VM`);
    const at = Date.now() + this.timing.deleteMs;
    inst.status = 'STOPPING';
    inst.transitions =
      scheduling.instanceTerminationAction === 'STOP'
        ? [{ atMs: at, status: 'TERMINATED', ip: 'none' }]
        : [{ atMs: at, remove: true }];
  }

  /** A host error GCE does not restart from (automaticRestart false): TERMINATED, no IP. */
  hostError(zone: string, name: string): void {
    const inst = this.existing(zone, name);
    inst.status = 'TERMINATED';
    inst.natIP = undefined;
    inst.transitions = [];
  }

  /** Stopped and started again (maintenance, a user): STOPPING, TERMINATED, STAGING, then RUNNING with a new ephemeral IP. */
  stopStart(zone: string, name: string, ms = 4 * DEFAULT_TIMING.runningLagMs): void {
    const inst = this.existing(zone, name);
    const now = Date.now();
    inst.status = 'STOPPING';
    inst.natIP = undefined;
    inst.transitions = [
      { atMs: now + ms / 4, status: 'TERMINATED' },
      { atMs: now + ms / 2, status: 'STAGING' },
      { atMs: now + ms, status: 'RUNNING', ip: 'new' },
    ];
  }

  /** GCE repairs the VM (a failed host): REPAIRING for `ms`, then RUNNING with the same IP. */
  repair(zone: string, name: string, ms: number): void {
    const inst = this.existing(zone, name);
    inst.status = 'REPAIRING';
    inst.transitions = [{ atMs: Date.now() + ms, status: 'RUNNING' }];
  }

  private existing(zone: string, name: string): FakeInstance {
    this.settle();
    const inst = this.instances.get(`${zone}/${name}`);
    if (!inst) throw new Error(`no VM ${zone}/${name}`);
    return inst;
  }

  requestsTo(method: string, pathPart: string | RegExp): RecordedRequest[] {
    return this.requests.filter(
      (r) =>
        r.method === method &&
        (typeof pathPart === 'string' ? r.path.includes(pathPart) : pathPart.test(r.path)),
    );
  }

  /** The firewall requests (`METHOD path`, the project's prefix cut), from request `from` on. */
  firewallRequests(from = 0): string[] {
    return this.requests
      .slice(from)
      .filter((r) => /\/global\/(?:firewalls|operations)/.test(r.path))
      .map((r) => `${r.method} ${r.path.replace(/^\/compute\/v1\/projects\/[^/]+\//, '')}`);
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
    type: FakeOperation['operationType'],
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

  /** Applies every operation and every scheduled change whose time has come. */
  private settle(): void {
    const now = Date.now();
    for (const op of this.operations) {
      if ((op as { applied?: boolean }).applied || now < op.doneAtMs) continue;
      (op as { applied?: boolean }).applied = true;
      if (op.global !== undefined) {
        if (!op.error) op.global.apply();
        continue;
      }
      const key = `${op.zone}/${op.targetName}`;
      // A failed insert leaves no VM; a done delete removes it.
      if ((op.operationType === 'insert' && op.error) || op.operationType === 'delete')
        this.instances.delete(key);
    }
    for (const [key, inst] of this.instances) {
      while (
        inst.transitions !== undefined &&
        inst.transitions.length > 0 &&
        inst.transitions[0]!.atMs <= now
      ) {
        const t = inst.transitions.shift()!;
        if (t.remove) {
          this.instances.delete(key);
          break;
        }
        if (t.status !== undefined) inst.status = t.status;
        if (t.ip === 'new') inst.natIP = this.allocateIp();
        if (t.ip === 'none') inst.natIP = undefined;
      }
    }
  }

  private visible(inst: FakeInstance | undefined): inst is FakeInstance {
    return inst !== undefined && (inst.visibleAtMs === undefined || inst.visibleAtMs <= Date.now());
  }

  private status(op: FakeOperation): 'PENDING' | 'RUNNING' | 'DONE' {
    const now = Date.now();
    if (now >= op.doneAtMs) {
      // DONE means applied: a wait's timer may fire a millisecond before Date.now reaches
      // doneAtMs, so its settle() skipped the change that this later clock reading calls done.
      this.settle();
      return 'DONE';
    }
    return now - op.startMs < this.timing.pendingMs ? 'PENDING' : 'RUNNING';
  }

  private opJson(op: FakeOperation): Record<string, unknown> {
    const status = this.status(op);
    const scopeUrl = op.global
      ? `${HOST_BASE}/projects/${this.project}/global`
      : `${HOST_BASE}/projects/${this.project}/zones/${op.zone}`;
    const out: Record<string, unknown> = {
      kind: 'compute#operation',
      id: op.id,
      name: op.name,
      ...(op.global ? {} : { zone: scopeUrl }),
      operationType: op.operationType,
      targetLink: `${scopeUrl}/${op.global?.collection ?? 'instances'}/${op.targetName}`,
      targetId: op.id,
      status,
      progress: status === 'DONE' ? 100 : 0,
      insertTime: op.insertTime,
      selfLink: `${scopeUrl}/operations/${op.name}`,
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

  private error(
    res: ServerResponse,
    status: number,
    reason: string,
    message: string,
    domain = 'global',
  ): void {
    this.json(res, status, {
      error: { code: status, message, errors: [{ message, domain, reason }] },
    });
  }

  /** Counts this request against its project's per-second limit (GCE's per-project read/write rate limits). */
  private rateLimited(path: string): boolean {
    const project = path.split('/')[4] ?? '';
    const owner = project === this.project ? this : this.siblings.get(project);
    if (owner === undefined) return false;
    const limit = owner.rateLimitPerSecond ?? this.rateLimitPerSecond;
    const now = Date.now();
    while (owner.recent.length > 0 && owner.recent[0]! <= now - 1_000) owner.recent.shift();
    if (limit === undefined) return false;
    if (owner.recent.length >= limit) return true;
    owner.recent.push(now);
    return false;
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
    if (rec.authorization !== `Bearer ${this.token}` && !this.otherTokens.has(rec.authorization ?? '')) {
      this.error(res, 401, 'required', 'Request is missing required authentication credential.');
      return;
    }
    if (this.rateLimited(url.pathname)) {
      this.error(res, 403, 'rateLimitExceeded', 'Rate Limit Exceeded', 'usageLimits');
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
    if (rest[0] === 'global') return this.global(rec.method, res, rest.slice(1), url.searchParams, body);
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
      if (rest.length === 5 && rest[4] === 'wait' && rec.method === 'POST') return this.waitFor(res, op);
    }
    this.error(res, 404, 'notFound', 'unknown path');
  }

  /** Held until the operation is DONE or GCE's limit on one wait passes. */
  private async waitFor(res: ServerResponse, op: FakeOperation): Promise<void> {
    const holdMs = Math.max(0, Math.min(op.doneAtMs - Date.now(), this.timing.waitMaxMs));
    if (holdMs > 0) {
      await new Promise<void>((r) => {
        const t = setTimeout(() => {
          this.held.delete(t);
          r();
        }, holdMs);
        this.held.add(t);
      });
    }
    this.settle();
    this.json(res, 200, this.opJson(op));
  }

  /** `global/firewalls[/<name>]` (gcp-fake-firewalls.ts) and `global/operations/<name>[/wait]`. */
  private async global(
    method: string,
    res: ServerResponse,
    rest: string[],
    query: URLSearchParams,
    body: unknown,
  ): Promise<void> {
    const [collection, name = ''] = rest;
    if (collection === 'firewalls' && this.firewalls.serve(method, res, rest.slice(1), query, body)) return;
    if (collection === 'operations' && rest.length >= 2) {
      const op = this.operations.find((o) => o.global !== undefined && o.name === name);
      if (op === undefined) {
        const path = `projects/${this.project}/global/operations/${name}`;
        return this.error(res, 404, 'notFound', `The resource '${path}' was not found`);
      }
      if (rest.length === 2 && method === 'GET') return this.json(res, 200, this.opJson(op));
      if (rest.length === 3 && rest[2] === 'wait' && method === 'POST') return this.waitFor(res, op);
    }
    this.error(res, 404, 'notFound', 'unknown path');
  }

  /** What the firewall part uses of this fake: a change is a global operation, applied when DONE. */
  private firewallHost(): FirewallHost {
    return {
      project: this.project,
      base: HOST_BASE,
      missing: this.missing,
      settle: () => this.settle(),
      newId: () => String(this.nextId++),
      timestamp: rfc3339,
      startOperation: (res, type, target, apply) => {
        const op = this.newOperation('', type, target, this.timing.firewallMs);
        op.global = { collection: 'firewalls', apply };
        this.json(res, 200, this.opJson(op));
      },
      insertRunning: (target) =>
        this.operations.some(
          (o) =>
            o.global !== undefined &&
            o.targetName === target &&
            o.operationType === 'insert' &&
            this.status(o) !== 'DONE',
        ),
      json: (res, status, body) => this.json(res, status, body),
      error: (res, status, reason, message) => this.error(res, status, reason, message),
    };
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
    const invalid = this.invalidField(resource, zone);
    if (invalid !== undefined) {
      this.error(res, 400, 'invalid', invalid);
      return;
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
    const now = Date.now();
    const t = this.timing;
    const inst: FakeInstance = {
      id: String(this.nextId++),
      name,
      zone,
      status: 'PROVISIONING',
      creationTimestamp: rfc3339(new Date(now)),
      labels: { ...((resource.labels as Record<string, string> | undefined) ?? {}) },
      networkIP: this.allocateInternalIp(),
      resource,
      visibleAtMs: now + t.visibleAfterMs,
      // The boot steps: STAGING halfway through the insert, RUNNING with the IP a little after it is DONE.
      transitions: [
        { atMs: now + t.insertMs / 2, status: 'STAGING' },
        { atMs: now + t.insertMs + t.runningLagMs, status: 'RUNNING', ip: 'new' },
      ],
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

  /**
   * What GCE refuses synchronously with 400 before resolving anything: a
   * malformed image path, a machine type the zone does not offer, metadata
   * over its limits. The message names the field, as GCE's does.
   */
  private invalidField(resource: Record<string, unknown>, zone: string): string | undefined {
    const disks = (resource.disks ?? []) as { initializeParams?: { sourceImage?: unknown } }[];
    const image = str(disks[0]?.initializeParams?.sourceImage).replace(/^https:\/\/[^/]+\/compute\/v1\//, '');
    if (!IMAGE_PATH.test(image)) {
      return `Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '${image}'. The URL is malformed.`;
    }
    const machineType = str(resource.machineType);
    const type = lastSegment(machineType);
    if (!MACHINE_TYPES.test(type)) {
      return `Invalid value for field 'resource.machineType': '${machineType}'. Machine type with name '${type}' does not exist in zone '${zone}'.`;
    }
    const items = ((resource.metadata as { items?: { key?: string; value?: string }[] } | undefined)?.items ??
      []) as { key?: string; value?: string }[];
    let total = 0;
    for (const item of items) {
      const size = Buffer.byteLength(item.key ?? '') + Buffer.byteLength(item.value ?? '');
      total += size;
      if (Buffer.byteLength(item.value ?? '') > METADATA_VALUE_MAX) {
        return `Invalid value for field 'resource.metadata': the value of metadata item '${item.key ?? ''}' exceeds ${METADATA_VALUE_MAX} bytes.`;
      }
    }
    if (total > METADATA_TOTAL_MAX) {
      return `Invalid value for field 'resource.metadata': metadata total size exceeds ${METADATA_TOTAL_MAX} bytes.`;
    }
    return undefined;
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
    if (!this.visible(inst)) {
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
    if (!this.visible(inst)) {
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
    inst.transitions = [];
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
    // The page token is `<empty pages still to answer>.<offset>`.
    const [emptyLeft, offset] = (query.get('pageToken') ?? `${this.emptyPages}.0`)
      .split('.')
      .map((n) => Number(n) || 0) as [number, number];
    const matching = [...this.instances.values()]
      .filter((i) => this.visible(i) && !this.unreachableZones.has(i.zone))
      .map((i) => this.instanceJson(i))
      .filter((i) => terms.every((t) => t.test(i)))
      .sort((a, b) => String(a.name).localeCompare(String(b.name)));
    // An empty page with a next token, as GCE answers when a page's time ran out.
    const page = emptyLeft > 0 ? [] : matching.slice(offset, offset + maxResults);
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
    if (emptyLeft > 0) body.nextPageToken = `${emptyLeft - 1}.${offset}`;
    else if (offset + maxResults < matching.length) body.nextPageToken = `0.${offset + maxResults}`;
    if (this.unreachableZones.size > 0)
      body.unreachables = [...this.unreachableZones].map((z) => `zones/${z}`);
    this.json(res, 200, body);
  }
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
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
