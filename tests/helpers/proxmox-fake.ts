/**
 * A wire-level fake of a Proxmox VE cluster's API (`/api2/json` over HTTPS
 * with a test CA), driven by the provider's real client. No PVE can run on
 * this machine (its packages are not in Debian), so this replays what the
 * research notes (../shared/proxmox/RESEARCH.md) document of real clusters,
 * with the real messages and codes:
 *
 * - tasks (UPIDs) that run on timers and end `OK`, `WARNINGS: n` or an error
 *   behind HTTP 200; a task log;
 * - `/cluster/nextid` that reserves nothing; clones that hold `lock: clone`
 *   (no name yet) for `cloneMs`; storage-lock timeouts when more clones than
 *   `storageLockSlots` run on one node; a stolen VMID between nextid and
 *   clone; the template's options and tags copied to the clone;
 * - tags validated by PVE's grammar, lowercased, sorted and deduplicated;
 * - the guest agent answering 500 until `agentDelayMs` after start, then
 *   noisy interfaces (lo, docker0, link-local, another NIC);
 * - `/cluster/resources` showing a new VM without name and with status
 *   `unknown` for `rrdLagMs` (RRD lag); VMs the token cannot audit left out;
 * - privileges from the schema's own permission checks, 403 otherwise;
 * - 595 for calls proxied to an offline node;
 * - error bodies with `message` (9.x) or the old `{"data":null}` (8.x).
 *
 * Every request is checked against the schema of the chosen PVE version (a
 * bad parameter is refused with PVE's 400, as PVE refuses it), and every
 * answer too (a non-conforming answer is recorded in `violations`, which
 * the tests assert empty). Without the schema files the fake runs
 * unchecked and says so.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { serverTls, type ServerTls } from '../../local-servers/pki.js';
import { permissionNeeds, PveSchema, schemaAvailable, type SchemaVersion } from './proxmox-schema.js';

export interface FakeTiming {
  /** A clone task runs (the new VM locked `clone`, nameless) this long. */
  cloneMs: number;
  /** Start, stop, destroy, upload tasks take this long. */
  taskMs: number;
  /** The agent answers "not running" this long after a start. */
  agentDelayMs: number;
  /** A new VM shows in /cluster/resources without a name this long. */
  rrdLagMs: number;
}

export const DEFAULT_TIMING: FakeTiming = { cloneMs: 60, taskMs: 15, agentDelayMs: 40, rrdLagMs: 150 };

export interface FakeFaults {
  /** The next N clones find their newid taken by another client just before (the nextid race). */
  stealNextClones: number;
  /** Clones running at once per node beyond which a clone task fails with a storage-lock timeout. */
  storageLockSlots: number;
  /** The next task of this type (`qmstart`, `qmclone`, `imgupload`, ...) fails with this exit status. */
  failNextTask?: { type: string; exit: string };
  /** Successful tasks end `WARNINGS: 1` instead of `OK`. */
  warnings: boolean;
  /** Nodes that are offline: calls proxied to them answer 595. */
  offlineNodes: Set<string>;
}

export interface FakeVm {
  vmid: number;
  node: string;
  template: boolean;
  status: 'running' | 'stopped';
  /** Only when set: what status/current reports as qmpstatus. */
  qmpstatus?: string;
  lock?: string;
  config: Record<string, string>;
  createdAt: number;
  startedAt?: number;
  /** The agent reports no address on net0's NIC. */
  noIp?: boolean;
  ip: string;
}

interface FakeTask {
  upid: string;
  node: string;
  type: string;
  endsAt: number;
  exit?: string;
  /** Runs when the task ends; returns an error exit status, or undefined for success. */
  onEnd: () => string | undefined;
  /** Runs instead of onEnd when a fault fails the task (a failed clone leaves nothing). */
  onFail?: () => void;
  done: boolean;
  log: string[];
}

export interface FakeToken {
  id: string;
  secret: string;
  /** ACL path → privileges, propagating to sub-paths. */
  privileges: Record<string, string[]>;
}

export const ALL_VM_PRIVILEGES = [
  'VM.Audit',
  'VM.Allocate',
  'VM.Clone',
  'VM.Config.Disk',
  'VM.Config.CDROM',
  'VM.Config.CPU',
  'VM.Config.Memory',
  'VM.Config.Network',
  'VM.Config.Options',
  'VM.Config.Cloudinit',
  'VM.Config.HWType',
  'VM.PowerMgmt',
  'VM.Monitor',
  'VM.GuestAgent.Audit',
];
export const ALL_STORAGE_PRIVILEGES = [
  'Datastore.Audit',
  'Datastore.AllocateSpace',
  'Datastore.AllocateTemplate',
];

