/**
 * The `local` provider against real sockets and a real state directory: the
 * conformance suite, real CONNECT and plain-HTTP forwarding through an
 * instance, re-adoption after a restart (including a process killed with
 * SIGKILL right after create), the failure modes, the provisioning window,
 * address conflicts, self-bounded I/O and check().
 * Needs no Temporal and no apiserver.
 */
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, request as httpRequest, type Server } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { egressIpThrough } from '../../cli/egress-ip.js';
import { startIpEcho } from '../../local-servers/ip-echo.js';
import { classOf, ProviderError } from '../../providers/errors.js';
import { localConfigSchema, type LocalConfig } from '../../providers/local/config.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/provider.js';
import { instanceRecordPath, type LocalInstanceRecord } from '../../providers/local/store.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { MARK_MANAGED, MARK_UID, type CreateRequest } from '../../providers/types.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { eventually } from '../helpers/temporal.js';
import { capturedLogger } from '../helpers/captured-logger.js';

const run = promisify(execFile);
const live = () => new AbortController().signal;

/** A pino logger whose lines are kept in memory. */
function makeProvider(stateDir: string, overrides: Partial<LocalConfig> = {}, name = 'local-test') {
  const { logger, lines } = capturedLogger();
  const config = localConfigSchema.parse({ addressRange: '127.78.0.0/16', ...overrides });
  const provider = createLocalProvider({ name, config, stateDir, logger });
  return { provider, lines };
}

function request(port: number, overrides: Partial<CreateRequest> = {}): CreateRequest {
  const uid = overrides.uid ?? randomUUID();
  return {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'ns',
    proxyName: 'p',
    placement: {},
    port,
    installation: 'test',
    ...overrides,
  };
}

/** Backend manipulation for hooks: edit the record file the way an operator or a bug would. */
async function editRecord(
  stateDir: string,
  id: string,
  edit: (r: LocalInstanceRecord) => unknown,
): Promise<void> {
  const path = instanceRecordPath(stateDir, id.slice('local/'.length));
  const record = JSON.parse(await readFile(path, 'utf8')) as LocalInstanceRecord;
  await writeFile(path, JSON.stringify(edit(record)));
}

async function writeRawRecord(
  stateDir: string,
  name: string,
  labels: Record<string, string>,
): Promise<string> {
  const now = new Date().toISOString();
  const record = {
    schema: 1,
    name,
    labels,
    createdAt: now,
    readyAt: now,
    address: '',
    port: 1,
    state: 'running',
  };
  await writeFile(instanceRecordPath(stateDir, name), JSON.stringify(record));
  return `local/${name}`;
}

/**
 * Replaces the record with a FIFO: opening it for reading blocks until a
 * writer appears, which is a real stuck backend call. Release opens it
 * read-write (never blocks on Linux, and counts as the writer), closes it,
 * and puts the record back.
 */
async function stallRecord(stateDir: string, id: string): Promise<() => Promise<void>> {
  const path = instanceRecordPath(stateDir, id.slice('local/'.length));
  const saved = `${path}.saved`;
  await rename(path, saved);
  await run('mkfifo', [path]);
  return async () => {
    const fh = await open(path, 'r+');
    await fh.close();
    await rm(path, { force: true });
    await rename(saved, path);
  };
}

const PORT = 20_000 + Math.floor(Math.random() * 20_000);

describeProviderConformance('local', async () => {
  const stateDir = await mkdtemp(join(tmpdir(), 'ep-local-conformance-'));
  const { provider, lines } = makeProvider(stateDir);
  return {
    provider,
    logLines: () => lines,
    port: PORT,
    malformedIds: [
      'local/',
      'local/UPPER',
      'local/a/b',
      'gcp/proxy-abc',
      'local/-x',
      `local/${'a'.repeat(64)}`,
    ],
    hooks: {
      setUnknownState: (id) => editRecord(stateDir, id, (r) => ({ ...r, state: 'on-fire' })),
      setRunningWithoutIp: (id) => editRecord(stateDir, id, (r) => ({ ...r, address: '' })),
      createUnmarked: (name) => writeRawRecord(stateDir, name, { [MARK_UID]: randomUUID() }),
      createMarkedWithEmptyUid: (name) =>
        writeRawRecord(stateDir, name, { [MARK_MANAGED]: 'true', [MARK_UID]: '' }),
      rewriteMarks: (id, marks) =>
        editRecord(stateDir, id, (r) => ({
          ...r,
          labels: { ...r.labels, [MARK_UID]: marks.uid },
          createdAt: marks.createdAt.toISOString(),
        })),
      stall: (id) => stallRecord(stateDir, id),
    },
    cleanup: async () => {
      await provider.close();
      await rm(stateDir, { recursive: true, force: true });
    },
  };
});

