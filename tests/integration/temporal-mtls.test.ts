/**
 * Temporal over mTLS for real: the dev server behind nginx's stream module
 * (Debian's; terminator4 cannot answer the ALPN h2 Temporal's core requires) requiring a
 * client certificate from the test's CA. The worker, the bridge and the api
 * process are given only the terminator's address (TEMPORAL_ADDRESS and
 * TEMPORAL_TLS_* as the `temporal` CLI reads them) and run a Proxy through
 * its life; a certificate from another CA, or none, fails at start with one
 * line and exit 1.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { startCli, type CliProcess } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  proxyClient,
  deleteProxy,
  isProvisioned,
  kubeConfig,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { makePki, type Pki } from '../../local-servers/pki.js';
import { startTlsTerminator, type TlsTerminator } from '../../local-servers/tls-terminator.js';
import { freshTemporalNamespace, uniqueTaskQueue } from '../helpers/temporal.js';

describe('Temporal behind a TLS terminator that requires client certificates', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-mtls-'));
  const children: CliProcess[] = [];
  let pki: Pki;
  let terminator: TlsTerminator;
  let temporalNamespace: string;
  /** This test's Kubernetes namespace: the processes watch only it (the apiserver is shared). */
  let namespace: string;
  const taskQueue = uniqueTaskQueue('mtls');

  beforeAll(async () => {
    pki = await makePki(dir);
    terminator = await startTlsTerminator(dir, pki, inject('temporalAddress'));
    temporalNamespace = await freshTemporalNamespace('mtls');
    namespace = await createNamespace(kubeConfig(), 'mtls');
  });
  afterAll(async () => {
    for (const c of children) await c.stop(30_000).catch(() => undefined);
    await terminator?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const tlsEnv = (cert: string | undefined, key: string | undefined) => ({
    TEMPORAL_ADDRESS: terminator.address,
    TEMPORAL_NAMESPACE: temporalNamespace,
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.ca,
    TEMPORAL_TLS_SERVER_NAME: 'localhost',
    ...(cert ? { TEMPORAL_TLS_CLIENT_CERT_PATH: cert } : {}),
    ...(key ? { TEMPORAL_TLS_CLIENT_KEY_PATH: key } : {}),
    DISCOVERY_TOKEN: 'mtls-test-token',
  });
  /** The flags each command offers (a command refuses the flags of parts it does not run). */
  const common = (command: string) => [
    '--kubeconfig',
    inject('kubeconfigPath'),
    ...(command === 'api' ? [] : ['--task-queue', taskQueue]),
    ...(command === 'worker' ? ['--installation', 'mtls-test'] : []),
    '--watch-namespaces',
    namespace,
  ];
  const run = (args: string[], env: Record<string, string>) => {
    const child = startCli(args, { env });
    children.push(child);
    return child;
  };
  const oneErrorLine = (child: CliProcess) => {
    const lines = child
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('egress-proxies: '));
    expect(lines, child.output()).toHaveLength(1);
    return lines[0]!;
  };

  it('worker, bridge and api reach Temporal only through it and run a Proxy through its life', async () => {
    const providers = join(dir, 'providers.yaml');
    writeFileSync(
      providers,
      `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n`,
    );
    const env = tlsEnv(pki.clientCert, pki.clientKey);
    const worker = run(['worker', ...common('worker'), '--providers-config', providers], env);
    const bridge = run(['bridge', ...common('bridge')], env);
    const api = run(['api', ...common('api'), '--discovery-addr', '127.0.0.1:0'], env);
    await worker.waitFor(/worker started/, 120_000);
    expect(worker.output()).toContain(`"temporal":"${terminator.address}, mTLS"`);
    await bridge.waitFor(/bridge started/, 120_000);
    await api.waitFor(/lease API listening/, 120_000);

    const kc = kubeConfig();
    const objects = proxyClient(kc);
    await createProxy(objects, namespace, 'through-tls', { mode: 'Managed', provider: 'local', port: 18301 });
    const running = await waitForProxy(objects, namespace, 'through-tls', 'Running', isProvisioned);
    expect(running.status?.ip).toBeTruthy();
    await deleteProxy(objects, namespace, 'through-tls');
    await waitForProxyGone(objects, namespace, 'through-tls');

    // The connections went through the terminator, with the client certificate.
    expect(terminator.log()).toMatch(/client="CN=client" verify=SUCCESS alpn=h2/);
    for (const child of [worker, bridge, api]) expect(await child.stop(60_000), child.output()).toBe(0);
  }, 300_000);

  it('a client certificate from another CA: exit 1 with one line naming the address', async () => {
    const child = run(
      ['worker', ...common('worker'), '--providers-config', join(dir, 'providers.yaml')],
      tlsEnv(pki.strangerCert, pki.strangerKey),
    );
    expect(await child.exited(120_000)).toBe(1);
    expect(oneErrorLine(child)).toContain(
      `egress-proxies: cannot connect to Temporal at ${terminator.address}, mTLS:`,
    );
  }, 150_000);

  it.each(['bridge', 'api'])(
    '%s with no client certificate: exit 1 with one line',
    async (command) => {
      const args = command === 'api' ? ['--discovery-addr', '127.0.0.1:0'] : [];
      const child = run([command, ...common(command), ...args], tlsEnv(undefined, undefined));
      expect(await child.exited(120_000)).toBe(1);
      expect(oneErrorLine(child)).toContain(
        `egress-proxies: cannot connect to Temporal at ${terminator.address}, TLS:`,
      );
    },
    150_000,
  );
});