/** The test CA and the fake's certificate (127.0.0.1), made once per process. */
let pki: Promise<ServerTls> | undefined;

function testPki(): Promise<ServerTls> {
  pki ??= serverTls('pve-fake');
  return pki;
}

/** Tags as PVE stores them: split on ; , or space, lowercased, sorted, deduplicated. */
export function normaliseTags(text: string): string {
  return [
    ...new Set(
      text
        .split(/[;, ]+/)
        .filter((t) => t !== '')
        .map((t) => t.toLowerCase()),
    ),
  ]
    .sort()
    .join(';');
}

export interface FakeOptions {
  version: SchemaVersion;
  nodes: string[];
  /** Template VMID per node (all nodes get one). */
  templates: Record<string, number>;
  isoStorage?: string;
  timing?: Partial<FakeTiming>;
}

export class ProxmoxFake {
  readonly vms = new Map<number, FakeVm>();
  readonly tasks = new Map<string, FakeTask>();
  /** node/storage → filename → bytes. */
  readonly storage = new Map<string, Map<string, Buffer>>();
  readonly timing: FakeTiming;
  readonly faults: FakeFaults = {
    stealNextClones: 0,
    storageLockSlots: 1000,
    warnings: false,
    offlineNodes: new Set(),
  };
  /** Answers that did not conform to the schema (`METHOD template: problem`). */
  readonly violations: string[] = [];
  /** Requests the fake refused for a schema reason (field → PVE's message), for tests of refusals. */
  readonly refusals: Array<{ template: string; errors: Record<string, string> }> = [];
  /** Requests checked against the schema. */
  checked = 0;
  /** Every request, `METHOD template`, in order. */
  readonly requests: string[] = [];
  tokens: FakeToken[] = [];
  /** Calls about these VMIDs hang until released. */
  readonly stalled = new Map<number, Promise<void>>();
  private readonly schema: PveSchema | undefined;
  private server: Server | undefined;
  private pid = 0x1000;
  url = '';
  caFile = '';
  fingerprint = '';

  constructor(readonly options: FakeOptions) {
    this.timing = { ...DEFAULT_TIMING, ...options.timing };
    if (schemaAvailable(options.version)) this.schema = new PveSchema(options.version);
    else
      console.log(
        `proxmox-fake: PVE ${options.version} schema not found (../shared/proxmox or EP_PROXMOX_SCHEMA_DIR): requests and answers are NOT schema-checked`,
      );
    const iso = options.isoStorage ?? 'local';
    for (const node of options.nodes) {
      this.storage.set(`${node}/${iso}`, new Map());
      const vmid = options.templates[node]!;
      this.vms.set(vmid, {
        vmid,
        node,
        template: true,
        status: 'stopped',
        config: {
          name: `tmpl-${node}`,
          // Template tags are copied to clones, ours included (a user tagged the template by hand).
          tags: 'base-image;egress-uid-stale',
          description: 'Debian 12 cloud image',
          net0: 'virtio=BC:24:11:00:00:00,bridge=vmbr0',
          cores: '1',
          memory: '512',
          agent: '1',
          scsi0: `local-lvm:base-${vmid}-disk-0,size=2G`,
          template: '1',
        },
        createdAt: Date.now() - 3_600_000,
        ip: '',
      });
    }
  }

  /** Named formats the validator met and accepted without checking. */
  get uncheckedFormats(): Set<string> {
    return this.schema?.uncheckedFormats ?? new Set();
  }

  get schemaChecked(): boolean {
    return this.schema !== undefined;
  }

