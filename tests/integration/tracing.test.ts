/**
 * One trace follows a Proxy change across real processes: the bridge's
 * reconcile span → the Temporal client's StartWorkflow span (its context
 * in the start's headers) → the worker's RunWorkflow span → StartActivity →
 * RunActivity → the provider operation → the provider's own call. A lease
 * request with a `traceparent` joins that trace with a server span. Real
 * parts: `worker`, `bridge` and `api` as CLI child processes with only the
 * OTEL_* environment set, the shared Temporal dev server, an apiserver of
 * this file's own (the CLI bridge watches every namespace), Jaeger built
 * from the Go module proxy, asserted through Jaeger's query API.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { loadKubeConfig } from '../../cli/kube.js';
import { API_VERSION } from '../../kube/coordinates.js';
import { createProxyClient } from '../../kube/proxies.js';
import { LABEL_CLOUD_INIT, LABEL_PROXY_CREDENTIALS } from '../../resources/proxy-schema.js';
import { generatedSecretName } from '../../credentials/proxy-credentials.js';
import { type CliProcess, LEASE_API_LISTENING, startCli } from '../helpers/cli.js';
import { eventually, uniqueTaskQueue, freshTemporalNamespace } from '../helpers/temporal.js';
import {
  startJaegerBackend,
  startOtlpJsonReceiver,
  type TestSpan,
  type TraceBackend,
} from '../../local-servers/trace-backend.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';

const SENTINEL = 'SENTINEL-trace-cloud-init-3c71b2';
const TOKEN = 'SENTINEL-trace-token-9e04d1';
/** The Proxy's password: its generated Secret is made ahead here, so the bridge uses this one. */
const PASSWORD = 'SENTINEL-trace-proxy-password-51a7';
/** A `list` entry's password: the worker writes it into the list Proxy's Secret; no span may carry it. */
const LIST_PASSWORD = 'SENTINEL-trace-list-password-7d20';
const NS = 'traced';

