/**
 * infra/k8s as a platform engineer applies it, on the enforcing (RBAC)
 * apiserver of the test run: every overlay applies server-side, `kubectl
 * get` lists what the README says, and the worker, the bridge and the api
 * run as real CLI processes with the args of their Deployments, each with
 * only its own ServiceAccount's token, through a Proxy's life. Then single
 * rules are taken out of the applied Roles, one at a time, and the
 * capability each grants breaks with the apiserver's "forbidden" where an
 * operator looks (the process's log, the workflow's pending activity, the
 * Proxy's status); re-applying the overlay heals it. Last, the namespaced
 * overlay with no cluster-wide Proxy, Secret or pod rights at all.
 *
 * The objects have their shipped, fixed names (namespace egress-proxies,
 * ClusterRoles egress-proxies-*): this file is their only user on the
 * shared apiserver, and its steps run in order. The processes get their
 * own Temporal namespace, so their Schedules touch nothing else.
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import {
  AuthorizationV1Api,
  CoreV1Api,
  KubeConfig,
  RbacAuthorizationV1Api,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import { deriveInstallation } from '../../cli/kube.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { scheduleIds } from '../../cli/schedules.js';
import { GROUP, PROVIDER_HEALTH_PLURAL, PROXY_PLURAL } from '../../kube/coordinates.js';
import type { ProviderHealthClient } from '../../kube/provider-healths.js';
import type { ProxyClient } from '../../kube/proxies.js';
import {
  FINALIZER,
  LABEL_CLOUD_INIT,
  type ProviderHealth,
  type Proxy,
} from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { type CliProcess, LEASE_API_LISTENING, ROOT, startCli } from '../helpers/cli.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import {
  createProxy,
  deleteProxy,
  editProxySpec,
  getProxy,
  isProvisioned,
  kubeConfig as sharedKubeConfig,
  kubectl as sharedKubectl,
  providerHealthClient,
  proxyClient,
  removeFinalizers,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const K8S = join(ROOT, 'infra/k8s');
const INSTALL_NS = 'egress-proxies';
const WATCHED = ['team-a', 'team-b'];
const PROCESSES = ['worker', 'bridge', 'api'] as const;
type ProcessName = (typeof PROCESSES)[number];
const LABEL = 'app.kubernetes.io/part-of=egress-proxies';

/**
 * An apiserver of this file's own: the cluster-wide overlay's processes act
 * on every Proxy they can see, and on the shared test cluster they would
 * take over other test files' Proxies.
 */
let ownApiserver: LocalKubeApiServer | undefined;
const ownKubeconfig = () => ownApiserver!.kubeconfigPath;
const kubeConfig = () => sharedKubeConfig(ownKubeconfig());
const kubectl = (args: string[]) => sharedKubectl(args, ownKubeconfig());

/** `kubectl apply -k`, server-side, no dry run; the CRDs the harness created are ours too. */
function applyOverlay(overlay: string): Promise<string> {
  return kubectl(['apply', '-k', join(K8S, 'overlays', overlay), '--server-side', '--force-conflicts']);
}

/** What `kubectl get deploy,sa,role,clusterrole,svc,cm -n egress-proxies -l part-of` shows (README). */
async function installedObjects(): Promise<string[]> {
  const out = await kubectl([
    'get',
    'deploy,sa,role,clusterrole,svc,cm',
    '-n',
    INSTALL_NS,
    '-l',
    LABEL,
    '-o',
    'name',
  ]);
  // ConfigMap names carry kustomize's content hash (an apply leaves the previous one behind).
  const names = out
    .trim()
    .split('\n')
    .map((l) => l.replace(/^(configmap\/egress-proxies-[a-z]+)-[a-z0-9]{10}$/, '$1'));
  return [...new Set(names)].sort();
}

interface Rendered {
  args: Record<ProcessName, string[]>;
  env: Record<string, string>;
}

/** The overlay as kustomize renders it: each Deployment's args, the env ConfigMap. */
async function render(overlay: string): Promise<Rendered> {
  const { stdout } = await run(join(inject('kubeBinDir'), 'kubectl'), [
    'kustomize',
    join(K8S, 'overlays', overlay),
  ]);
  const docs = parseAllDocuments(stdout).map(
    (d) =>
      d.toJS() as {
        kind: string;
        metadata: { name: string };
        data?: Record<string, string>;
        spec?: { template: { spec: { containers: Array<{ args: string[] }> } } };
      },
  );
  const args = {} as Record<ProcessName, string[]>;
  for (const p of PROCESSES) {
    const dep = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === `egress-proxies-${p}`);
    args[p] = dep!.spec!.template.spec.containers[0]!.args;
  }
  const env = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name.startsWith('egress-proxies-env-'));
  return { args, env: env!.data! };
}

/** A kubeconfig holding only this ServiceAccount's token (TokenRequest, via kubectl create token). */
async function serviceAccountKubeconfig(dir: string, sa: string): Promise<string> {
  const token = (await kubectl(['create', 'token', sa, '-n', INSTALL_NS, '--duration', '2h'])).trim();
  const admin = kubeConfig();
  const cluster = admin.getCurrentCluster()!;
  const path = join(dir, `${sa}.kubeconfig`);
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        { name: 'c', cluster: { server: cluster.server, 'certificate-authority-data': cluster.caData } },
      ],
      users: [{ name: sa, user: { token } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: sa } }],
      'current-context': 'c',
    }),
    { mode: 0o600 },
  );
  return path;
}