  async start(): Promise<void> {
    const p = await testPki();
    this.caFile = p.caFile;
    this.fingerprint = p.fingerprint;
    this.server = createServer({ key: p.key, cert: p.cert }, (req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (s === undefined) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  addToken(id: string, privileges: Record<string, string[]>): FakeToken {
    const token = { id, secret: randomBytes(16).toString('hex'), privileges };
    this.tokens.push(token);
    return token;
  }

  /** The token's privileges at `path`: its ACLs on the path and every ancestor (propagation). */
  privilegesAt(token: FakeToken, path: string): Set<string> {
    const out = new Set<string>();
    const parts = path.split('/').filter((p) => p !== '');
    const prefixes = ['/', ...parts.map((_, i) => '/' + parts.slice(0, i + 1).join('/'))];
    for (const p of prefixes) for (const priv of token.privileges[p] ?? []) out.add(priv);
    // A VM in a pool inherits the pool's ACL.
    const vm = /^\/vms\/(\d+)$/.exec(path);
    const pool = vm === null ? undefined : this.vms.get(Number(vm[1]))?.config.pool;
    if (pool !== undefined) for (const priv of token.privileges[`/pool/${pool}`] ?? []) out.add(priv);
    return out;
  }

  // ---- hooks for tests ----

  /** Puts a VM straight into the cluster (a user's, or an instance with hand-made marks). */
  putVm(vm: Partial<FakeVm> & { vmid: number; node: string; config: Record<string, string> }): FakeVm {
    const full: FakeVm = {
      template: false,
      status: 'stopped',
      createdAt: Date.now() - 3_600_000,
      ip: this.nextIp(),
      ...vm,
      config: { net0: `virtio=${this.mac(vm.vmid)},bridge=vmbr0`, ...vm.config },
    };
    if (full.config.tags !== undefined) full.config.tags = normaliseTags(full.config.tags);
    this.vms.set(vm.vmid, full);
    return full;
  }

  vmByName(name: string): FakeVm | undefined {
    return [...this.vms.values()].find((v) => v.config.name === name);
  }

  stall(vmid: number): () => void {
    let release!: () => void;
    this.stalled.set(vmid, new Promise<void>((r) => (release = r)));
    return () => {
      this.stalled.delete(vmid);
      release();
    };
  }

  private ipSeq = 10;
  private nextIp(): string {
    this.ipSeq++;
    return `10.20.${Math.floor(this.ipSeq / 250)}.${(this.ipSeq % 250) + 2}`;
  }

  private mac(vmid: number): string {
    const h = createHash('sha256').update(String(vmid)).digest();
    return `BC:24:11:${[h[0], h[1], h[2]].map((b) => b!.toString(16).padStart(2, '0').toUpperCase()).join(':')}`;
  }

  // ---- tasks ----

  private task(
    node: string,
    type: string,
    id: string,
    ms: number,
    onEnd: () => string | undefined,
    onFail?: () => void,
  ): string {
    const now = Math.floor(Date.now() / 1000);
    const hex = (n: number, w: number) => n.toString(16).toUpperCase().padStart(w, '0');
    const pid = this.pid++;
    const upid = `UPID:${node}:${hex(pid, 8)}:${hex(pid * 7, 8)}:${hex(now, 8)}:${type}:${id}:${this.tokens[0]?.id ?? 'root@pam'}:`;
    const t: FakeTask = { upid, node, type, endsAt: Date.now() + ms, onEnd, done: false, log: [] };
    if (onFail !== undefined) t.onFail = onFail;
    this.tasks.set(upid, t);
    setTimeout(() => this.endTask(t), ms).unref();
    return upid;
  }

  private endTask(t: FakeTask): void {
    if (t.done) return;
    t.done = true;
    const injected = this.faults.failNextTask;
    let exit: string | undefined;
    if (injected !== undefined && injected.type === t.type) {
      this.faults.failNextTask = undefined;
      exit = injected.exit;
      t.onFail?.();
    } else exit = t.onEnd();
    t.exit = exit ?? (this.faults.warnings ? 'WARNINGS: 1' : 'OK');
    t.log.push(
      `task started by fake`,
      ...(exit === undefined ? [] : [exit]),
      `TASK ${exit === undefined ? 'OK' : 'ERROR: ' + exit}`,
    );
  }

  // ---- HTTP ----

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const url = new URL(req.url ?? '/', 'https://fake');
    const method = req.method ?? 'GET';
    const path = url.pathname.replace(/^\/api2\/json/, '');
    const send = (status: number, reason: string, data: unknown, errors?: Record<string, string>) => {
      const old = this.options.version.startsWith('8');
      const payload: Record<string, unknown> = { data };
      if (errors !== undefined) payload.errors = errors;
      if (status >= 400 && !old) payload.message = `${reason}\n`;
      res.statusCode = status;
      res.statusMessage = reason.replace(/[^\x20-\x7e]/g, ' ').slice(0, 200);
      res.setHeader('content-type', 'application/json;charset=UTF-8');
      res.end(JSON.stringify(payload));
    };
    try {
      const token = this.authenticate(req.headers.authorization);
      if (token === undefined) return send(401, 'authentication failure', null);
      let params: Record<string, string> = {};
      let upload: { filename: string; bytes: Buffer } | undefined;
      if (method === 'GET' || method === 'DELETE') params = Object.fromEntries(url.searchParams);
      else if ((req.headers['content-type'] ?? '').startsWith('multipart/form-data')) {
        const form = await new Request('https://fake/', {
          method: 'POST',
          headers: { 'content-type': req.headers['content-type']! },
          body,
        }).formData();
        for (const [k, v] of form.entries()) {
          if (typeof v === 'string') params[k] = v;
          else {
            params[k] = v.name;
            upload = { filename: v.name, bytes: Buffer.from(await v.arrayBuffer()) };
          }
        }
      } else params = Object.fromEntries(new URLSearchParams(body.toString('utf8')));
      const route = this.schema?.match(method, path);
      if (this.schema !== undefined) {
        if (route === undefined) return send(501, `no such uri`, null);
        if (route.info === undefined) return send(501, `Method '${method} ${path}' not implemented`, null);
        const all = { ...route.pathParams, ...params };
        const errors = this.schema.checkParams(route.info, all);
        this.checked++;
        if (Object.keys(errors).length > 0) {
          this.refusals.push({ template: route.template, errors });
          return send(400, 'Parameter verification failed.', null, errors);
        }
        const needs = permissionNeeds(route.info, all);
        if (needs !== 'all') {
          const results = needs.checks.map((c) => {
            const have = this.privilegesAt(token, c.path);
            return c.any ? c.privs.some((p) => have.has(p)) : c.privs.every((p) => have.has(p));
          });
          const ok = needs.op === 'and' ? results.every(Boolean) : results.some(Boolean);
          if (!ok) {
            const c = needs.checks[results.indexOf(false)]!;
            return send(403, `Permission check failed (${c.path}, ${c.privs.join('|')})`, null);
          }
        }
        if (route.info.proxyto === 'node' && this.faults.offlineNodes.has(all.node ?? ''))
          return send(595, 'Connection timed out', null);
      }
      const template = route?.template ?? path;
      this.requests.push(`${method} ${template}`);
      const vmidMatch = /^\/nodes\/[^/]+\/qemu\/(\d+)/.exec(path);
      const stall = vmidMatch === null ? undefined : this.stalled.get(Number(vmidMatch[1]));
      if (stall !== undefined) await stall;
      const answer = this.route(method, path, params, token, upload);
      if (answer.status !== 200) return send(answer.status, answer.reason ?? 'error', null, answer.errors);
      if (this.schema !== undefined && route?.info !== undefined)
        for (const problem of this.schema.checkReturns(route.info, answer.data))
          this.violations.push(`${method} ${template}: ${problem}`);
      send(200, 'OK', answer.data);
    } catch (err) {
      send(500, `fake error: ${(err as Error).message}`, null);
    }
  }

  private authenticate(header: string | undefined): FakeToken | undefined {
    const m = /^PVEAPIToken=([^=]+)=(.+)$/.exec(header ?? '');
    if (m === null) return undefined;
    return this.tokens.find((t) => t.id === m[1] && t.secret === m[2]);
  }

  private route(
    method: string,
    path: string,
    params: Record<string, string>,
    token: FakeToken,
    upload: { filename: string; bytes: Buffer } | undefined,
  ): { status: number; reason?: string; data?: unknown; errors?: Record<string, string> } {
    const ok = (data: unknown) => ({ status: 200, data });
    const fail = (status: number, reason: string, errors?: Record<string, string>) => ({
      status,
      reason,
      ...(errors === undefined ? {} : { errors }),
    });
    const now = Date.now();
    let m: RegExpExecArray | null;
    if (method === 'GET' && path === '/version')
      return ok({
        version: this.options.version,
        release: this.options.version.split('.').slice(0, 2).join('.'),
        repoid: 'fa0b4f6e',
      });
    if (method === 'GET' && path === '/cluster/status')
      return ok([
        {
          type: 'cluster',
          id: 'cluster',
          name: 'fake',
          nodes: this.options.nodes.length,
          quorate: 1,
          version: 4,
        },
        ...this.options.nodes.map((n, i) => ({
          type: 'node',
          id: `node/${n}`,
          name: n,
          nodeid: i + 1,
          online: this.faults.offlineNodes.has(n) ? 0 : 1,
          local: i === 0 ? 1 : 0,
          ip: `192.0.2.${i + 1}`,
        })),
      ]);
    if (method === 'GET' && path === '/nodes')
      return ok(
        this.options.nodes.map((n) => ({
          node: n,
          status: this.faults.offlineNodes.has(n) ? 'offline' : 'online',
        })),
      );
    if (method === 'GET' && path === '/access/permissions') {
      const p = params.path ?? '/';
      const privs = this.privilegesAt(token, p);
      return ok({ [p]: Object.fromEntries([...privs].map((x) => [x, 1])) });
    }
    if (method === 'GET' && path === '/cluster/resources') {
      const rows = [...this.vms.values()]
        // PVE leaves out, silently, every VM the caller cannot audit.
        .filter((vm) => this.privilegesAt(token, `/vms/${vm.vmid}`).has('VM.Audit'))
        .map((vm) => {
          const fresh = now - vm.createdAt < this.timing.rrdLagMs;
          return {
            id: `qemu/${vm.vmid}`,
            type: 'qemu',
            vmid: vm.vmid,
            node: vm.node,
            ...(fresh || vm.config.name === undefined ? {} : { name: vm.config.name }),
            status: fresh ? 'unknown' : vm.status,
            template: vm.template ? 1 : 0,
            ...(vm.config.tags === undefined ? {} : { tags: vm.config.tags }),
            ...(vm.lock === undefined ? {} : { lock: vm.lock }),
            ...(vm.config.pool === undefined ? {} : { pool: vm.config.pool }),
            maxmem: 1024 * 1024 * 1024,
            maxcpu: 1,
          };
        });
      return ok(rows);
    }
    if (method === 'GET' && path === '/cluster/nextid') {
      const want = params.vmid === undefined ? undefined : Number(params.vmid);
      if (want !== undefined) {
        if (this.vms.has(want))
          return fail(400, 'Parameter verification failed.', { vmid: `VM ${want} already exists` });
        return ok(want);
      }
      let id = 100;
      while (this.vms.has(id)) id++;
      return ok(id);
    }
    if ((m = /^\/nodes\/([^/]+)\/tasks\/([^/]+)\/(status|log)$/.exec(path)) !== null && method === 'GET') {
      const t = this.tasks.get(decodeURIComponent(m[2]!));
      if (t === undefined) return fail(500, 'no such task');
      if (m[3] === 'log') return ok(t.log.map((line, i) => ({ n: i + 1, t: line })));
      const [, node, pid, pstart, start, type, id, user] = t.upid.split(':');
      return ok({
        upid: t.upid,
        node: node!,
        pid: parseInt(pid!, 16),
        pstart: parseInt(pstart!, 16),
        starttime: parseInt(start!, 16),
        type: type!,
        id: id!,
        user: user!,
        status: t.done ? 'stopped' : 'running',
        ...(t.done ? { exitstatus: t.exit! } : {}),
      });
    }
    if ((m = /^\/nodes\/([^/]+)\/storage\/([^/]+)\/(upload|content)(?:\/([^/]+))?$/.exec(path)) !== null) {
      const [node, storage] = [m[1]!, m[2]!];
      const files = this.storage.get(`${node}/${storage}`);
      if (files === undefined) return fail(500, `storage '${storage}' does not exist`);
      if (m[3] === 'upload' && method === 'POST') {
        if (upload === undefined) return fail(400, 'Parameter verification failed.', { filename: 'no file' });
        if (files.has(upload.filename))
          return fail(500, `refusing to override existing file '${upload.filename}'`);
        const bytes = upload.bytes;
        // A NoCloud seed: an ISO9660 primary volume descriptor with the label `cidata`.
        const label = bytes.subarray(0x8028, 0x8028 + 6).toString('latin1');
        if (bytes.subarray(0x8001, 0x8006).toString('latin1') !== 'CD001' || label !== 'cidata')
          return fail(500, 'not a cidata ISO (fake)');
        return ok(
          this.task(node, 'imgcopy', '', this.timing.taskMs, () => {
            files.set(upload.filename, bytes);
            return undefined;
          }),
        );
      }
      if (m[3] === 'content' && m[4] === undefined && method === 'GET')
        return ok(
          [...files.entries()].map(([f, b]) => ({
            volid: `${storage}:iso/${f}`,
            format: 'iso',
            size: b.length,
            content: 'iso',
          })),
        );
      if (m[3] === 'content' && m[4] !== undefined && method === 'DELETE') {
        const volid = decodeURIComponent(m[4]);
        const file = volid.replace(new RegExp(`^${storage}:iso/`), '');
        if (!files.has(file)) return fail(500, `volume '${volid}' does not exist`);
        files.delete(file);
        return ok(this.task(node, 'imgdel', volid, this.timing.taskMs, () => undefined));
      }
    }
    if ((m = /^\/nodes\/([^/]+)\/qemu\/(\d+)(\/.*)?$/.exec(path)) !== null) {
      const [node, vmid, rest] = [m[1]!, Number(m[2]), m[3] ?? ''];
      const vm = this.vms.get(vmid);
      const missing = () =>
        fail(500, `Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
      if (vm === undefined || vm.node !== node) return missing();
      if (rest === '/clone' && method === 'POST') return this.clone(vm, params);
      if (rest === '/config' && method === 'GET') {
        const cfg: Record<string, unknown> = {
          digest: createHash('sha1').update(JSON.stringify(vm.config)).digest('hex'),
        };
        for (const [k, v] of Object.entries(vm.config)) if (k !== 'pool' && k !== 'template') cfg[k] = v;
        if (vm.template) cfg.template = 1;
        if (vm.lock !== undefined) cfg.lock = vm.lock;
        for (const k of ['cores', 'memory'])
          if (typeof cfg[k] === 'string') cfg[k] = k === 'cores' ? Number(cfg[k]) : cfg[k];
        return ok(cfg);
      }
      if (rest === '/config' && method === 'PUT') {
        if (vm.lock !== undefined) return fail(500, `VM is locked (${vm.lock})`);
        for (const [k, v] of Object.entries(params)) {
          if (k === 'node' || k === 'vmid' || k === 'digest') continue;
          if (k === 'delete') for (const d of v.split(/[,; ]+/)) delete vm.config[d];
          else vm.config[k] = k === 'tags' ? normaliseTags(v) : v;
        }
        return ok(null);
      }
      if (rest === '/status/current' && method === 'GET') {
        const running = vm.status === 'running';
        return ok({
          vmid,
          status: vm.status,
          ha: { managed: 0 },
          ...(vm.config.name === undefined ? {} : { name: vm.config.name }),
          ...(vm.config.tags === undefined ? {} : { tags: vm.config.tags }),
          ...(vm.lock === undefined ? {} : { lock: vm.lock }),
          ...(running
            ? {
                qmpstatus: vm.qmpstatus ?? 'running',
                pid: 4242,
                uptime: Math.floor((now - (vm.startedAt ?? now)) / 1000),
              }
            : { qmpstatus: 'stopped' }),
          agent: vm.config.agent === '1' ? 1 : 0,
          cpus: Number(vm.config.cores ?? 1),
          maxmem: Number(vm.config.memory ?? 512) * 1024 * 1024,
          template: vm.template ? 1 : 0,
        });
      }
      if (rest === '/status/start' && method === 'POST') {
        if (vm.lock !== undefined) return fail(500, `VM is locked (${vm.lock})`);
        return ok(
          this.task(node, 'qmstart', String(vmid), this.timing.taskMs, () => {
            if (vm.status === 'running') return `VM ${vmid} already running`;
            vm.status = 'running';
            vm.startedAt = Date.now();
            return undefined;
          }),
        );
      }
      if (rest === '/status/stop' && method === 'POST')
        return ok(
          this.task(node, 'qmstop', String(vmid), this.timing.taskMs, () => {
            vm.status = 'stopped';
            return undefined;
          }),
        );
      if (rest === '' && method === 'DELETE') {
        if (vm.status === 'running') return fail(500, `VM ${vmid} is running - destroy failed`);
        if (vm.lock !== undefined) return fail(500, `VM is locked (${vm.lock})`);
        vm.lock = 'destroyed';
        return ok(
          this.task(node, 'qmdestroy', String(vmid), this.timing.taskMs, () => {
            this.vms.delete(vmid);
            return undefined;
          }),
        );
      }
      if (rest === '/agent/network-get-interfaces' && method === 'GET') {
        if (vm.status !== 'running') return fail(500, `VM ${vmid} is not running`);
        if (vm.startedAt === undefined || now - vm.startedAt < this.timing.agentDelayMs)
          return fail(500, 'QEMU guest agent is not running');
        const mac = (/=([0-9A-Fa-f:]{17})/.exec(vm.config.net0 ?? '')?.[1] ?? '').toLowerCase();
        const nic = (name: string, hw: string, addrs: Array<[string, string, number]>) => ({
          name,
          'hardware-address': hw,
          'ip-addresses': addrs.map(([type, a, prefix]) => ({
            'ip-address-type': type,
            'ip-address': a,
            prefix,
          })),
        });
        return ok({
          result: [
            nic('lo', '00:00:00:00:00:00', [
              ['ipv4', '127.0.0.1', 8],
              ['ipv6', '::1', 128],
            ]),
            nic('docker0', '02:42:ac:11:00:01', [['ipv4', '172.17.0.1', 16]]),
            nic('eth0', mac, [
              ['ipv6', 'fe80::be24:11ff:fe00:1', 64],
              ['ipv4', '169.254.3.3', 16],
              ...(vm.noIp ? [] : ([['ipv4', vm.ip, 24]] as Array<[string, string, number]>)),
            ]),
            nic('eth1', '02:00:00:00:00:99', [['ipv4', '192.168.77.5', 24]]),
          ],
        });
      }
    }
    return fail(501, `Method '${method} ${path}' not implemented (fake)`);
  }

  private clone(
    template: FakeVm,
    params: Record<string, string>,
  ): { status: number; reason?: string; data?: unknown; errors?: Record<string, string> } {
    const newid = Number(params.newid);
    const full = params.full === '1' || params.full === 'true';
    if (!template.template && !full)
      return { status: 500, reason: 'linked clone feature is not supported for drive' };
    if (params.storage !== undefined && !full)
      return {
        status: 400,
        reason: 'Parameter verification failed.',
        errors: { storage: "parameter 'storage' not allowed for linked clones" },
      };
    if (this.faults.stealNextClones > 0 && !this.vms.has(newid)) {
      this.faults.stealNextClones--;
      this.putVm({ vmid: newid, node: template.node, config: { name: `someone-elses-${newid}` } });
    }
    if (this.vms.has(newid))
      return { status: 500, reason: `unable to create VM ${newid}: config file already exists` };
    const running = [...this.vms.values()].filter(
      (v) => v.node === template.node && v.lock === 'clone',
    ).length;
    const vm: FakeVm = {
      vmid: newid,
      node: template.node,
      template: false,
      status: 'stopped',
      lock: 'clone',
      // The temporary config: nothing but the lock until the task ends.
      config: {},
      createdAt: Date.now(),
      ip: this.nextIp(),
    };
    this.vms.set(newid, vm);
    const lockTimeout = running >= this.faults.storageLockSlots;
    return {
      status: 200,
      data: this.task(
        template.node,
        'qmclone',
        String(template.vmid),
        this.timing.cloneMs,
        () => {
          if (lockTimeout) {
            this.vms.delete(newid);
            return `clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout`;
          }
          if (this.vms.get(newid) !== vm) return `clone failed: VM ${newid} vanished`;
          // All template options, tags included, are copied; then the clone's own name, description and pool.
          const { template: _t, name: _n, ...copied } = template.config;
          vm.config = {
            ...copied,
            net0: `virtio=${this.mac(newid)},bridge=vmbr0`,
            scsi0: `local-lvm:base-${template.vmid}-disk-0/vm-${newid}-disk-0,size=2G`,
            ...(params.name === undefined ? {} : { name: params.name }),
            ...(params.description === undefined ? {} : { description: params.description }),
            ...(params.pool === undefined ? {} : { pool: params.pool }),
          };
          delete vm.lock;
          return undefined;
        },
        // A failed clone leaves nothing: PVE removes the half-made VM.
        () => {
          if (this.vms.get(newid) === vm) this.vms.delete(newid);
        },
      ),
    };
  }
}

export async function startProxmoxFake(options: FakeOptions): Promise<ProxmoxFake> {
  const fake = new ProxmoxFake(options);
  await fake.start();
  return fake;
}