describe('tracing with OTEL_EXPORTER_OTLP_ENDPOINT set', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-tracing-'));
  let backend: TraceBackend;
  let kube: LocalKubeApiServer;
  const children: CliProcess[] = [];
  let worker: CliProcess;
  let api: CliProcess;
  let apiUrl: string;

  beforeAll(async () => {
    // First run: Jaeger is built from the Go module proxy (minutes; cached after).
    // EP_TRACE_BACKEND=otlp-receiver: the fallback where Jaeger cannot be built (every process then exports JSON).
    const fallback = process.env.EP_TRACE_BACKEND === 'otlp-receiver';
    [backend, kube] = await Promise.all([
      fallback ? startOtlpJsonReceiver() : startJaegerBackend(),
      startLocalKubeApiServer({ binDir: inject('kubeBinDir'), dataDir: join(dir, 'kube') }),
    ]);
    const kc = loadKubeConfig(kube.kubeconfigPath);
    await installCrds(kc);
    await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NS } } });
    await kc.makeApiClient(CoreV1Api).createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: { name: 'traced-cloud-init', labels: { [LABEL_CLOUD_INIT]: 'true' } },
        stringData: { userdata: `#cloud-config\npassword: ${SENTINEL}\n` },
      },
    });
    await kc.makeApiClient(CoreV1Api).createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: { name: generatedSecretName('traced-1'), labels: { [LABEL_PROXY_CREDENTIALS]: 'true' } },
        stringData: { username: 'traced-user', password: PASSWORD },
      },
    });

    const providers = join(dir, 'providers.yaml');
    writeFileSync(
      providers,
      `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n` +
        `  - name: lst\n    type: list\n    list: { entries: ["127.0.0.1:9:listuser:${LIST_PASSWORD}"], claimsNamespace: ${NS} }\n`,
    );
    const taskQueue = uniqueTaskQueue('tracing');
    const temporalNamespace = await freshTemporalNamespace('tracing');
    const common = [
      '--kubeconfig',
      kube.kubeconfigPath,
      '--temporal-address',
      inject('temporalAddress'),
      '--temporal-namespace',
      temporalNamespace,
    ];
    const otel = (protocol: string) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: backend.otlpEndpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: fallback ? 'http/json' : protocol,
      DISCOVERY_TOKEN: TOKEN,
    });
    const run = (args: string[], env: Record<string, string>) => {
      // The apiserver is this file's own: the bridge may watch every namespace.
      const child = startCli(args, { env, ownApiserver: true });
      children.push(child);
      return child;
    };
    worker = run(
      [
        'worker',
        ...common,
        '--task-queue',
        taskQueue,
        '--providers-config',
        providers,
        '--installation',
        'tracing-test',
      ],
      otel('http/protobuf'),
    );
    // JSON for the bridge: both OTLP/HTTP encodings reach the same trace.
    const bridge = run(['bridge', ...common, '--task-queue', taskQueue], otel('http/json'));
    api = run(['api', ...common, '--discovery-addr', '127.0.0.1:0'], otel('http/protobuf'));
    const started = async (child: CliProcess, re: RegExp) => {
      try {
        return await child.waitFor(re, 300_000);
      } catch (error) {
        throw new Error(`${(error as Error).message}\n${child.output().slice(-3000)}`, { cause: error });
      }
    };
    await started(worker, /worker started/);
    await started(bridge, /tracing on/);
    apiUrl = (await started(api, LEASE_API_LISTENING))[1]!;
  }, 45 * 60_000);

  afterAll(async () => {
    for (const c of children.reverse()) await c.stop(30_000).catch(() => undefined);
    await kube?.stop();
    await backend?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The span's ancestors up to the root, nearest first. */
  function ancestors(span: TestSpan, byId: Map<string, TestSpan>): TestSpan[] {
    const out: TestSpan[] = [];
    for (let p = span.parentId && byId.get(span.parentId); p; p = p.parentId && byId.get(p.parentId))
      out.push(p);
    return out;
  }

  it(
    'one kubectl apply: one trace from the bridge to the provider call, in parent order; a lease request joins it',
    async () => {
      const kubectl = join(inject('kubeBinDir'), 'kubectl');
      execFileSync(kubectl, ['--kubeconfig', kube.kubeconfigPath, 'apply', '-f', '-'], {
        input: `apiVersion: ${API_VERSION}
kind: Proxy
metadata: { name: traced-1, namespace: ${NS} }
spec:
  mode: Managed
  provider: local
  cloudInit: { secretRef: { name: traced-cloud-init } }
`,
      });

      // The trace is complete once its workflow run has ended (the RunWorkflow
      // span is exported when it ends): delete the Proxy, wait for its workflow
      // to finish, and look for the create's provider call under the bridge span.
      const objects = createProxyClient(loadKubeConfig(kube.kubeconfigPath));
      const logs = () => children.map((c) => c.output().slice(-4000)).join('\n----\n');
      await eventually(
        'the Proxy provisioned',
        async () => {
          const p = await objects.get(NS, 'traced-1');
          return p?.status?.providerID ? true : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500 },
      ).catch((error: Error) => {
        throw new Error(`${error.message}\n${logs()}`, { cause: error });
      });

      const found = await eventually(
        'a bridge trace holding the local create call',
        async () => {
          const spans = await backend.spans('egress-proxies-bridge');
          for (const root of spans.filter(
            (s) => s.name === 'bridge reconcile' && s.tags.action === 'signal-with-start',
          )) {
            const trace = await backend.trace(root.traceId);
            const create = trace.find((s) => s.name === 'local create' && s.tags.operation === 'create');
            if (create) return { root, trace, create };
          }
          return undefined;
        },
        { timeoutMs: 120_000, intervalMs: 1_000 },
      );
      const { root, create } = found;

      execFileSync(kubectl, [
        '--kubeconfig',
        kube.kubeconfigPath,
        '-n',
        NS,
        'delete',
        'proxy',
        'traced-1',
        '--wait=true',
        '--timeout=120s',
      ]);
      const trace = await eventually(
        'the RunWorkflow span exported once the run ended',
        async () => {
          const t = await backend.trace(root.traceId);
          return t.some((s) => s.name === 'RunWorkflow:proxyWorkflow') ? t : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 1_000 },
      );
      const byId = new Map(trace.map((s) => [s.spanId, s]));
      const chain = [create, ...ancestors(byId.get(create.spanId)!, byId)].reverse();
      expect(chain.map((s) => `${s.service}: ${s.name}`)).toEqual([
        'egress-proxies-bridge: bridge reconcile',
        // A new Proxy's run is a plain start (its spec is in the input).
        'egress-proxies-bridge: StartWorkflow:proxyWorkflow',
        'egress-proxies-worker: RunWorkflow:proxyWorkflow',
        expect.stringMatching(/^egress-proxies-worker: StartActivity:\w+$/),
        expect.stringMatching(/^egress-proxies-worker: RunActivity:\w+$/),
        'egress-proxies-worker: local create',
      ]);
      expect(chain[0]!.parentId).toBeUndefined();
      expect(create.tags).toMatchObject({
        provider: 'local',
        'provider.type': 'local',
        operation: 'create',
        result: 'ok',
      });
      // Every provider call of the trace names its provider, operation and result.
      const calls = trace.filter((s) => s.name.startsWith('local '));
      expect(calls.length).toBeGreaterThanOrEqual(1);
      for (const c of calls)
        expect(Object.keys(c.tags)).toEqual(expect.arrayContaining(['provider', 'operation', 'result']));

      // The worker's log lines inside that trace carry its ids.
      expect(worker.output()).toContain(`"trace_id":"${root.traceId}"`);

      // A lease request carrying the bridge span as its parent.
      const res = await fetch(`${apiUrl}/v1/leases`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKEN}`,
          'content-type': 'application/json',
          traceparent: `00-${root.traceId}-${root.spanId}-01`,
        },
        body: JSON.stringify({ ttlSeconds: 60 }),
      });
      await res.body?.cancel();
      const server = await eventually(
        'the lease API server span in the trace',
        async () =>
          (await backend.trace(root.traceId)).find(
            (s) => s.service === 'egress-proxies-api' && s.name === 'POST /v1/leases',
          ),
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(server.parentId).toBe(root.spanId);
      expect(server.tags['span.kind']).toBe('server');
      expect(server.tags['http.response.status_code']).toBe(res.status);

      // A list entry's Proxy: the worker claims the entry and writes its credentials into the Proxy's Secret.
      execFileSync(kubectl, ['--kubeconfig', kube.kubeconfigPath, 'apply', '-f', '-'], {
        input: `apiVersion: ${API_VERSION}
kind: Proxy
metadata: { name: traced-list, namespace: ${NS} }
spec: { mode: Managed, provider: lst }
`,
      });
      const core = loadKubeConfig(kube.kubeconfigPath).makeApiClient(CoreV1Api);
      await eventually(
        "the list entry's credentials in the Proxy's Secret",
        async () => {
          const secret = await core
            .readNamespacedSecret({ namespace: NS, name: generatedSecretName('traced-list') })
            .catch(() => undefined);
          return secret?.data?.providerPassword ? true : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      );
      await eventually(
        "the worker's span of the list create",
        async () =>
          (await backend.spans('egress-proxies-worker')).some((x) => x.name === 'list create') || undefined,
        { timeoutMs: 60_000, intervalMs: 1_000 },
      );

      // No secret in any span of any service: cloud-init text, the Secret's bytes, the token, the proxy's password.
      const everything = JSON.stringify(
        await Promise.all(
          ['egress-proxies-bridge', 'egress-proxies-worker', 'egress-proxies-api'].map((s) =>
            backend.spans(s),
          ),
        ),
      );
      expect(everything).toContain('local create');
      expect(everything).not.toContain(SENTINEL);
      expect(everything).not.toContain(Buffer.from(SENTINEL).toString('base64').slice(0, 16));
      expect(everything).not.toContain(TOKEN);
      expect(everything).not.toContain(PASSWORD);
      expect(everything).not.toContain(LIST_PASSWORD);
      expect(everything).not.toContain(Buffer.from(LIST_PASSWORD).toString('base64').slice(0, 16));
      expect(everything).not.toContain(
        Buffer.from(`traced-user:${PASSWORD}`).toString('base64').slice(0, 16),
      );
    },
    10 * 60_000,
  );
});
