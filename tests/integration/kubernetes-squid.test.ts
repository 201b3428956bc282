/**
 * The `kubernetes` provider's generated squid.conf (providers/kubernetes/pod.ts
 * `squidConf`) under a real Squid: Debian 12's squid 5.7, installed into the
 * cache by infra/scripts/install-squid.sh (the pod image runs ubuntu/squid
 * 6.6; see docs/providers/kubernetes.md for the gap).
 *
 * The generated directives are used as generated. Appended after them are
 * only what a run outside the container needs (the run directory's paths,
 * no ICMP pinger, the DNS socket on the loopback: local-servers/squid.ts).
 * One edit, for running only: `http_port <port>` listens on every address,
 * so the run qualifies it as `http_port 127.0.0.1:<port>` (everything a test
 * starts listens on the loopback); `squid -k parse` checks the line as
 * generated.
 *
 * Needs no Temporal and no apiserver. Squid is installed by the test itself
 * (cached after the first run); when it cannot be, the test fails with the
 * script's message rather than skipping.
 */
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CLIENT_CIDRS } from '../../providers/kubernetes/config.js';
import type { EgressPolicySpec } from '../../forwarding/egress-policy.js';
import {
  BASIC_AUTH_HELPER,
  HTPASSWD_PATH,
  squidConf,
  TERMINATION_GRACE_SECONDS,
} from '../../providers/kubernetes/pod.js';
import {
  generateCredentials,
  htpasswdLine,
  proxyAuthorization,
} from '../../credentials/proxy-credentials.js';
import { getThroughConnect, getThroughProxy, startTarget } from '../helpers/net.js';
import { boundSockets } from '../helpers/sockets.js';
import { freePort } from '../../local-servers/ports.js';
import {
  installSquid,
  parseConf,
  prepareRunDir,
  startSquid,
  writeConf,
  type RunningSquid,
  type SquidInstall,
  type SquidRunDir,
} from '../../local-servers/squid.js';

/** Clients allowed in the positive cases: the defaults plus the loopback the test dials from. */
const WITH_LOOPBACK = ['127.0.0.0/8', ...DEFAULT_CLIENT_CIDRS];

/** An egress policy that lets the test's loopback targets, on ports of their own, through. */
const LOOPBACK_TARGETS: EgressPolicySpec = {
  denyCidrs: [],
  allowCidrs: ['127.0.0.0/8'],
  allowPorts: [[1, 65535]],
};

/** Every kind of egress rule at once, for the parse check. */
const EVERY_RULE: EgressPolicySpec = {
  denyCidrs: ['203.0.113.0/24', '2001:db8::/32'],
  allowCidrs: ['10.244.0.1/32', 'fd00:1::/64'],
  allowPorts: [
    [80, 80],
    [443, 443],
    [8000, 8999],
  ],
};

/**
 * Warnings Squid 5.7 prints for the generated config that are expected:
 * `via off` is deliberate (docs/providers/kubernetes.md) and Squid notes
 * that HTTP asks for Via. Any other WARNING, ERROR, FATAL, UPGRADE or
 * "unrecognized" line fails the parse check.
 */
const EXPECTED_WARNINGS = [/WARNING: HTTP requires the use of Via/];
const PROBLEM = /WARNING|ERROR|FATAL|UPGRADE|unrecognized|Bungled|not a known|obsolete|deprecated/;

let squid: SquidInstall;
const runDirs: SquidRunDir[] = [];
const running: RunningSquid[] = [];
const closers: Array<() => Promise<void>> = [];

beforeAll(async () => {
  squid = await installSquid();
}, 180_000);

afterAll(async () => {
  // Whatever happened above: no Squid, shared-memory segment, server or run directory is left.
  for (const s of running) s.kill();
  for (const close of closers) await close().catch(() => undefined);
  for (const r of runDirs) rmSync(r.dir, { recursive: true, force: true });
});

function newRunDir(): SquidRunDir {
  const runDir = prepareRunDir(squid);
  runDirs.push(runDir);
  return runDir;
}

/**
 * The pod's auth paths moved into the run: Squid runs its helper as
 * `proxy`, which cannot reach the cache under root's home, so the unpacked
 * basic_ncsa_auth is copied beside the htpasswd (the pod's mounted file).
 */