/** The rule of a (Cluster)Role covering `resource`, with `verb` taken out (the rule goes when no verb is left). */
async function withoutRule(
  role: { kind: 'Role' | 'ClusterRole'; name: string; namespace?: string },
  resource: string,
  verb: string,
): Promise<void> {
  const rbac = kubeConfig().makeApiClient(RbacAuthorizationV1Api);
  const current =
    role.kind === 'Role'
      ? await rbac.readNamespacedRole({ name: role.name, namespace: role.namespace! })
      : await rbac.readClusterRole({ name: role.name });
  const rules: V1PolicyRule[] = [];
  let found = false;
  for (const rule of current.rules ?? []) {
    if (rule.resources?.includes(resource) && rule.verbs.includes(verb)) {
      found = true;
      const verbs = rule.verbs.filter((v) => v !== verb);
      if (verbs.length > 0) rules.push({ ...rule, verbs });
    } else {
      rules.push(rule);
    }
  }
  expect(found, `${role.kind} ${role.name} grants ${verb} ${resource}`).toBe(true);
  const removed = (current.rules ?? []).find(
    (r) => r.resources?.includes(resource) && r.verbs.includes(verb),
  );
  const allowed = await ruleReview(role, {
    apiGroup: removed?.apiGroups?.[0] ?? '',
    resource,
    verb,
    // A rule limited to named objects (the worker's namespaces/default) grants only those.
    name: removed?.resourceNames?.[0],
  });
  // The question is asked right: the rule is in force before it goes.
  expect(await allowed(), `${role.kind} ${role.name} allows ${verb} ${resource} before`).toBe(true);
  const body = { ...current, rules };
  if (role.kind === 'Role')
    await rbac.replaceNamespacedRole({ name: role.name, namespace: role.namespace!, body });
  else await rbac.replaceClusterRole({ name: role.name, body });
  // The apiserver's authorizer reads roles through an informer of its own:
  // a removal is in force a moment after the write (CI once saw the worker
  // read namespaces/default in between).
  await eventually(
    `${role.kind} ${role.name} without ${verb} ${resource} in force`,
    async () => ((await allowed()) ? undefined : true),
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

/**
 * Whether any subject bound to the role may do what `rule` names, as the
 * apiserver's authorizer answers it now (SubjectAccessReviews).
 */
async function ruleReview(
  role: { kind: 'Role' | 'ClusterRole'; name: string; namespace?: string },
  rule: { apiGroup: string; resource: string; verb: string; name?: string },
): Promise<() => Promise<boolean>> {
  const kc = kubeConfig();
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const bindings =
    role.kind === 'Role'
      ? (await rbac.listNamespacedRoleBinding({ namespace: role.namespace! })).items
      : [
          ...(await rbac.listClusterRoleBinding()).items,
          ...(await rbac.listRoleBindingForAllNamespaces()).items,
        ];
  // Each subject with where its binding grants (a RoleBinding: its own namespace).
  const subjects = bindings
    .filter((b) => b.roleRef.kind === role.kind && b.roleRef.name === role.name)
    .flatMap((b) => (b.subjects ?? []).map((subject) => ({ subject, namespace: b.metadata?.namespace })));
  expect(subjects.length, `${role.kind} ${role.name} is bound`).toBeGreaterThan(0);
  const [plural, subresource] = rule.resource.split('/');
  const authz = kc.makeApiClient(AuthorizationV1Api);
  return async () => {
    for (const { subject, namespace } of subjects) {
      const identity =
        subject.kind === 'ServiceAccount'
          ? { user: `system:serviceaccount:${subject.namespace}:${subject.name}` }
          : subject.kind === 'Group'
            ? { groups: [subject.name] }
            : { user: subject.name };
      const review = await authz.createSubjectAccessReview({
        body: {
          spec: {
            ...identity,
            resourceAttributes: {
              group: rule.apiGroup,
              resource: plural,
              ...(subresource ? { subresource } : {}),
              verb: rule.verb,
              ...(rule.name ? { name: rule.name } : {}),
              namespace: namespace ?? 'default',
            },
          },
        },
      });
      if (review.status?.allowed) return true;
    }
    return false;
  };
}

/** The last failure of each activity the workflow is retrying (what `temporal workflow describe` shows). */
async function pendingFailures(client: Client, workflowId: string): Promise<string> {
  const d = await client.workflow.getHandle(workflowId).describe();
  return (d.raw.pendingActivities ?? []).map((a) => a.lastFailure?.message ?? '').join('\n');
}

/** `cannot <verb> resource "<resource>"`, through any number of JSON escapes. */
function forbidden(verb: string, resource: string): RegExp {
  return new RegExp(`cannot ${verb} resource \\\\*"${resource.replace('/', '\\/')}\\\\*"`);
}

describe('infra/k8s on an enforcing apiserver', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-k8s-'));
  let core: CoreV1Api;
  let objects: ProxyClient;
  let healths: ProviderHealthClient;
  const suffix = randomBytes(3).toString('hex');
  const temporalNamespace = `k8s-rbac-${suffix}`;
  const taskQueue = `k8s-rbac-${suffix}`;
  const localProvider = `rbac-local-${suffix}`;
  /** A `list` entry: its claims live in the install's namespace (base/claims-rbac.yaml). */
  const listProvider = `rbac-list-${suffix}`;
  const kubeProvider = `rbac-kube-${suffix}`;
  const proxyNs = `rbac-${suffix}`;
  const children: CliProcess[] = [];
  const kubeconfigs = {} as Record<ProcessName, string>;
  let connection: Connection;
  let client: Client;
  let processes: Record<ProcessName, CliProcess>;
  const port = () => randomInt(20_000, 60_000);

  beforeAll(async () => {
    ownApiserver = await startLocalKubeApiServer({
      binDir: inject('kubeBinDir'),
      dataDir: join(dir, 'kube'),
    });
    const kc = kubeConfig();
    await installCrds(kc);
    core = kc.makeApiClient(CoreV1Api);
    objects = proxyClient(kc);
    healths = providerHealthClient(kc);
    connection = await Connection.connect({ address: inject('temporalAddress') });
    await run(inject('temporalCli'), [
      'operator',
      'namespace',
      'create',
      '--namespace',
      temporalNamespace,
      '--address',
      inject('temporalAddress'),
    ]);
    client = new Client({ connection, namespace: temporalNamespace });
    await eventually(
      'the Temporal namespace',
      () =>
        connection.workflowService
          .describeNamespace({ namespace: temporalNamespace })
          .then(() => true as const),
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    for (const ns of [...WATCHED, proxyNs]) await kubectl(['create', 'namespace', ns]).catch(() => undefined);
  });

  afterAll(async () => {
    for (const c of children) await c.stop(30_000).catch(() => undefined);
    await connection?.close();
    await ownApiserver?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Starts one process with its Deployment's args, made local, and only its own token. */
  function startProcess(name: ProcessName, rendered: Rendered, providersFile: string): CliProcess {
    const tokenFile = join(dir, 'discovery-token');
    writeFileSync(tokenFile, `token-${suffix}\n`);
    const local: Record<string, string> = {
      '--providers-config': providersFile,
      '--state-dir': join(dir, 'state'),
      '--metrics-addr': '127.0.0.1:0',
      '--discovery-addr': '127.0.0.1:0',
      '--discovery-token-file': tokenFile,
    };
    const args = rendered.args[name].map((a) => {
      const m = /^(--[a-z-]+)=(.*)$/.exec(a);
      if (!m) return a;
      // A flag whose value is an in-cluster path or address must be made local, or the test is wrong.
      expect(local[m[1]!], `a local value for ${m[1]}`).toBeDefined();
      return `${m[1]}=${local[m[1]!]}`;
    });
    expect(args[0]).toBe(name);
    const extra = [
      '--kubeconfig',
      kubeconfigs[name],
      '--temporal-address',
      inject('temporalAddress'),
      '--temporal-namespace',
      temporalNamespace,
      ...(name === 'api' ? [] : ['--task-queue', taskQueue]),
      ...(name === 'worker'
        ? [
            // Its own installation mark: GC on the shared apiserver must only ever consider this test's instances.
            '--installation',
            `rbac-${suffix}`,
            '--provisioning-poll',
            '1s',
            '--provider-check-interval',
            '10s',
            '--gc-interval',
            '1h',
            '--gc-min-age',
            '0s',
          ]
        : []),
    ];
    const child = startCli([...args, ...extra], {
      ownApiserver: true,
      env: {
        // The ConfigMap's env, as envFrom gives it; the flags above win for Temporal.
        ...rendered.env,
        HOME: dir,
        LOG_LEVEL: 'info',
        KUBECONFIG: undefined,
        DISCOVERY_TOKEN: undefined,
      },
    });
    children.push(child);
    return child;
  }

  async function startAll(
    rendered: Rendered,
    providersFile: string,
  ): Promise<Record<ProcessName, CliProcess>> {
    const worker = startProcess('worker', rendered, providersFile);
    await worker.waitFor(/worker started/, 180_000);
    const bridge = startProcess('bridge', rendered, providersFile);
    const api = startProcess('api', rendered, providersFile);
    await bridge.waitFor(/bridge started|informer synced/, 120_000);
    await api.waitFor(/lease API listening/, 120_000);
    return { worker, bridge, api };
  }

  async function stopAll(): Promise<void> {
    for (const p of PROCESSES) {
      const code = await processes[p].stop(60_000);
      expect(code, `${p} exits 0 on SIGTERM; output:\n${processes[p].output().slice(-4000)}`).toBe(0);
    }
  }

  const getHealth = async (name: string): Promise<ProviderHealth> => {
    const health = await healths.get(name);
    if (!health) throw new Error(`ProviderHealth ${name} not found`);
    return health;
  };
  const healthReady = (h: ProviderHealth) => h.status?.conditions?.find((c) => c.type === 'Ready')?.status;

  /** Triggers a Schedule and waits for the run it started to finish; returns its result. */
  async function triggerAndWait(scheduleId: string): Promise<unknown> {
    const handle = client.schedule.getHandle(scheduleId);
    const before = new Set(
      (await handle.describe()).info.recentActions.map((a) => a.action.workflow.workflowId),
    );
    await handle.trigger();
    const workflowId = await eventually(
      `a run of ${scheduleId}`,
      async () =>
        (await handle.describe()).info.recentActions
          .map((a) => a.action.workflow.workflowId)
          .find((id) => !before.has(id)),
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    return client.workflow.getHandle(workflowId).result();
  }

  it('every overlay applies server-side; kubectl get lists what the README says', async () => {
    // Namespaced first: then the cluster-wide overlay, which the next test runs under.
    await applyOverlay('namespaced');
    expect(await installedObjects()).toEqual(
      [
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-api-cluster',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-worker-cluster',
        'configmap/egress-proxies-env',
        'configmap/egress-proxies-providers',
        'deployment.apps/egress-proxies-api',
        'deployment.apps/egress-proxies-bridge',
        'deployment.apps/egress-proxies-gateway',
        'deployment.apps/egress-proxies-worker',
        'role.rbac.authorization.k8s.io/egress-proxies-kubernetes-provider',
        'role.rbac.authorization.k8s.io/egress-proxies-worker-claims',
        'service/egress-proxies-api',
        'service/egress-proxies-gateway',
        'serviceaccount/egress-proxies-api',
        'serviceaccount/egress-proxies-bridge',
        'serviceaccount/egress-proxies-gateway',
        'serviceaccount/egress-proxies-worker',
      ].sort(),
    );
    for (const ns of WATCHED) {
      expect(
        (await kubectl(['get', 'role,rolebinding', '-n', ns, '-l', LABEL, '-o', 'name']))
          .trim()
          .split('\n')
          .sort(),
      ).toEqual([
        'role.rbac.authorization.k8s.io/egress-proxies-api',
        'role.rbac.authorization.k8s.io/egress-proxies-bridge',
        'role.rbac.authorization.k8s.io/egress-proxies-gateway',
        'role.rbac.authorization.k8s.io/egress-proxies-worker',
        'rolebinding.rbac.authorization.k8s.io/egress-proxies-api',
        'rolebinding.rbac.authorization.k8s.io/egress-proxies-bridge',
        'rolebinding.rbac.authorization.k8s.io/egress-proxies-gateway',
        'rolebinding.rbac.authorization.k8s.io/egress-proxies-worker',
      ]);
    }
    const policies = async () =>
      (await kubectl(['get', 'mutatingadmissionpolicies,mutatingadmissionpolicybindings', '-o', 'name']))
        .trim()
        .split('\n')
        .filter(Boolean)
        .sort();
    // A namespaced install has no finalizer policy: it would mark Proxies in namespaces nobody watches.
    expect(await policies()).toEqual([]);
    await applyOverlay('cluster-wide');
    expect(await policies()).toEqual([
      'mutatingadmissionpolicy.admissionregistration.k8s.io/egress-proxies-finalizer',
      'mutatingadmissionpolicybinding.admissionregistration.k8s.io/egress-proxies-finalizer',
    ]);
    expect(await installedObjects()).toEqual(
      [
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-api',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-api-cluster',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-bridge',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-gateway',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-kubernetes-provider-list-pods',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-worker',
        'clusterrole.rbac.authorization.k8s.io/egress-proxies-worker-cluster',
        'configmap/egress-proxies-env',
        'configmap/egress-proxies-providers',
        'deployment.apps/egress-proxies-api',
        'deployment.apps/egress-proxies-bridge',
        'deployment.apps/egress-proxies-gateway',
        'deployment.apps/egress-proxies-worker',
        'role.rbac.authorization.k8s.io/egress-proxies-kubernetes-provider',
        'role.rbac.authorization.k8s.io/egress-proxies-worker-claims',
        'service/egress-proxies-api',
        'service/egress-proxies-gateway',
        'serviceaccount/egress-proxies-api',
        'serviceaccount/egress-proxies-bridge',
        'serviceaccount/egress-proxies-gateway',
        'serviceaccount/egress-proxies-worker',
      ].sort(),
    );
    // The mTLS component renders onto the env ConfigMap.
    const withMtls = join(dir, 'mtls');
    mkdirSync(withMtls);
    writeFileSync(
      join(withMtls, 'kustomization.yaml'),
      stringify({
        resources: [relative(withMtls, join(K8S, 'overlays/cluster-wide'))],
        components: [relative(withMtls, join(K8S, 'components/temporal-mtls'))],
      }),
    );
    const { stdout } = await run(join(inject('kubeBinDir'), 'kubectl'), ['kustomize', withMtls]);
    expect(stdout).toContain('TEMPORAL_TLS_CLIENT_CERT_PATH: /etc/egress-proxies/temporal/tls.crt');
  }, 120_000);

  it('cluster-wide: each process with only its own ServiceAccount runs a Proxy’s whole life', async () => {
    for (const p of PROCESSES) kubeconfigs[p] = await serviceAccountKubeconfig(dir, `egress-proxies-${p}`);
    // The installation id from the cluster (no INSTALLATION_ID): the worker's get on namespace default.
    const workerKc = new KubeConfig();
    workerKc.loadFromFile(kubeconfigs.worker);
    expect(await deriveInstallation(workerKc)).toMatch(/^cluster-[0-9a-f]{16}$/);
    // The api's identity reads Proxies, and lists Secrets (the labelled credentials it watches), nothing more.
    const apiCore = (() => {
      const k = new KubeConfig();
      k.loadFromFile(kubeconfigs.api);
      return k.makeApiClient(CoreV1Api);
    })();
    await expect(apiCore.readNamespacedSecret({ namespace: proxyNs, name: 'ci' })).rejects.toMatchObject({
      code: 403,
    });
    await expect(
      apiCore.createNamespacedSecret({ namespace: proxyNs, body: { metadata: { name: 'nope' } } }),
    ).rejects.toMatchObject({ code: 403 });
    await expect(apiCore.listNamespacedPod({ namespace: proxyNs })).rejects.toMatchObject({ code: 403 });

    const providersFile = join(dir, 'providers.yaml');
    writeFileSync(
      providersFile,
      stringify({
        providers: [
          {
            name: localProvider,
            type: 'local',
            local: { stateDir: join(dir, 'local'), addressRange: privateLoopbackRange() },
          },
          {
            name: kubeProvider,
            type: 'kubernetes',
            kubernetes: { namespace: INSTALL_NS, kubeconfig: kubeconfigs.worker },
          },
          {
            name: listProvider,
            type: 'list',
            // Never dialled: a list entry's instance is the entry.
            list: {
              entries: [1, 2, 3, 4].map((i) => `127.0.0.1:${9000 + i}:user${i}:rbac-list-password-${i}`),
              claimsNamespace: INSTALL_NS,
            },
          },
        ],
      }),
    );
    const rendered = await render('cluster-wide');
    processes = await startAll(rendered, providersFile);

    // Create, with a cloud-init Secret.
    await core.createNamespacedSecret({
      namespace: proxyNs,
      body: {
        metadata: { name: 'ci', labels: { [LABEL_CLOUD_INIT]: 'true' } },
        stringData: { userdata: '#cloud-config\n' },
      },
    });
    await createProxy(objects, proxyNs, 'life', {
      mode: 'Managed',
      provider: localProvider,
      port: port(),
      cloudInit: { secretRef: { name: 'ci' } },
    });
    const first = await waitForProxy(objects, proxyNs, 'life', 'provisioned', isProvisioned, {
      timeoutMs: 90_000,
    });
    expect(first.metadata.finalizers).toContain(FINALIZER);

    // Edit.
    await editProxySpec(objects, proxyNs, 'life', (spec) => ({ ...spec, port: port() }));
    await waitForProxy(
      objects,
      proxyNs,
      'life',
      'edit applied',
      (p) => p.status?.observedGeneration === 2 && isProvisioned(p),
      { timeoutMs: 90_000 },
    );

    // The kubernetes provider: the worker's token creates the pod (no kubelet here: it stays Pending).
    const kubeProxy = await createProxy(objects, proxyNs, 'podded', {
      mode: 'Managed',
      provider: kubeProvider,
    });
    await eventually(
      'the Squid pod',
      async () =>
        (await core.listNamespacedPod({ namespace: INSTALL_NS })).items.find((p) =>
          Object.values(p.metadata?.labels ?? {}).includes(kubeProxy.metadata.uid!),
        ),
      { timeoutMs: 60_000, intervalMs: 250 },
    );

    // Provider checks: a ProviderHealth per provider, Ready.
    for (const name of [localProvider, kubeProvider]) {
      await eventually(
        `ProviderHealth ${name} Ready`,
        async () => (healthReady(await getHealth(name)) === 'True' ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 250 },
      );
    }

    // GC: a sweep lists every provider and every live Proxy, and finds no orphan.
    const report = (await triggerAndWait(scheduleIds(taskQueue).gc)) as {
      providers: Record<string, { listed: number; firstSightings: unknown[]; error?: string }>;
    };
    expect(report.providers[localProvider]).toMatchObject({ listed: 1, firstSightings: [] });
    expect(report.providers[localProvider]!.error).toBeUndefined();
    expect(report.providers[kubeProvider]!.error).toBeUndefined();
    expect(report.providers[kubeProvider]!.listed).toBeGreaterThanOrEqual(1);
    expect(report.providers[kubeProvider]!.firstSightings).toEqual([]);

    // Delete: the instance and the pod go, then the finalizer.
    await deleteProxy(objects, proxyNs, 'podded');
    await waitForProxyGone(objects, proxyNs, 'podded');
    await deleteProxy(objects, proxyNs, 'life');
    await waitForProxyGone(objects, proxyNs, 'life');
    // Nothing forbidden on the way.
    for (const p of PROCESSES) expect(processes[p].output()).not.toMatch(/forbidden/i);
  }, 400_000);

  /**
   * One rule out at a time; each case says what breaks and where it shows.
   * The overlay is re-applied after each (restoring the rule), and what
   * broke then works.
   */
  const cases: Array<{
    name: string;
    role: { kind: 'Role' | 'ClusterRole'; name: string; namespace?: string };
    resource: string;
    verb: string;
    breakIt: () => Promise<void>;
    healed: () => Promise<void>;
  }> = [];
  const proxyNamed = (n: string) => `rule-${n}`;

  cases.push({
    name: 'bridge: patch proxies (the finalizer)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-bridge' },
    resource: PROXY_PLURAL,
    verb: 'patch',
    async breakIt() {
      await createProxy(objects, proxyNs, proxyNamed('finalizer'), {
        mode: 'Managed',
        provider: localProvider,
        port: port(),
      });
      // The overlay's admission policy put the finalizer on at the create:
      // taken off by hand, only the bridge's patch puts it back.
      await removeFinalizers(objects, proxyNs, proxyNamed('finalizer'));
      await eventually(
        'bridge log: forbidden patch',
        () => Promise.resolve(forbidden('patch', PROXY_PLURAL).test(processes.bridge.output()) || undefined),
        { timeoutMs: 30_000 },
      );
      expect((await getProxy(objects, proxyNs, proxyNamed('finalizer'))).metadata.finalizers ?? []).toEqual(
        [],
      );
    },
    async healed() {
      await waitForProxy(
        objects,
        proxyNs,
        proxyNamed('finalizer'),
        'provisioned, with the finalizer back',
        (p) => isProvisioned(p) && Boolean(p.metadata.finalizers?.includes(FINALIZER)),
        { timeoutMs: 90_000 },
      );
    },
  });
  cases.push({
    name: 'bridge: create secrets (the generated credentials)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-bridge' },
    resource: 'secrets',
    verb: 'create',
    async breakIt() {
      await createProxy(objects, proxyNs, proxyNamed('creds'), {
        mode: 'Managed',
        provider: localProvider,
        port: port(),
      });
      await eventually(
        'bridge log: forbidden create of the Secret',
        () => Promise.resolve(forbidden('create', 'secrets').test(processes.bridge.output()) || undefined),
        { timeoutMs: 30_000 },
      );
      // No credentials, no instance: it is not made open instead.
      expect(isProvisioned(await getProxy(objects, proxyNs, proxyNamed('creds')))).toBe(false);
    },
    async healed() {
      await waitForProxy(objects, proxyNs, proxyNamed('creds'), 'provisioned', isProvisioned, {
        timeoutMs: 90_000,
      });
    },
  });
  cases.push({
    name: 'worker: get secrets (cloud-init)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-worker' },
    resource: 'secrets',
    verb: 'get',
    async breakIt() {
      const p = await createProxy(objects, proxyNs, proxyNamed('secret'), {
        mode: 'Managed',
        provider: localProvider,
        port: port(),
        cloudInit: { secretRef: { name: 'ci' } },
      });
      const id = proxyWorkflowId({ namespace: proxyNs, name: p.metadata.name, uid: p.metadata.uid! });
      // A create through a regular activity shows the failure on its pending
      // activity; a quick provider's (a local activity, `local` here) in the
      // Proxy's status, once its three attempts are spent.
      await eventually(
        'the Secret read retried as forbidden',
        async () => {
          const proxy = await getProxy(objects, proxyNs, p.metadata.name);
          const seen = `${await pendingFailures(client, id)}\n${JSON.stringify(proxy.status ?? {})}`;
          return forbidden('get', 'secrets').test(seen) || undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      );
      expect(isProvisioned(await getProxy(objects, proxyNs, p.metadata.name))).toBe(false);
    },
    async healed() {
      await waitForProxy(objects, proxyNs, proxyNamed('secret'), 'provisioned', isProvisioned, {
        timeoutMs: 90_000,
      });
    },
  });
  cases.push({
    name: 'worker: create pods (the kubernetes provider)',
    role: { kind: 'Role', name: 'egress-proxies-kubernetes-provider', namespace: INSTALL_NS },
    resource: 'pods',
    verb: 'create',
    async breakIt() {
      await createProxy(objects, proxyNs, proxyNamed('pod'), { mode: 'Managed', provider: kubeProvider });
      // A 403 is Permanent for the provider (the seed's decision): it shows in the Proxy's status.
      const failed = await waitForProxy(
        objects,
        proxyNs,
        proxyNamed('pod'),
        'a forbidden create in status',
        (p) =>
          (p.status?.conditions ?? []).some(
            (c) => forbidden('create', 'pods').test(c.message ?? '') || /forbidden/i.test(c.message ?? ''),
          ),
        { timeoutMs: 60_000 },
      );
      expect(isProvisioned(failed)).toBe(false);
    },
    async healed() {
      // Permanent: that Proxy stays failed; a new one is created with the rule back.
      await deleteProxy(objects, proxyNs, proxyNamed('pod'));
      await waitForProxyGone(objects, proxyNs, proxyNamed('pod'));
      const p = await createProxy(objects, proxyNs, proxyNamed('pod'), {
        mode: 'Managed',
        provider: kubeProvider,
      });
      await eventually(
        'the pod created',
        async () =>
          (await core.listNamespacedPod({ namespace: INSTALL_NS })).items.find((x) =>
            Object.values(x.metadata?.labels ?? {}).includes(p.metadata.uid!),
          ),
        { timeoutMs: 60_000, intervalMs: 250 },
      );
    },
  });
  cases.push({
    name: "worker: create configmaps (a list entry's claim)",
    role: { kind: 'Role', name: 'egress-proxies-worker-claims', namespace: INSTALL_NS },
    resource: 'configmaps',
    verb: 'create',
    async breakIt() {
      await createProxy(objects, proxyNs, proxyNamed('claim'), { mode: 'Managed', provider: listProvider });
      // A 403 is Permanent for the provider, as for pods: it shows in the Proxy's status.
      const failed = await waitForProxy(
        objects,
        proxyNs,
        proxyNamed('claim'),
        'a forbidden claim in status',
        (p) =>
          (p.status?.conditions ?? []).some((c) =>
            /forbidden: the worker may not use ConfigMaps in namespace egress-proxies/.test(c.message ?? ''),
          ),
        { timeoutMs: 60_000 },
      );
      expect(isProvisioned(failed)).toBe(false);
    },
    async healed() {
      await deleteProxy(objects, proxyNs, proxyNamed('claim'));
      await waitForProxyGone(objects, proxyNs, proxyNamed('claim'));
      await createProxy(objects, proxyNs, proxyNamed('claim'), { mode: 'Managed', provider: listProvider });
      await waitForProxy(objects, proxyNs, proxyNamed('claim'), 'provisioned', isProvisioned, {
        timeoutMs: 90_000,
      });
    },
  });
  cases.push({
    name: "worker: patch secrets (a list entry's credentials in the Proxy's Secret)",
    role: { kind: 'ClusterRole', name: 'egress-proxies-worker' },
    resource: 'secrets',
    verb: 'patch',
    async breakIt() {
      const p = await createProxy(objects, proxyNs, proxyNamed('listcreds'), {
        mode: 'Managed',
        provider: listProvider,
      });
      const id = proxyWorkflowId({ namespace: proxyNs, name: p.metadata.name, uid: p.metadata.uid! });
      await eventually(
        'the credentials write retried as forbidden',
        async () => {
          const proxy = await getProxy(objects, proxyNs, p.metadata.name);
          const seen = `${await pendingFailures(client, id)}\n${JSON.stringify(proxy.status ?? {})}`;
          return forbidden('patch', 'secrets').test(seen) || undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      );
      expect(isProvisioned(await getProxy(objects, proxyNs, p.metadata.name))).toBe(false);
    },
    async healed() {
      const p = await waitForProxy(objects, proxyNs, proxyNamed('listcreds'), 'provisioned', isProvisioned, {
        timeoutMs: 90_000,
      });
      // The entry's pair is where the prober and the gateway read it.
      const secret = await core.readNamespacedSecret({
        namespace: proxyNs,
        name: `${p.metadata.name}-proxy-auth`,
      });
      expect(Buffer.from(secret.data!.providerUsername!, 'base64').toString()).toMatch(/^user[1-4]$/);
    },
  });
  cases.push({
    name: 'worker: patch providerhealths/status (provider checks)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-worker-cluster' },
    resource: `${PROVIDER_HEALTH_PLURAL}/status`,
    verb: 'patch',
    async breakIt() {
      const handle = client.schedule.getHandle(scheduleIds(taskQueue).providerChecks);
      await handle.trigger();
      await eventually(
        'the check round retried as forbidden',
        async () => {
          const runs = (await handle.describe()).info.recentActions.map((a) => a.action.workflow.workflowId);
          for (const id of runs.slice(-2)) {
            if (
              forbidden('patch', `${PROVIDER_HEALTH_PLURAL}/status`).test(
                await pendingFailures(client, id).catch(() => ''),
              )
            )
              return true;
          }
          return undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      );
    },
    async healed() {
      const before = (await getHealth(localProvider)).status?.lastCheckTime;
      await eventually(
        'a check written again',
        async () => ((await getHealth(localProvider)).status?.lastCheckTime !== before ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 500 },
      );
    },
  });
  cases.push({
    name: 'worker: patch proxies/status (status writes)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-worker' },
    resource: `${PROXY_PLURAL}/status`,
    verb: 'patch',
    async breakIt() {
      await createProxy(objects, proxyNs, proxyNamed('status'), {
        mode: 'Managed',
        provider: localProvider,
        port: port(),
      });
      // The write is a local activity retried for minutes before the
      // workflow hears of it: the worker says so at each attempt.
      await eventually(
        'worker log: status write forbidden',
        () =>
          Promise.resolve(
            processes.worker
              .output()
              .split('\n')
              .some(
                (l) =>
                  l.includes('status write forbidden') &&
                  l.includes(`${proxyNs}/${proxyNamed('status')}`) &&
                  forbidden('patch', `${PROXY_PLURAL}/status`).test(l),
              ) || undefined,
          ),
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      expect((await getProxy(objects, proxyNs, proxyNamed('status'))).status).toBeUndefined();
    },
    async healed() {
      await waitForProxy(objects, proxyNs, proxyNamed('status'), 'provisioned', isProvisioned, {
        timeoutMs: 120_000,
      });
    },
  });
  cases.push({
    name: 'api: watch proxies',
    role: { kind: 'ClusterRole', name: 'egress-proxies-api' },
    resource: PROXY_PLURAL,
    verb: 'watch',
    async breakIt() {
      // A second api process: its informer lists, then its watch is refused, so it never serves.
      const rendered = await render('cluster-wide');
      const second = startProcess('api', rendered, join(dir, 'providers.yaml'));
      // The watch's refusal carries no body: the informer logs its 403 and retries.
      await eventually(
        'the api logging its refused watch',
        () =>
          Promise.resolve(
            second
              .output()
              .split('\n')
              .some((l) => l.includes('watch stopped; restarting') && /403|forbidden/i.test(l)) || undefined,
          ),
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      expect(second.output()).not.toMatch(/lease API listening/);
      await second.stop(30_000);
    },
    async healed() {
      const rendered = await render('cluster-wide');
      const third = startProcess('api', rendered, join(dir, 'providers.yaml'));
      await third.waitFor(/lease API listening/, 60_000);
      await third.stop(30_000);
    },
  });
  cases.push({
    name: 'worker: get namespaces/default (the derived installation id)',
    role: { kind: 'ClusterRole', name: 'egress-proxies-worker-cluster' },
    resource: 'namespaces',
    verb: 'get',
    async breakIt() {
      const k = new KubeConfig();
      k.loadFromFile(kubeconfigs.worker);
      await expect(deriveInstallation(k)).rejects.toMatchObject({ code: 403 });
    },
    async healed() {
      const k = new KubeConfig();
      k.loadFromFile(kubeconfigs.worker);
      await eventually('the installation id derived again', () => deriveInstallation(k), {
        timeoutMs: 10_000,
      });
    },
  });

  it.each(cases)(
    'without one rule: $name breaks, and works once the overlay is re-applied',
    async (c) => {
      await withoutRule(c.role, c.resource, c.verb);
      try {
        await c.breakIt();
      } finally {
        await applyOverlay('cluster-wide');
      }
      await c.healed();
    },
    240_000,
  );

  it('namespaced: with no cluster-wide Proxy, Secret or pod rights, a Proxy in a watched namespace lives', async () => {
    // Clean up the cluster-wide run, then take its ClusterRoles away entirely.
    for (const name of ['finalizer', 'status', 'secret', 'pod', 'creds'].map(proxyNamed)) {
      await deleteProxy(objects, proxyNs, name).catch(() => undefined);
      await waitForProxyGone(objects, proxyNs, name);
    }
    await stopAll();
    await kubectl([
      'delete',
      '-f',
      join(K8S, 'overlays/cluster-wide/rbac.yaml'),
      '-f',
      join(K8S, 'overlays/cluster-wide/kubernetes-provider-rbac.yaml'),
      // A namespaced install has no finalizer policy (README: switching overlays).
      '-f',
      join(K8S, 'admission/proxy-finalizer.yaml'),
    ]);
    await applyOverlay('namespaced');
    const rendered = await render('namespaced');
    expect(rendered.env.WATCH_NAMESPACES).toBe(WATCHED.join(','));
    // No cluster-wide list is granted to anyone now.
    for (const p of PROCESSES) {
      const answer = await kubectl([
        'auth',
        'can-i',
        'list',
        `${PROXY_PLURAL}.${GROUP}`,
        '--all-namespaces',
        `--as=system:serviceaccount:${INSTALL_NS}:egress-proxies-${p}`,
      ]).catch((e: { stdout?: string }) => e.stdout ?? '');
      expect(answer.trim()).toBe('no');
    }
    processes = await startAll(rendered, join(dir, 'providers.yaml'));
    // The bridge's pass over running workflows asks Temporal for the watched namespaces only.
    await processes.bridge.waitFor(/reconciled Proxies with running workflows/, 60_000);
    expect(processes.bridge.output()).not.toMatch(/could not list the running Proxy workflows/);
    const [watched] = WATCHED as [string];
    await core.createNamespacedSecret({
      namespace: watched,
      body: {
        metadata: { name: `ci-${suffix}`, labels: { [LABEL_CLOUD_INIT]: 'true' } },
        stringData: { userdata: '#cloud-config\n' },
      },
    });
    const name = `scoped-${suffix}`;
    await createProxy(objects, watched, name, {
      mode: 'Managed',
      provider: localProvider,
      port: port(),
      cloudInit: { secretRef: { name: `ci-${suffix}` } },
    });
    await waitForProxy(objects, watched, name, 'provisioned', isProvisioned, { timeoutMs: 90_000 });
    // The api serves it in its catalog.
    const apiUrl = LEASE_API_LISTENING.exec(processes.api.output())![1]!;
    await eventually('the lease API lists it', async () => {
      const res = await fetch(`${apiUrl}/v1/proxies`, {
        headers: { authorization: `Bearer token-${suffix}` },
      });
      const text = await res.text();
      return text.includes(`${watched}/${name}`) ? true : undefined;
    });
    // A Proxy outside the watched namespaces is not touched.
    const outside = await createProxy(objects, proxyNs, 'outside', {
      mode: 'Managed',
      provider: localProvider,
      port: port(),
    });
    // GC and the drift sweep list per namespace: a sweep sees the scoped instance as live.
    const report = (await triggerAndWait(scheduleIds(taskQueue).gc)) as {
      providers: Record<string, { listed: number; firstSightings: unknown[]; error?: string }>;
    };
    expect(report.providers[localProvider]).toMatchObject({ listed: 1, firstSightings: [] });
    expect(report.providers[kubeProvider]!.error).toBeUndefined();
    const untouched: Proxy = await getProxy(objects, proxyNs, outside.metadata.name);
    expect(untouched.metadata.finalizers ?? []).toEqual([]);
    expect(untouched.status).toBeUndefined();
    await deleteProxy(objects, proxyNs, 'outside');
    await deleteProxy(objects, watched, name);
    await waitForProxyGone(objects, watched, name);
    for (const p of PROCESSES) expect(processes[p].output()).not.toMatch(/forbidden/i);
    await stopAll();
    // Leave the cluster-wide RBAC as the overlay ships it.
    await applyOverlay('cluster-wide');
  }, 400_000);
});
