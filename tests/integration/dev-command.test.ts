/**
 * The README's first command, for real: `egress-proxies dev` in a child
 * process brings up Temporal and the apiserver, prints where each is, and a
 * Proxy applied with the kubectl it built comes up; three Proxies show three
 * egress addresses in dev's IP-echo target, and a replaced one its new
 * address. Uses its own cache
 * directory (the binaries come from the run's cache through TEMPORAL_CLI and
 * KUBE_BIN_DIR, so nothing is rebuilt).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { cliEntry } from '../helpers/cli.js';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { curlThrough } from './gateway-helpers.js';
import { egressIpThrough, fromProxyUrl } from '../../cli/egress-ip.js';
import { eventually } from '../helpers/temporal.js';
import { launchBrowser, tableCells } from '../helpers/browser.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A Proxy's generated credentials, read with kubectl as a user would, as a Proxy-Authorization value. */
async function secretAuthorization(kubectl: string, kubeconfig: string, proxy: string): Promise<string> {
  const { stdout } = await eventually(`the Secret of ${proxy}`, () =>
    run(kubectl, ['--kubeconfig', kubeconfig, 'get', 'secret', `${proxy}-proxy-auth`, '-o', 'json']).catch(
      () => undefined,
    ),
  );
  const { data } = JSON.parse(stdout) as { data: { username: string; password: string } };
  const pair = `${Buffer.from(data.username, 'base64').toString()}:${Buffer.from(data.password, 'base64').toString()}`;
  return `Basic ${Buffer.from(pair).toString('base64')}`;
}