function withRunAuth(generated: string, runDir: SquidRunDir, htpasswdText = ''): string {
  const helper = join(runDir.dir, 'basic_ncsa_auth');
  const htpasswd = join(runDir.dir, 'htpasswd');
  if (!existsSync(helper)) copyFileSync(`${squid.root}${BASIC_AUTH_HELPER}`, helper);
  writeFileSync(htpasswd, htpasswdText, { mode: 0o644 });
  const pod = `${BASIC_AUTH_HELPER} ${HTPASSWD_PATH}`;
  expect(generated).toContain(`auth_param basic program ${pod}`);
  return generated.replace(pod, `${helper} ${htpasswd}`);
}

/** The generated config, with `http_port <port>` bound to 127.0.0.1, then the local-run directives. */
function runnableConf(generated: string, port: number, runDir: SquidRunDir): string {
  const lines = generated.split('\n');
  const at = lines.indexOf(`http_port ${port}`);
  expect(at, 'the generated config has an http_port line for the port').toBeGreaterThan(-1);
  lines[at] = `http_port 127.0.0.1:${port}`;
  return `${lines.join('\n')}\n${runDir.localDirectives}`;
}

async function runSquid(
  generated: string,
  port: number,
  /** With an auth config: the htpasswd it checks against. */
  htpasswdText?: string,
): Promise<{ proxy: RunningSquid; runDir: SquidRunDir }> {
  const runDir = newRunDir();
  const conf = htpasswdText === undefined ? generated : withRunAuth(generated, runDir, htpasswdText);
  writeConf(runDir, runnableConf(conf, port, runDir));
  const proxy = await startSquid(squid, runDir, port);
  running.push(proxy);
  // Everything Squid bound is on the loopback: the proxy port and its DNS client socket.
  const bound = boundSockets(proxy.pid);
  expect(bound).toContain(`tcp 127.0.0.1:${port}`);
  for (const socket of bound)
    expect(socket, 'Squid binds the loopback only').toMatch(/ 127\.\d+\.\d+\.\d+:\d+$/);
  return { proxy, runDir };
}

/** Stops Squid the way the kubelet does (SIGTERM) within the pod's grace period, and checks it exited cleanly. */
async function stopSquid(proxy: RunningSquid, runDir: SquidRunDir): Promise<void> {
  const { code, signal } = await proxy.stop(TERMINATION_GRACE_SECONDS * 1000);
  const log = readFileSync(runDir.cacheLogPath, 'utf8');
  expect({ code, signal }, log).toEqual({ code: 0, signal: null });
  expect(log).toContain('Exiting normally');
  expect(readdirSync('/dev/shm').filter((f) => f.startsWith(`${proxy.serviceName}-`))).toEqual([]);
}

/** A loopback HTTP server that records each request's headers and answers them as JSON. */
async function startHeaderTarget(): Promise<{ port: number; seen: IncomingHttpHeaders[] }> {
  const seen: IncomingHttpHeaders[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.headers);
    const body = JSON.stringify(req.headers);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, seen };
}