// --- real traffic ------------------------------------------------------------

let target: Server;
let targetPort: number;

beforeAll(async () => {
  target = createHttpServer((req, res) => res.end(`hello from target ${req.method} ${req.url}`));
  await new Promise<void>((r) => target.listen(0, '127.0.0.1', () => r()));
  targetPort = (target.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise<void>((r) => target.close(() => r()));
});

/** A CONNECT tunnel through the proxy, then an HTTP/1.1 GET over it; returns the raw response. */
function viaConnect(proxyHost: string, proxyPort: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: proxyHost, port: proxyPort });
    let buffered = '';
    let tunnelled = false;
    socket.setTimeout(10_000, () => socket.destroy(new Error('timeout')));
    socket.on('error', reject);
    socket.on('connect', () =>
      socket.write(`CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nHost: 127.0.0.1:${targetPort}\r\n\r\n`),
    );
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      if (!tunnelled && buffered.includes('\r\n\r\n')) {
        if (!buffered.startsWith('HTTP/1.1 200'))
          return reject(new Error(`CONNECT refused: ${buffered.split('\r\n')[0]}`));
        tunnelled = true;
        buffered = '';
        socket.write(`GET /through-tunnel HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      }
    });
    socket.on('end', () => resolve(buffered));
  });
}

/** A plain absolute-form HTTP request through the proxy. */
function viaAbsoluteForm(proxyHost: string, proxyPort: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: proxyHost,
        port: proxyPort,
        method: 'GET',
        path: `http://127.0.0.1:${targetPort}/plain?x=1`,
        timeout: 10_000,
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

function waitRunning(provider: LocalProvider, id: string) {
  return eventually(
    `${id} Running`,
    async () => {
      const got = await provider.get(id, live());
      return got.state === 'Running' ? got : undefined;
    },
    { timeoutMs: 5_000, intervalMs: 50 },
  );
}

describe('local provider: real forwarding and restarts', () => {
  const dirs: string[] = [];
  const providers: LocalProvider[] = [];
  const fresh = async (overrides: Partial<LocalConfig> = {}) => {
    const dir = await mkdtemp(join(tmpdir(), 'ep-local-'));
    dirs.push(dir);
    const made = makeProvider(dir, overrides);
    providers.push(made.provider);
    return { dir, ...made };
  };

  afterAll(async () => {
    for (const p of providers) await p.close();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('forwards CONNECT and absolute-form HTTP on its own loopback address and spec.port', async () => {
    const { provider } = await fresh();
    const id = await provider.create(request(PORT + 1), live());
    const inst = await waitRunning(provider, id);
    expect(inst.ip).toMatch(/^127\.78\./);
    expect(inst.ip).not.toBe('127.0.0.1');

    const tunnelled = await viaConnect(inst.ip!, PORT + 1);
    expect(tunnelled).toMatch(/^HTTP\/1\.1 200/);
    expect(tunnelled).toContain('hello from target GET /through-tunnel');

    const plain = await viaAbsoluteForm(inst.ip!, PORT + 1);
    expect(plain).toEqual({ status: 200, body: 'hello from target GET /plain?x=1' });

    await provider.delete(id, live());
    await expect(viaAbsoluteForm(inst.ip!, PORT + 1)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('two instances on one port get two addresses', async () => {
    const { provider } = await fresh();
    const a = await waitRunning(provider, await provider.create(request(PORT + 2), live()));
    const b = await waitRunning(provider, await provider.create(request(PORT + 2), live()));
    expect(a.ip).not.toBe(b.ip);
    expect((await viaAbsoluteForm(b.ip!, PORT + 2)).status).toBe(200);
  });

  it("egresses from its own address: a loopback target sees the instance's IP, for CONNECT and absolute form", async () => {
    const echo = await startIpEcho();
    try {
      const { provider } = await fresh();
      const a = await waitRunning(provider, await provider.create(request(PORT + 12), live()));
      const b = await waitRunning(provider, await provider.create(request(PORT + 12), live()));
      expect(a.ip).not.toBe(b.ip);
      for (const inst of [a, b]) {
        expect(await egressIpThrough(inst.ip!, PORT + 12, echo.url, { via: 'connect' })).toBe(inst.ip);
        expect(await egressIpThrough(inst.ip!, PORT + 12, echo.url, { via: 'absolute' })).toBe(inst.ip);
        // `localhost` resolves to the source's family (127.0.0.1, not ::1), so it egresses the same way.
        const byName = `http://localhost:${echo.port}/`;
        expect(await egressIpThrough(inst.ip!, PORT + 12, byName, { via: 'connect' })).toBe(inst.ip);
        expect(await egressIpThrough(inst.ip!, PORT + 12, byName, { via: 'absolute' })).toBe(inst.ip);
      }
      // Without the binding every instance would show the host's 127.0.0.1.
      expect(a.ip).not.toBe('127.0.0.1');
    } finally {
      await echo.close();
    }
  });

  it('a replacement (a port edit) egresses from its new address, and the old address no longer answers', async () => {
    const echo = await startIpEcho();
    try {
      const { provider } = await fresh();
      // A fixed UID: the two specs' first candidate addresses are known to differ.
      const req = request(PORT + 13, { uid: '00000000-0000-4000-8000-000000000035' });
      const id = await provider.create(req, live());
      const before = await waitRunning(provider, id);
      expect(await egressIpThrough(before.ip!, PORT + 13, echo.url)).toBe(before.ip);

      // What the workflow does on a spec edit: delete, then create the same name with the new spec.
      await provider.delete(id, live());
      const after = await waitRunning(provider, await provider.create({ ...req, port: PORT + 14 }, live()));
      expect(after.ip).not.toBe(before.ip);
      expect(await egressIpThrough(after.ip!, PORT + 14, echo.url, { via: 'connect' })).toBe(after.ip);
      expect(await egressIpThrough(after.ip!, PORT + 14, echo.url, { via: 'absolute' })).toBe(after.ip);
      await expect(egressIpThrough(before.ip!, PORT + 13, echo.url)).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      await echo.close();
    }
  });

  it('a record removed by hand is gone: NotFound, not listed, and a re-create leaves one listener', async () => {
    const { provider, dir, lines } = await fresh();
    const req = request(PORT + 11);
    const id = await provider.create(req, live());
    const before = await waitRunning(provider, id);
    await rm(instanceRecordPath(dir, req.name));

    await expect(provider.get(id, live())).rejects.toSatisfy((e) => classOf(e) === 'NotFound');
    expect(await provider.listByTag(live())).toEqual([]);

    const again = await waitRunning(provider, await provider.create(req, live()));
    expect(lines.some((l) => l.includes('closed the listener of an instance whose record was removed'))).toBe(
      true,
    );
    // The old listener was closed and its address freed, so the name's first
    // candidate address is bound again (left open, it would have been skipped).
    expect(again.ip).toBe(before.ip);
    expect((await viaAbsoluteForm(again.ip!, PORT + 11)).status).toBe(200);
    await provider.delete(id, live());
    await expect(viaAbsoluteForm(again.ip!, PORT + 11)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('survives a restart: a new provider on the same state dir re-opens the listener', async () => {
    const { provider, dir } = await fresh();
    const req = request(PORT + 3);
    const id = await provider.create(req, live());
    const before = await waitRunning(provider, id);
    await provider.close();
    await expect(viaAbsoluteForm(before.ip!, PORT + 3)).rejects.toThrow(/ECONNREFUSED/);

    const { provider: again } = makeProvider(dir);
    providers.push(again);
    const after = await again.get(id, live());
    expect(after).toEqual(before);
    expect((await viaAbsoluteForm(after.ip!, PORT + 3)).body).toContain('/plain');
    expect(await again.create(req, live())).toBe(id);
    expect(await again.listByTag(live())).toHaveLength(1);
  });

  it('a process killed right after create leaves exactly one instance, re-adopted by the next process', async () => {
    const { dir } = await fresh();
    const req = request(PORT + 4);
    const script = `
      import { pino } from 'pino';
      import { localConfigSchema } from './providers/local/config.ts';
      import { createLocalProvider } from './providers/local/provider.ts';
      const p = createLocalProvider({ name: 'local-test', stateDir: process.argv[1],
        config: localConfigSchema.parse({ addressRange: '127.78.0.0/16' }), logger: pino({ level: 'silent' }) });
      const id = await p.create(JSON.parse(process.argv[2]), new AbortController().signal);
      process.stdout.write(id + '\\n');
      process.kill(process.pid, 'SIGKILL');
    `;
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script, dir, JSON.stringify(req)],
      {
        cwd: process.cwd(),
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const signal = await new Promise<NodeJS.Signals | null>((r) => child.on('exit', (_code, sig) => r(sig)));
    expect(err).toBe('');
    expect(signal).toBe('SIGKILL');
    const id = out.trim();
    expect(id).toBe(`local/${req.name}`);

    // The owner lock names a dead pid: the next process takes over.
    const { provider } = makeProvider(dir);
    providers.push(provider);
    expect(await provider.create(req, live())).toBe(id);
    const inst = await waitRunning(provider, id);
    expect((await viaAbsoluteForm(inst.ip!, PORT + 4)).status).toBe(200);
    expect(await provider.listByTag(live())).toHaveLength(1);
  });

  it('refuses a state dir owned by another live provider (Transient), and a leftover temp file is not an instance', async () => {
    const { provider, dir } = await fresh();
    const id = await provider.create(request(PORT + 5), live());
    await writeFile(join(dir, 'instances', `.proxy-half.json.123.tmp`), '{"schema":1,');
    const { provider: second } = makeProvider(dir);
    const err = await second.get(id, live()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect(classOf(err)).toBe('Transient');
    expect((err as Error).message).toMatch(/another live process|one process per state directory/);
    expect((await provider.listByTag(live())).map((i) => i.id)).toEqual([id]);
  });

  it('a restart where the address is taken reports Stopped; the replacement gets another address', async () => {
    const { provider, dir } = await fresh();
    const req = request(PORT + 6);
    const id = await provider.create(req, live());
    const inst = await waitRunning(provider, id);
    await provider.close();
    const squatter = createTcpServer();
    await new Promise<void>((r) => squatter.listen(PORT + 6, inst.ip, () => r()));
    try {
      const { provider: again } = makeProvider(dir);
      providers.push(again);
      expect((await again.get(id, live())).state).toBe('Stopped');
      await again.delete(id, live());
      const id2 = await again.create(req, live());
      const replaced = await waitRunning(again, id2);
      expect(id2).toBe(id);
      expect(replaced.ip).not.toBe(inst.ip);
      expect((await viaAbsoluteForm(replaced.ip!, PORT + 6)).status).toBe(200);
    } finally {
      await new Promise<void>((r) => squatter.close(() => r()));
    }
  });

  it('startDelaySeconds keeps a new instance Provisioning, without an IP', async () => {
    const { provider } = await fresh({ startDelaySeconds: 3600 });
    const id = await provider.create(request(PORT + 7), live());
    const got = await provider.get(id, live());
    expect(got.state).toBe('Provisioning');
    expect(got.ip).toBeUndefined();
  });

  it.each([
    ['quota', 'QuotaExceeded'],
    ['permanent', 'Permanent'],
    ['transient', 'Transient'],
  ] as const)('failureMode %s makes create throw %s and create nothing', async (mode, cls) => {
    const { provider } = await fresh({ failureMode: mode });
    const err = await provider.create(request(PORT + 8), live()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect((err as ProviderError).errorClass).toBe(cls);
    expect((err as ProviderError).provider).toBe('local-test');
    expect(await provider.listByTag(live())).toEqual([]);
  });

  it('an exhausted address range is QuotaExceeded', async () => {
    const { provider } = await fresh({ addressRange: '127.78.200.0/30' });
    await provider.create(request(PORT + 9), live());
    await provider.create(request(PORT + 9), live());
    const err = await provider.create(request(PORT + 9), live()).catch((e: unknown) => e);
    expect(classOf(err)).toBe('QuotaExceeded');
  });

  it('bounds its own I/O: a stuck backend read times out (Transient) with no caller deadline', async () => {
    const { provider, dir } = await fresh({ operationTimeoutSeconds: 0.3 });
    const id = await provider.create(request(PORT + 10), live());
    const release = await stallRecord(dir, id);
    try {
      const err = await provider.get(id, live()).catch((e: unknown) => e);
      expect(classOf(err)).toBe('Transient');
      expect((err as Error).message).toMatch(/timed out after 300 ms/);
    } finally {
      await release();
    }
  });

  it('check reports the state dir and loopback binding, and an unusable state dir as not ready', async () => {
    const { provider } = await fresh();
    const ok = await provider.check!(live());
    expect(ok.map((t) => [t.name, t.ready, t.reason])).toEqual([
      ['state-dir', true, 'Reachable'],
      ['loopback', true, 'Reachable'],
    ]);
    const blocker = join(dirs[0]!, 'a-file');
    await writeFile(blocker, 'not a directory');
    const { provider: broken } = makeProvider(join(blocker, 'state'));
    const bad = await broken.check!(live());
    expect(bad[0]).toMatchObject({ name: 'state-dir', ready: false, reason: 'Unreachable' });
    expect(bad[0]!.message).toContain('ENOTDIR');
    expect(bad[1]).toMatchObject({ name: 'loopback', ready: true });
  });
});