describe('make dev (egress-proxies dev)', () => {
  const cache = mkdtempSync(join(tmpdir(), 'ep-dev-'));
  let child: ChildProcess | undefined;
  let output = '';

  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGINT');
      await new Promise((r) => child!.once('exit', r));
    }
    rmSync(cache, { recursive: true, force: true });
  });

  it('starts Temporal and the apiserver, prints where they are, runs Proxies that egress from their own addresses; Ctrl-C stops everything', async () => {
    child = spawn(process.execPath, [...cliEntry(), 'dev', '--discovery-addr', '127.0.0.1:0'], {
      cwd: ROOT,
      env: {
        ...process.env,
        EGRESS_PROXIES_CACHE: cache,
        TEMPORAL_CLI: inject('temporalCli'),
        KUBE_BIN_DIR: inject('kubeBinDir'),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));

    const banner = await eventually(
      'the dev banner',
      () => Promise.resolve(output.includes('Ctrl-C stops everything') ? output : undefined),
      {
        timeoutMs: 120_000,
        intervalMs: 250,
      },
    );
    expect(banner).toMatch(/Temporal\s+127\.0\.0\.1:\d+\s+Web UI http:\/\/127\.0\.0\.1:\d+/);
    const kubeconfig = /export KUBECONFIG=(\S+)/.exec(banner)?.[1];
    expect(kubeconfig).toBe(join(cache, 'dev', 'kube', 'kubeconfig'));
    expect(banner).toMatch(/lease API http:\/\/127\.0\.0\.1:\d+/);
    const uiUrl = /Web UI (\S+)/.exec(banner)![1]!;
    expect((await fetch(uiUrl)).status).toBe(200);

    const kubectl = join(inject('kubeBinDir'), 'kubectl');
    await run(kubectl, [
      '--kubeconfig',
      kubeconfig!,
      'apply',
      '-f',
      join(ROOT, 'infra/samples/proxy-local.yaml'),
    ]);
    // `notHash`: wait for an instance created for another spec than this one (a replacement).
    const provisioned = (name: string, notHash?: string) =>
      eventually(
        `${name} Provisioned for its current generation`,
        async () => {
          const { stdout } = await run(kubectl, [
            '--kubeconfig',
            kubeconfig!,
            'get',
            'px',
            name,
            '-o',
            'jsonpath={.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type=="Provisioned")].status} {.status.ip} {.spec.port} {.status.specHash}',
          ]);
          const [generation, observed, status, addr, port, hash] = stdout.trim().split(' ');
          return generation === observed && status === 'True' && addr && port && hash && hash !== notHash
            ? { ip: addr, port: Number(port), specHash: hash }
            : undefined;
        },
        { timeoutMs: 60_000 },
      );
    const { ip } = await provisioned('local-1');
    expect(ip).toMatch(/^127\./);

    // Each local proxy egresses from its own address: the banner's IP-echo
    // target sees three proxies as three callers, each its status.ip.
    const echoUrl = /IP echo\s+(http:\/\/127\.0\.0\.1:\d+\/)/.exec(banner)?.[1];
    expect(echoUrl).toBeDefined();
    await run(kubectl, [
      '--kubeconfig',
      kubeconfig!,
      'apply',
      '-f',
      join(ROOT, 'infra/samples/proxies-local-more.yaml'),
    ]);
    const names = ['local-1', 'local-2', 'local-3'];
    const endpoints = await Promise.all(names.map((name) => provisioned(name)));
    // Every proxy asks for the credentials in its Proxy's Secret, made by the bridge.
    await expect(egressIpThrough(endpoints[0]!.ip, endpoints[0]!.port, echoUrl!)).rejects.toThrow(/HTTP 407/);
    const authorizations = await Promise.all(
      names.map((name) => secretAuthorization(kubectl, kubeconfig!, name)),
    );
    const seen = await Promise.all(
      endpoints.map((e, i) =>
        egressIpThrough(e.ip, e.port, echoUrl!, { via: 'connect', proxyAuthorization: authorizations[i]! }),
      ),
    );
    expect(seen).toEqual(endpoints.map((e) => e.ip));
    expect(new Set(seen).size).toBe(3);
    for (const [i, e] of endpoints.entries())
      expect(await egressIpThrough(e.ip, e.port, echoUrl!, { proxyAuthorization: authorizations[i]! })).toBe(
        e.ip,
      );

    // The samples probe the lease API's preferred port, which this dev may not have: point them at its own.
    const apiUrl = /lease API (http:\/\/127\.0\.0\.1:\d+)/.exec(banner)![1]!;
    for (const name of names) {
      await run(kubectl, [
        '--kubeconfig',
        kubeconfig!,
        'patch',
        'px',
        name,
        '--type',
        'merge',
        '-p',
        JSON.stringify({ spec: { healthCheck: { probeURL: `${apiUrl}/healthz`, intervalSeconds: 1 } } }),
      ]);
    }
    // Ready: the prober went through each proxy with its credentials.
    await eventually(
      'the three Proxies Ready',
      async () => {
        const { stdout } = await run(kubectl, [
          '--kubeconfig',
          kubeconfig!,
          'get',
          'px',
          '-o',
          'jsonpath={range .items[*]}{.status.phase}{" "}{end}',
        ]);
        return stdout.trim() === 'Ready Ready Ready' || undefined;
      },
      { timeoutMs: 60_000 },
    );
    // The banner's way to a proxy URL: a lease's proxyURL, which works as it is.
    expect(banner).toContain(`curl -s -d '{"ttlSeconds":60}' ${apiUrl}/v1/leases | jq -r .proxyURL`);
    const lease = (await (
      await fetch(`${apiUrl}/v1/leases`, { method: 'POST', body: '{"ttlSeconds":60}' })
    ).json()) as { leaseID: string; proxy: { ip: string }; proxyURL: string };
    const viaLease = fromProxyUrl(lease.proxyURL);
    expect(viaLease.host).toBe(lease.proxy.ip);
    expect(await egressIpThrough(viaLease.host, viaLease.port, echoUrl!, viaLease)).toBe(lease.proxy.ip);
    await fetch(`${apiUrl}/v1/leases/${lease.leaseID}`, { method: 'DELETE' });
    // The gateway is in the banner and answers as a proxy, through one of these (with their credentials).
    const gatewayUrl = /proxy endpoint (http:\/\/127\.0\.0\.1:\d+)/.exec(banner)?.[1];
    expect(gatewayUrl).toBeDefined();
    // Its targets are on the loopback: dev allows it, and says so.
    expect(banner).toContain('egress policy: loopback allowed (dev)');
    const viaGateway = await curlThrough(gatewayUrl!, 'session-dev', '', echoUrl!);
    expect(viaGateway.status).toBe(200);
    expect(endpoints.map((e) => e.ip)).toContain((JSON.parse(viaGateway.body) as { ip: string }).ip);

    // The script of the README prints the same, one line per proxy (leasing each for its credentials).
    // Until the lease API's informer has every status.ip the script says "no address yet" and exits 1.
    const table = await eventually(
      'show-egress-ips with an egress IP for every proxy',
      () =>
        run(process.execPath, [
          join(dirname(cliEntry()[0]!), 'show-egress-ips.js'),
          '--api',
          apiUrl,
          '--echo',
          echoUrl!,
        ]),
      { timeoutMs: 30_000, intervalMs: 1_000 },
    );
    for (const [i, name] of names.entries()) {
      const e = endpoints[i]!;
      expect(table.stdout).toMatch(new RegExp(`default/${name}\\s+${e.ip}:${e.port}\\s+\\S+\\s+${e.ip}\\n`));
    }
    expect(table.stdout).toContain('-- 3 of 3 answered through their proxy --');

    // The banner's dashboard in a real browser: the sample Proxies with their addresses, the
    // sample pool, the provider checks, the gateway's traffic; screenshots of the five pages
    // (into docs/images with EP_UPDATE_SCREENSHOTS=1, for the README).
    const dashboardUrl = /dashboard (http:\/\/127\.0\.0\.1:\d+\/ui)/.exec(banner)?.[1];
    expect(dashboardUrl).toBe(`${apiUrl}/ui`);
    const poolFile = join(cache, 'proxypool-local.yaml');
    writeFileSync(
      poolFile,
      readFileSync(join(ROOT, 'infra/samples/proxypool-local.yaml'), 'utf8').replace(
        'http://127.0.0.1:8090/healthz',
        `${apiUrl}/healthz`,
      ),
    );
    await run(kubectl, ['--kubeconfig', kubeconfig!, 'apply', '-f', poolFile]);
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
      await page.goto(`${dashboardUrl!}#/proxies`);
      await eventually(
        'the sample Proxies on the dashboard with their addresses',
        async () => {
          const rows = await tableCells(page, 'Proxies');
          return endpoints.every((e, i) =>
            rows.some(
              (c) => c[0] === `default/${names[i]}` && c[4] === `${e.ip}:${e.port}` && c[3] === 'Ready',
            ),
          ) && rows.filter((c) => c[2] === 'local-pool' && c[3] === 'Ready').length === 3
            ? rows
            : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      );
      // The traffic through the gateway above, on its page, by the proxy that carried it.
      await page.getByRole('link', { name: 'Gateway' }).click();
      await eventually(
        'the gateway page counts the tunnel',
        async () =>
          (await tableCells(page, 'Gateway traffic by proxy')).some(
            (c) => names.some((n) => c[0] === `default/${n}`) && Number(c[1]) >= 1,
          ) || undefined,
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      await page.getByRole('link', { name: 'Providers' }).click();
      await eventually(
        'the local provider on the Providers page',
        async () => (await tableCells(page, 'Providers')).some((c) => c[0] === 'local') || undefined,
        { timeoutMs: 90_000, intervalMs: 250 },
      );
      const shots =
        process.env.EP_UPDATE_SCREENSHOTS === '1' ? join(ROOT, 'docs/images') : join(cache, 'shots');
      mkdirSync(shots, { recursive: true });
      for (const name of ['Fleet', 'Proxies', 'Pools', 'Providers', 'Gateway']) {
        await page.getByRole('link', { name }).click();
        await page.getByRole('heading', { name, level: 1 }).waitFor();
        await page.screenshot({ path: join(shots, `dashboard-${name.toLowerCase()}.png`) });
      }
    } finally {
      await browser.close();
    }

    // A spec edit replaces the instance: the echo sees the replacement's address, the old one is gone.
    await run(kubectl, [
      '--kubeconfig',
      kubeconfig!,
      'patch',
      'px',
      'local-2',
      '--type',
      'merge',
      '-p',
      JSON.stringify({ spec: { port: endpoints[1]!.port + 1 } }),
    ]);
    const replaced = await provisioned('local-2', endpoints[1]!.specHash);
    expect(replaced.port).toBe(endpoints[1]!.port + 1);
    const local2 = { proxyAuthorization: authorizations[1]! };
    expect(await egressIpThrough(replaced.ip, replaced.port, echoUrl!, local2)).toBe(replaced.ip);
    expect(replaced.ip).not.toBe(endpoints[1]!.ip);
    await expect(egressIpThrough(endpoints[1]!.ip, endpoints[1]!.port, echoUrl!, local2)).rejects.toThrow(
      /ECONNREFUSED/,
    );

    child.kill('SIGINT');
    const code = await new Promise<number | null>((r) => child!.once('exit', (c) => r(c)));
    expect(code).toBe(0);
    // Everything it started is gone: the Web UI no longer answers.
    await expect(fetch(uiUrl)).rejects.toThrow();
  });
});