/** An absolute-form GET of `url` through the proxy, with the response headers. */
function proxyGet(
  proxyPort: number,
  url: string,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: proxyPort, path: url, headers: { host: new URL(url).host }, timeout: 5_000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

describe("the kubernetes provider's squid.conf under Debian's Squid", () => {
  it('installs Squid 5.7 from Debian through infra/scripts/install-squid.sh and runs it from the cache', () => {
    expect(squid.banner).toMatch(/^Squid Cache: Version 5\.7$/);
    expect(squid.bin).toMatch(/\/squid\/5\.7-[^/]+\/usr\/sbin\/squid$/);
    expect(squid.env.LD_LIBRARY_PATH).toContain(squid.root);
  });

  it('parses the generated config (default clientCidrs, and with the loopback; the default egress policy, and every kind of egress rule): no errors, every directive read', async () => {
    for (const [cidrs, egress] of [
      [DEFAULT_CLIENT_CIDRS, undefined],
      [WITH_LOOPBACK, undefined],
      [DEFAULT_CLIENT_CIDRS, EVERY_RULE],
      [WITH_LOOPBACK, LOOPBACK_TARGETS],
    ] as const) {
      for (const auth of [false, true]) {
        const runDir = newRunDir();
        // With auth, the helper and the htpasswd are the run's (parse starts the helper).
        const asGenerated = squidConf(3128, cidrs, egress, auth);
        const generated = auth ? withRunAuth(asGenerated, runDir) : asGenerated;
        writeConf(runDir, `${generated}\n${runDir.localDirectives}`);
        const { code, output } = await parseConf(squid, runDir.confPath);
        expect(code, output).toBe(0);
        // Squid read each generated directive as written (comments aside).
        for (const line of generated.split('\n').filter((l) => !l.startsWith('#'))) {
          expect(output, output).toContain(`Processing: ${line}`);
        }
        const problems = output
          .split('\n')
          .filter((l) => !/\| Processing: /.test(l)) // the echoed directives (error_directory, ...)
          .filter((l) => PROBLEM.test(l) && !EXPECTED_WARNINGS.some((w) => w.test(l)));
        expect(problems, output).toEqual([]);
        for (const w of EXPECTED_WARNINGS) expect(output).toMatch(w);
      }
    }
  });

  it('fails the parse on a directive Squid does not know (the check above can fail)', async () => {
    const runDir = newRunDir();
    writeConf(
      runDir,
      `${squidConf(3128, DEFAULT_CLIENT_CIDRS)}\nnot_a_squid_directive on\n${runDir.localDirectives}`,
    );
    const { code, output } = await parseConf(squid, runDir.confPath);
    expect(code).not.toBe(0);
    expect(output).toMatch(/unrecognized: 'not_a_squid_directive'/);
  });

  it('forwards CONNECT and absolute-form HTTP for an allowed client, hides the client, denies the cache manager', async () => {
    const port = await freePort();
    const { proxy, runDir } = await runSquid(squidConf(port, WITH_LOOPBACK, LOOPBACK_TARGETS), port);

    // CONNECT: the tunnel carries the target's bytes unchanged.
    const target = await startTarget('bytes from the target, through a real Squid');
    closers.push(() => target.close());
    expect(await getThroughConnect('127.0.0.1', port, target.port)).toBe(
      'bytes from the target, through a real Squid',
    );

    // Absolute-form HTTP: forwarded, and the body comes back.
    const plain = await getThroughProxy('127.0.0.1', port, target.port);
    expect(plain).toEqual({ status: 200, body: 'bytes from the target, through a real Squid' });

    // `via off`, `forwarded_for off`: no Via, and X-Forwarded-For says "unknown"
    // (Squid's `off`; only `delete` would drop the header) instead of 127.0.0.1.
    const echo = await startHeaderTarget();
    const forwarded = await proxyGet(port, `http://127.0.0.1:${echo.port}/headers`);
    expect(forwarded.status).toBe(200);
    expect(echo.seen).toHaveLength(1);
    const seen = echo.seen[0]!;
    expect(seen.via).toBeUndefined();
    expect(seen['x-forwarded-for']).toBe('unknown');
    expect(seen.host).toBe(`127.0.0.1:${echo.port}`);
    // The client's address appears in no header (the target's own address is only in Host).
    const carrying = Object.entries(seen).filter(([k, v]) => k !== 'host' && String(v).includes('127.0.0.1'));
    expect(carrying).toEqual([]);
    expect(forwarded.headers.via).toBeUndefined(); // nor towards the client

    // `http_access deny manager` holds even for an allowed client.
    const manager = await proxyGet(port, `http://127.0.0.1:${port}/squid-internal-mgr/menu`);
    expect(manager.status).toBe(403);
    expect(manager.headers['x-squid-error']).toMatch(/^ERR_ACCESS_DENIED/);

    await stopSquid(proxy, runDir);
  });

  it('refuses a client outside clientCidrs with 403, on CONNECT and on HTTP, and the target sees nothing', async () => {
    const port = await freePort();
    // The provider's defaults: private and shared ranges, no loopback (and
    // the loopback targets allowed, so the refusal is the client rule's).
    const { proxy, runDir } = await runSquid(squidConf(port, DEFAULT_CLIENT_CIDRS, LOOPBACK_TARGETS), port);
    const echo = await startHeaderTarget();

    await expect(getThroughConnect('127.0.0.1', port, echo.port)).rejects.toThrow(
      /^CONNECT refused: HTTP\/1\.1 403 Forbidden$/,
    );
    const refused = await proxyGet(port, `http://127.0.0.1:${echo.port}/`);
    expect(refused.status).toBe(403);
    expect(refused.headers['x-squid-error']).toMatch(/^ERR_ACCESS_DENIED/);
    expect(echo.seen).toEqual([]);

    await stopSquid(proxy, runDir);
  });

  it('refuses, for an allowed client, a denied destination with 403 on CONNECT and HTTP; an exception gets through, on any port', async () => {
    const echo = await startHeaderTarget();
    const refusedBoth = async (port: number, targetHost: string, targetPort: number) => {
      await expect(getThroughConnect('127.0.0.1', port, targetPort, 5_000, targetHost)).rejects.toThrow(
        /^CONNECT refused: HTTP\/1\.1 403 Forbidden$/,
      );
      const refused = await proxyGet(port, `http://${targetHost}:${targetPort}/`);
      expect(refused.status).toBe(403);
      expect(refused.headers['x-squid-error']).toMatch(/^ERR_ACCESS_DENIED/);
    };

    // The default policy: the loopback is denied (and so is the port).
    const defaults = await freePort();
    const first = await runSquid(squidConf(defaults, WITH_LOOPBACK), defaults);
    await refusedBoth(defaults, '127.0.0.1', echo.port);
    await stopSquid(first.proxy, first.runDir);

    // One loopback address allowed on any port: that one gets through, its neighbour does not.
    const one = await freePort();
    const second = await runSquid(
      squidConf(one, WITH_LOOPBACK, {
        denyCidrs: [],
        allowCidrs: ['127.0.0.1/32'],
        allowPorts: [[1, 65535]],
      }),
      one,
    );
    expect(await getThroughProxy('127.0.0.1', one, echo.port)).toMatchObject({ status: 200 });
    await refusedBoth(one, '127.0.0.2', echo.port);
    await stopSquid(second.proxy, second.runDir);

    // An allowance opens its range on every port: with ports 80 and 443 only,
    // the allowed loopback address is still reached on the target's port.
    const ports = await freePort();
    const third = await runSquid(
      squidConf(ports, WITH_LOOPBACK, {
        denyCidrs: [],
        allowCidrs: ['127.0.0.1/32'],
        allowPorts: [
          [80, 80],
          [443, 443],
        ],
      }),
      ports,
    );
    expect(await getThroughProxy('127.0.0.1', ports, echo.port)).toMatchObject({ status: 200 });
    await refusedBoth(ports, '127.0.0.2', echo.port);
    await stopSquid(third.proxy, third.runDir);
    // Only the two requests that were allowed reached the target.
    expect(echo.seen).toHaveLength(2);
  });

  it('with credentials: 407 without them or with wrong ones, the target reached with them; a client outside clientCidrs and a denied destination still 403', async () => {
    const credentials = generateCredentials();
    const good = proxyAuthorization(credentials);
    const wrong = proxyAuthorization({ ...credentials, password: `${credentials.password}x` });
    const port = await freePort();
    const runDir = newRunDir();
    const htpasswdText = `${htpasswdLine(credentials)}\n`;
    const generated = withRunAuth(
      squidConf(port, WITH_LOOPBACK, LOOPBACK_TARGETS, true),
      runDir,
      htpasswdText,
    );
    writeConf(runDir, runnableConf(generated, port, runDir));
    const proxy = await startSquid(squid, runDir, port);
    running.push(proxy);
    const target = await startTarget('through an authenticating Squid');
    closers.push(() => target.close());

    await expect(getThroughConnect('127.0.0.1', port, target.port)).rejects.toThrow(
      /^CONNECT refused: HTTP\/1\.1 407 Proxy Authentication Required$/,
    );
    await expect(
      getThroughConnect('127.0.0.1', port, target.port, 5_000, '127.0.0.1', wrong),
    ).rejects.toThrow(/407/);
    expect(await getThroughConnect('127.0.0.1', port, target.port, 5_000, '127.0.0.1', good)).toBe(
      'through an authenticating Squid',
    );
    expect(await getThroughProxy('127.0.0.1', port, target.port)).toMatchObject({ status: 407 });
    expect(await getThroughProxy('127.0.0.1', port, target.port, wrong)).toMatchObject({ status: 407 });
    expect(await getThroughProxy('127.0.0.1', port, target.port, good)).toEqual({
      status: 200,
      body: 'through an authenticating Squid',
    });
    await stopSquid(proxy, runDir);

    // The client rule and the egress policy come first: 403 with or without the credentials.
    const outside = await freePort();
    const second = await runSquid(
      squidConf(outside, DEFAULT_CLIENT_CIDRS, LOOPBACK_TARGETS, true),
      outside,
      htpasswdText,
    );
    for (const header of [undefined, good]) {
      await expect(
        getThroughConnect('127.0.0.1', outside, target.port, 5_000, '127.0.0.1', header),
      ).rejects.toThrow(/^CONNECT refused: HTTP\/1\.1 403 Forbidden$/);
    }
    await stopSquid(second.proxy, second.runDir);
    const denied = await freePort();
    const third = await runSquid(squidConf(denied, WITH_LOOPBACK, undefined, true), denied, htpasswdText);
    await expect(getThroughConnect('127.0.0.1', denied, target.port)).rejects.toThrow(
      /^CONNECT refused: HTTP\/1\.1 403 Forbidden$/,
    );
    await stopSquid(third.proxy, third.runDir);
  });
});
