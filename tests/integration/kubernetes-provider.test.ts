/**
 * The `kubernetes` provider against the harness's real kube-apiserver (with
 * etcd, RBAC on): the conformance suite, the stored pod, the state mapping,
 * pagination across namespaces, self-bounded calls behind a stalled
 * apiserver, lazy kubeconfig loading, the RBAC manifest with a real
 * ServiceAccount token, and a Proxy going through create, replace and
 * delete with the real worker and bridge.
 *
 * No kubelet, scheduler or controller runs next to this apiserver: pods
 * stay Pending and nobody writes their status. Wherever a pod has to run,
 * the test plays the kubelet: it patches the pod's status subresource the
 * way a kubelet does once the container is up and the readiness probe
 * passes (phase Running, podIP, the Ready condition, a container status).
 * The pod IPs it hands out are loopback addresses, so anything that dials
 * them stays on this machine. A pod with no node is deleted at once by the
 * apiserver (there is no kubelet to wait for); a test that needs a delete
 * in progress holds the pod with a finalizer of its own.
 *
 * Everything is in one file on purpose: listByTag sees managed pods in
 * every namespace, so the suite's counts hold only while no other test
 * creates managed pods at the same time.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CoreV1Api,
  NetworkingV1Api,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
  type V1Pod,
} from '@kubernetes/client-node';
import { temporal } from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { classOf, ProviderError } from '../../providers/errors.js';
import { kubernetesConfigSchema, type KubernetesConfig } from '../../providers/kubernetes/config.js';
import { buildNetworkPolicy } from '../../providers/kubernetes/network-policy.js';
import { buildPod } from '../../providers/kubernetes/pod.js';
import {
  createKubernetesProvider,
  type KubernetesProvider,
  type KubernetesProviderOptions,
} from '../../providers/kubernetes/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { MARK_INSTALLATION, MARK_MANAGED, MARK_UID, type CreateRequest } from '../../providers/types.js';
import { FINALIZER, type Proxy } from '../../resources/proxy-schema.js';
import type { ProxyRef } from '../../resources/proxy-ref.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { describeProviderConformance } from '../conformance/provider-conformance.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  editProxySpec,
  isProvisioned,
  kubeConfig,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { TcpRelay } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';
import { capturedLogger } from '../helpers/captured-logger.js';

const live = () => new AbortController().signal;
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
/** The finalizer tests use to hold a pod in the middle of its deletion. */
const HOLD = 'egress-proxies.test/hold';

function request(overrides: Partial<CreateRequest> = {}): CreateRequest {
  const uid = overrides.uid ?? randomUUID();
  return {
    name: overrides.name ?? instanceNameFromUid(uid),
    uid,
    namespace: 'crawlers',
    proxyName: `px-${uid.slice(0, 6)}`,
    placement: {},
    port: 3128,
    installation: 'k8s-test',
    ...overrides,
  };
}

function split(id: string): { namespace: string; name: string } {
  const [namespace, name] = id.split('/') as [string, string];
  return { namespace, name };
}

async function rejection(p: Promise<unknown>): Promise<ProviderError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return err as ProviderError;
  }
  throw new Error('expected a rejection');
}

let podIpCounter = 0;
/** Loopback pod IPs: a prober dialling one stays on this machine. */
function nextPodIp(): string {
  podIpCounter++;
  return `127.64.${Math.floor(podIpCounter / 250)}.${(podIpCounter % 250) + 1}`;
}

/**
 * Plays the kubelet for one pod: what a kubelet writes to the status
 * subresource once the container runs and the readiness probe passes. The
 * JSON patch's `test` makes the apiserver refuse it unless the pod is still
 * Pending, so it never overwrites a state a test set on purpose.
 */
async function kubeletStarts(core: CoreV1Api, namespace: string, name: string, ip = nextPodIp()) {
  const now = new Date().toISOString();
  await core.patchNamespacedPodStatus(
    {
      namespace,
      name,
      body: [
        { op: 'test', path: '/status/phase', value: 'Pending' },
        { op: 'replace', path: '/status/phase', value: 'Running' },
        { op: 'add', path: '/status/podIP', value: ip },
        { op: 'add', path: '/status/podIPs', value: [{ ip }] },
        { op: 'add', path: '/status/startTime', value: now },
        {
          op: 'add',
          path: '/status/conditions',
          value: [
            { type: 'PodScheduled', status: 'True', lastTransitionTime: now },
            { type: 'Initialized', status: 'True', lastTransitionTime: now },
            { type: 'ContainersReady', status: 'True', lastTransitionTime: now },
            { type: 'Ready', status: 'True', lastTransitionTime: now },
          ],
        },
        {
          op: 'add',
          path: '/status/containerStatuses',
          value: [
            {
              name: 'squid',
              image: 'ubuntu/squid:6.6-24.04_edge',
              imageID: '',
              ready: true,
              started: true,
              restartCount: 0,
              state: { running: { startedAt: now } },
            },
          ],
        },
      ],
    },
    jsonPatch,
  );
  return ip;
}

/** The kubelet for a whole namespace: starts every new Pending pod, once. */
function kubeletLoop(core: CoreV1Api, namespace: string): { stop(): Promise<void> } {
  let stopped = false;
  const started = new Set<string>();
  const loop = (async () => {
    while (!stopped) {
      try {
        const pods = await core.listNamespacedPod({ namespace });
        for (const pod of pods.items) {
          const uid = pod.metadata?.uid ?? '';
          if (pod.status?.phase !== 'Pending' || pod.metadata?.deletionTimestamp || started.has(uid))
            continue;
          started.add(uid);
          await kubeletStarts(core, namespace, pod.metadata!.name!).catch(() => undefined);
        }
      } catch {
        // The next round retries.
      }
      // A polling kubelet stand-in (its next look), not a wait for an outcome.
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

/** Drops every finalizer in the namespace (ours hold pods mid-delete) and deletes every pod. */
async function clearNamespace(core: CoreV1Api, namespace: string): Promise<void> {
  const pods = await core.listNamespacedPod({ namespace });
  for (const pod of pods.items) {
    const name = pod.metadata!.name!;
    if ((pod.metadata?.finalizers ?? []).length > 0) {
      await core
        .patchNamespacedPod({ namespace, name, body: { metadata: { finalizers: null } } }, mergePatch)
        .catch(() => undefined);
    }
    await core.deleteNamespacedPod({ namespace, name }).catch(() => undefined);
  }
}

/** Puts a pod in the middle of its deletion: a finalizer of ours, then a delete. */
async function startDeleting(core: CoreV1Api, namespace: string, name: string): Promise<void> {
  await core.patchNamespacedPod({ namespace, name, body: { metadata: { finalizers: [HOLD] } } }, mergePatch);
  await core.deleteNamespacedPod({ namespace, name });
}

async function podGone(core: CoreV1Api, namespace: string, name: string): Promise<boolean> {
  try {
    await core.readNamespacedPod({ namespace, name });
    return false;
  } catch (err) {
    if ((err as { code?: unknown }).code === 404) return true;
    throw err;
  }
}

/** A relay in front of the apiserver; its `stall()` holds the provider's calls, open connections too (they are kept alive). */
async function startRelay(target: URL): Promise<{ relay: TcpRelay; url: string }> {
  const relay = new TcpRelay({ host: target.hostname, port: Number(target.port) });
  await relay.open();
  return { relay, url: `https://127.0.0.1:${relay.port}` };
}

/** A kubeconfig file for the harness cluster, optionally via another URL or as another user. */
async function writeKubeconfig(
  dir: string,
  opts: { server?: string; token?: string; file?: string } = {},
): Promise<string> {
  const admin = kubeConfig();
  const cluster = admin.getCurrentCluster()!;
  const user = opts.token === undefined ? admin.getCurrentUser()! : { name: 'sa', token: opts.token };
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ ...cluster, server: opts.server ?? cluster.server }],
    users: [user],
    contexts: [{ name: 'test', cluster: cluster.name, user: user.name }],
    currentContext: 'test',
  });
  const path = join(dir, opts.file ?? `kubeconfig-${randomUUID()}`);
  await writeFile(path, kc.exportConfig(), { mode: 0o600 });
  return path;
}

function makeProvider(config: Partial<KubernetesConfig>, extra: Partial<KubernetesProviderOptions> = {}) {
  const { logger, lines } = capturedLogger();
  const provider = createKubernetesProvider({
    name: extra.name ?? 'k8s-test',
    config: kubernetesConfigSchema.parse(config),
    logger,
    ...extra,
  });
  return { provider, lines };
}

// --- the contract -------------------------------------------------------------

describeProviderConformance('kubernetes', async () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const namespace = await createNamespace(kc, 'k8s-conformance');
  const { relay, url } = await startRelay(new URL(kc.getCurrentCluster()!.server));
  const dir = await mkdtemp(join(tmpdir(), 'ep-k8s-conformance-'));
  // Through the relay, so `stall` can hold the provider's calls; loaded from a file, as configured.
  const path = await writeKubeconfig(dir, { server: url });
  const { provider, lines } = makeProvider({ namespace, kubeconfig: path }, { name: 'k8s-conformance' });
  const kubelet = kubeletLoop(core, namespace);

  const extraPod = async (name: string, labels: Record<string, string>) => {
    const pod = buildPod(request({ name }), provider.config);
    pod.metadata!.labels = labels;
    await core.createNamespacedPod({ namespace, body: pod });
    return `${namespace}/${name}`;
  };

  return {
    provider,
    logLines: () => lines,
    port: 3128,
    malformedIds: [
      `${namespace}/`,
      `${namespace}/UPPER`,
      `${namespace}/a/b`,
      '/proxy-abc',
      `${namespace}/-x`,
      `${namespace}/${'a'.repeat(64)}`,
      `${namespace}/proxy.abc`,
    ],
    hooks: {
      setUnknownState: async (id) => {
        await core.patchNamespacedPodStatus(
          { ...split(id), body: { status: { phase: 'on-fire' } } },
          mergePatch,
        );
      },
      setRunningWithoutIp: async (id) => {
        await core.patchNamespacedPodStatus(
          { ...split(id), body: { status: { podIP: null, podIPs: null } } },
          mergePatch,
        );
      },
      createUnmarked: (name) => extraPod(name, { [MARK_UID]: randomUUID() }),
      createMarkedWithEmptyUid: (name) => extraPod(name, { [MARK_MANAGED]: 'true', [MARK_UID]: '' }),
      // rewriteMarks is left out: the apiserver owns creationTimestamp and
      // ignores writes to it. The describe block below covers the UID half
      // and a CreatedAt that changes with the pod.
      stall: () => {
        const release = relay.stall();
        return Promise.resolve(() => Promise.resolve(release()));
      },
      startDeleteInProgress: (id) => startDeleting(core, split(id).namespace, split(id).name),
    },
    cleanup: async () => {
      await kubelet.stop();
      await clearNamespace(core, namespace);
      await provider.close();
      await relay.cut();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

// --- provider-specific behaviour ------------------------------------------------

describe('kubernetes provider: pods in a real apiserver', () => {
  let kc: KubeConfig;
  let core: CoreV1Api;
  let namespace: string;
  let provider: KubernetesProvider;
  let dir: string;

  beforeAll(async () => {
    kc = kubeConfig();
    core = kc.makeApiClient(CoreV1Api);
    namespace = await createNamespace(kc, 'k8s-provider');
    dir = await mkdtemp(join(tmpdir(), 'ep-k8s-provider-'));
    provider = makeProvider({ namespace }, { kubeConfig: kc }).provider;
  });
  afterAll(async () => {
    if (core !== undefined) await clearNamespace(core, namespace);
    await provider?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('the apiserver accepts and stores the pod buildPod makes, under the deterministic name', async () => {
    const req = request({ port: 8443 });
    const id = await provider.create(req, live());
    expect(id).toBe(`${namespace}/${req.name}`);
    const stored = await core.readNamespacedPod({ namespace, name: req.name });
    // Everything we send comes back (the apiserver only adds defaults around it).
    expect(stored).toMatchObject(buildPod(req, provider.config) as Record<string, unknown>);
    expect(stored.metadata?.labels).toEqual(buildPod(req, provider.config).metadata?.labels);
    expect(stored.spec?.containers[0]?.env?.[0]?.value).toContain('max_filedescriptors 1024\n');
    const got = await provider.get(id, live());
    expect(got).toEqual({
      id,
      state: 'Provisioning',
      uid: req.uid,
      installation: 'k8s-test',
      createdAt: stored.metadata!.creationTimestamp,
    });
  });

  it('a NetworkPolicy beside each pod, owned by it, with the egress policy and client ranges as rules; one of an earlier pod is replaced; deleted with the pod', async () => {
    const net = kc.makeApiClient(NetworkingV1Api);
    const req = request();
    const id = await provider.create(req, live());
    const pod = await core.readNamespacedPod({ namespace, name: req.name });
    const stored = await net.readNamespacedNetworkPolicy({ namespace, name: req.name });
    const built = buildNetworkPolicy(req, provider.config, { uid: pod.metadata!.uid! });
    expect(stored.spec).toEqual(built.spec);
    expect(stored.metadata?.ownerReferences).toEqual([
      { apiVersion: 'v1', kind: 'Pod', name: req.name, uid: pod.metadata!.uid },
    ]);
    // What the rules say, read from the stored object: the pod, only from the
    // client ranges on its port; out to all but the denied ranges on 80 and
    // 443, and DNS anywhere.
    expect(stored.spec?.podSelector?.matchLabels).toEqual({ [MARK_UID]: req.uid });
    expect(stored.spec?.ingress?.[0]?._from?.map((p) => p.ipBlock?.cidr)).toEqual(
      provider.config.clientCidrs,
    );
    expect(stored.spec?.ingress?.[0]?.ports).toEqual([{ protocol: 'TCP', port: req.port }]);
    const out = stored.spec?.egress?.[0];
    expect(out?.to?.[0]?.ipBlock?.except).toEqual(expect.arrayContaining(['169.254.0.0/16', '10.0.0.0/8']));
    expect(out?.ports?.map((p) => p.port)).toEqual([80, 443]);
    expect(stored.spec?.egress?.[1]).toEqual({
      ports: [
        { protocol: 'UDP', port: 53 },
        { protocol: 'TCP', port: 53 },
      ],
    });

    // A create retried after the pod came back under the same name (the old
    // pod's policy still there): the policy is the new pod's.
    await core.deleteNamespacedPod({ namespace, name: req.name, body: { gracePeriodSeconds: 0 } });
    await eventually('the pod to go', async () => {
      const left = await core.listNamespacedPod({ namespace, fieldSelector: `metadata.name=${req.name}` });
      return left.items.length === 0 || undefined;
    });
    expect(await provider.create(req, live())).toBe(id);
    const again = await core.readNamespacedPod({ namespace, name: req.name });
    expect(again.metadata!.uid).not.toBe(pod.metadata!.uid);
    const replaced = await net.readNamespacedNetworkPolicy({ namespace, name: req.name });
    expect(replaced.metadata?.ownerReferences?.map((r) => r.uid)).toEqual([again.metadata!.uid]);

    await provider.delete(id, live());
    const gone = await net.readNamespacedNetworkPolicy({ namespace, name: req.name }).then(
      () => 200,
      (err: unknown) => (err as { code?: number }).code,
    );
    expect(gone).toBe(404);
  });

  it("with no namespace configured, the pod goes in the Proxy's namespace (the seed's behaviour), and get/delete/list find it there", async () => {
    const { provider: anywhere } = makeProvider({}, { kubeConfig: kc });
    try {
      const req = request({ namespace });
      const id = await anywhere.create(req, live());
      expect(id).toBe(`${namespace}/${req.name}`);
      expect((await core.readNamespacedPod({ namespace, name: req.name })).metadata?.namespace).toBe(
        namespace,
      );
      // Created again: the 409 path reads the pod back from the same namespace and adopts it.
      expect(await anywhere.create(req, live())).toBe(id);
      expect((await anywhere.get(id, live())).uid).toBe(req.uid);
      expect((await anywhere.listByTag(live())).map((i) => i.id)).toContain(id);
      await anywhere.delete(id, live());
      await eventually('the pod to go', async () =>
        (await podGone(core, namespace, req.name)) ? true : undefined,
      );
    } finally {
      await anywhere.close();
    }
  });

  it('Running needs the kubelet’s IP and Ready; a pod being deleted is Terminated until it is gone', async () => {
    const req = request();
    const id = await provider.create(req, live());
    expect((await provider.get(id, live())).state).toBe('Provisioning');

    const ip = await kubeletStarts(core, namespace, req.name);
    expect(await provider.get(id, live())).toMatchObject({ state: 'Running', ip });

    // The readiness probe fails (Squid stopped answering): Provisioning, no IP.
    const setReady = (status: string) =>
      core.patchNamespacedPodStatus(
        {
          namespace,
          name: req.name,
          body: [{ op: 'replace', path: '/status/conditions/3', value: { type: 'Ready', status } }],
        },
        jsonPatch,
      );
    await setReady('False');
    const notReady = await provider.get(id, live());
    expect(notReady.state).toBe('Provisioning');
    expect(notReady.ip).toBeUndefined();
    await setReady('True');
    expect((await provider.get(id, live())).state).toBe('Running');

    // Deleting: still returned (never NotFound while the name is taken), as Terminated.
    await startDeleting(core, namespace, req.name);
    const dying = await provider.get(id, live());
    expect(dying).toMatchObject({ id, state: 'Terminated', uid: req.uid });
    expect(dying.ip).toBeUndefined();
    await provider.delete(id, live()); // again, while in progress: fine
    // Create for the same Proxy does not adopt a dying pod: Transient, retried until it is gone.
    const err = await rejection(provider.create(req, live()));
    expect(err).toMatchObject({ errorClass: 'Transient', operation: 'create' });
    expect(err.message).toContain('still being deleted');

    await core.patchNamespacedPod(
      { namespace, name: req.name, body: { metadata: { finalizers: null } } },
      mergePatch,
    );
    await eventually('pod gone', async () => ((await podGone(core, namespace, req.name)) ? true : undefined));
    expect(classOf(await rejection(provider.get(id, live())))).toBe('NotFound');
    await provider.delete(id, live());
    // And now the name is free again.
    expect(await provider.create(req, live())).toBe(id);
  });

  it('UID and CreatedAt are read from the pod on every call, not remembered', async () => {
    const req = request();
    const id = await provider.create(req, live());
    const first = await provider.get(id, live());

    const other = randomUUID();
    await core.patchNamespacedPod(
      { namespace, name: req.name, body: { metadata: { labels: { [MARK_UID]: other } } } },
      mergePatch,
    );
    expect((await provider.get(id, live())).uid).toBe(other);
    expect((await provider.listByTag(live())).find((i) => i.id === id)?.uid).toBe(other);

    // The same pod made again outside the provider: creationTimestamp has
    // one-second resolution, so wait until the clock is past the first one's second.
    await eventually("the clock past the first pod's second", () =>
      Promise.resolve(Date.now() >= first.createdAt!.getTime() + 1_000 || undefined),
    );
    await core.deleteNamespacedPod({ namespace, name: req.name });
    await core.createNamespacedPod({ namespace, body: buildPod(req, provider.config) });
    const again = await provider.get(id, live());
    const stored = await core.readNamespacedPod({ namespace, name: req.name });
    expect(again.createdAt).toEqual(stored.metadata!.creationTimestamp);
    expect(again.createdAt!.getTime()).toBeGreaterThan(first.createdAt!.getTime());
    expect(again.uid).toBe(req.uid);
  });

  it('listByTag follows continue tokens and covers every namespace, managed pods only', async () => {
    const otherNamespace = await createNamespace(kc, 'k8s-provider-b');
    const paged = makeProvider({ namespace }, { kubeConfig: kc, listPageSize: 2 }).provider;
    const elsewhere = makeProvider({ namespace: otherNamespace }, { kubeConfig: kc }).provider;
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await paged.create(request(), live()));
      for (let i = 0; i < 2; i++) ids.push(await elsewhere.create(request(), live()));
      const unmanaged = buildPod(request(), elsewhere.config);
      delete unmanaged.metadata!.labels![MARK_MANAGED];
      await core.createNamespacedPod({ namespace: otherNamespace, body: unmanaged });

      const listed = (await paged.listByTag(live())).map((i) => i.id);
      // Page size 2 and at least 5 managed pods: only continue tokens get them all.
      for (const id of ids) expect(listed).toContain(id);
      expect(listed).not.toContain(`${otherNamespace}/${unmanaged.metadata!.name!}`);
      expect(new Set(listed).size).toBe(listed.length);
      expect(listed.sort()).toEqual((await provider.listByTag(live())).map((i) => i.id).sort());
    } finally {
      await clearNamespace(core, otherNamespace);
    }
  });

  it('a same-named pod of another Proxy is not adopted (Permanent) and is left alone', async () => {
    const owner = request();
    // Made by someone else, with the name our request will use.
    await core.createNamespacedPod({ namespace, body: buildPod(owner, provider.config) });
    const intruder = request({ uid: randomUUID(), name: owner.name });
    const err = await rejection(provider.create(intruder, live()));
    expect(err).toMatchObject({ errorClass: 'Permanent', operation: 'create', instance: owner.name });
    expect(err.message).toContain('belongs to another owner');
    const pod = await core.readNamespacedPod({ namespace, name: owner.name });
    expect(pod.metadata?.labels?.[MARK_UID]).toBe(owner.uid);
  });

  it('rejects what it can never create before touching the apiserver (Permanent)', async () => {
    const cases: Array<[Partial<CreateRequest>, RegExp]> = [
      [{ name: 'Proxy_Bad' }, /not a DNS-1123 label/],
      [{ port: 0 }, /port 0 is not in 1-65535/],
      [{ port: 70000 }, /port 70000/],
      [{ installation: 'has spaces' }, /installation "has spaces" is not a label value/],
      [{ uid: '', name: 'proxy-emptyuid' }, /uid is not a non-empty label value/],
    ];
    const before = (await core.listNamespacedPod({ namespace })).items.length;
    for (const [overrides, message] of cases) {
      const err = await rejection(provider.create(request(overrides), live()));
      expect(err).toMatchObject({ errorClass: 'Permanent', operation: 'create' });
      expect(err.message).toMatch(message);
    }
    expect((await core.listNamespacedPod({ namespace })).items.length).toBe(before);
  });

  it('create into a namespace that does not exist is Transient, never NotFound', async () => {
    const { provider: lost } = makeProvider(
      { namespace: `missing-${randomUUID().slice(0, 8)}` },
      { kubeConfig: kc },
    );
    const err = await rejection(lost.create(request(), live()));
    expect(err).toMatchObject({ errorClass: 'Transient', operation: 'create' });
    expect(err.message).toMatch(/namespace missing-[0-9a-f]+ does not exist/);
    expect(err.cause).toMatchObject({ code: '404' });
  });

  it('every apiserver call is bounded by operationTimeoutSeconds, whatever the caller’s signal', async () => {
    const { relay, url } = await startRelay(new URL(kc.getCurrentCluster()!.server));
    const path = await writeKubeconfig(dir, { server: url });
    const { provider: slow } = makeProvider({ namespace, kubeconfig: path, operationTimeoutSeconds: 0.5 });
    try {
      const id = await slow.create(request(), live());
      const release = relay.stall();
      try {
        for (const call of [
          () => slow.get(id, live()),
          () => slow.listByTag(live()),
          () => slow.delete(id, live()),
        ]) {
          const err = await rejection(call());
          expect(err.errorClass).toBe('Transient');
          expect(err.message).toContain('apiserver call timed out after 500 ms');
        }
        const [target] = await slow.check(live());
        expect(target).toMatchObject({
          name: 'apiserver',
          ready: false,
          reason: 'Timeout',
          address: url,
        });
      } finally {
        release();
      }
      expect((await slow.get(id, live())).id).toBe(id);
      expect((await slow.check(live()))[0]).toMatchObject({ ready: true, reason: 'Reachable' });
    } finally {
      await slow.close();
      await relay.cut();
    }
  });

  it('reads the kubeconfig lazily: missing is Transient until it appears; unloadable or a wrong context is Permanent', async () => {
    const path = join(dir, 'late-kubeconfig');
    const { provider: late } = makeProvider({ namespace, kubeconfig: path });
    const missing = await rejection(late.listByTag(live()));
    expect(missing).toMatchObject({ errorClass: 'Transient', operation: 'list' });
    expect(missing.message).toContain(`kubeconfig ${path} cannot be read`);
    expect(missing.cause).toMatchObject({ code: 'ENOENT' });
    expect((await late.check(live()))[0]).toMatchObject({ ready: false, reason: 'Unreachable' });
    // The Secret lands: the same provider works, without a restart.
    await writeKubeconfig(dir, { file: 'late-kubeconfig' });
    expect(Array.isArray(await late.listByTag(live()))).toBe(true);
    expect((await late.check(live()))[0]).toMatchObject({ ready: true, reason: 'Reachable' });

    const garbage = join(dir, 'garbage');
    await writeFile(garbage, 'clusters: [this is: not: a kubeconfig');
    const { provider: broken } = makeProvider({ namespace, kubeconfig: garbage });
    const bad = await rejection(broken.get(`${namespace}/proxy-x`, live()));
    expect(bad).toMatchObject({ errorClass: 'Permanent', operation: 'get' });
    expect(bad.message).toContain('does not load');

    const good = await writeKubeconfig(dir);
    const { provider: wrongContext } = makeProvider({ namespace, kubeconfig: good, context: 'nope' });
    const ctx = await rejection(wrongContext.create(request(), live()));
    expect(ctx).toMatchObject({ errorClass: 'Permanent', operation: 'create' });
    expect(ctx.message).toContain('kubeconfig has no context "nope"');
  });
});

// --- RBAC ------------------------------------------------------------------------

describe('kubernetes provider: the RBAC manifest, with a real ServiceAccount token', () => {
  let kc: KubeConfig;
  let core: CoreV1Api;
  let namespace: string;
  let dir: string;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    kc = kubeConfig();
    core = kc.makeApiClient(CoreV1Api);
    namespace = await createNamespace(kc, 'k8s-rbac');
    dir = await mkdtemp(join(tmpdir(), 'ep-k8s-rbac-'));
  });
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    if (core !== undefined) await clearNamespace(core, namespace);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  /** A ServiceAccount in the test namespace and a kubeconfig holding a token for it. */
  async function serviceAccount(name: string): Promise<string> {
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
    const review = await core.createNamespacedServiceAccountToken({
      namespace,
      name,
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    return writeKubeconfig(dir, { token: review.status!.token });
  }

  /**
   * Applies the provider's RBAC as shipped (the cluster-wide overlay's
   * pods list, base's Role in the provider's namespace), retargeted
   * only where an installation would edit it: namespaces and subjects to
   * the test's, cluster-scoped names suffixed so parallel runs don't clash.
   */
  async function applyManifest(serviceAccountName: string): Promise<void> {
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    const docs = [
      'infra/k8s/overlays/cluster-wide/kubernetes-provider-rbac.yaml',
      'infra/k8s/base/kubernetes-provider-rbac.yaml',
    ]
      .flatMap((f) => parseAllDocuments(readFileSync(f, 'utf8')))
      .map(
        (d) =>
          d.toJS() as {
            kind: string;
            metadata: { name: string; namespace?: string };
            roleRef: { apiGroup: string; kind: string; name: string };
            subjects?: Array<{ kind: string; name: string; namespace: string }>;
          },
      );
    expect(docs.map((d) => d.kind)).toEqual(['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
    const suffix = `-${namespace}`;
    for (const doc of docs) {
      for (const s of doc.subjects ?? []) Object.assign(s, { name: serviceAccountName, namespace });
      if (doc.kind === 'ClusterRole') {
        doc.metadata.name += suffix;
        await rbac.createClusterRole({ body: doc });
        cleanups.push(() => rbac.deleteClusterRole({ name: doc.metadata.name }));
      } else if (doc.kind === 'ClusterRoleBinding') {
        doc.metadata.name += suffix;
        doc.roleRef.name += suffix;
        await rbac.createClusterRoleBinding({ body: doc });
        cleanups.push(() => rbac.deleteClusterRoleBinding({ name: doc.metadata.name }));
      } else if (doc.kind === 'Role') {
        doc.metadata.namespace = namespace;
        await rbac.createNamespacedRole({ namespace, body: doc });
      } else {
        doc.metadata.namespace = namespace;
        await rbac.createNamespacedRoleBinding({ namespace, body: doc });
      }
    }
  }

  it('grants everything the provider calls, in every operation, and check() passes', async () => {
    await applyManifest('egress-proxies');
    const path = await serviceAccount('egress-proxies');
    const { provider } = makeProvider({ namespace, kubeconfig: path });
    // RBAC bindings reach the authorizer's cache within moments.
    await eventually('check passes with the manifest', async () => {
      const [t] = await provider.check(live());
      return t?.ready ? t : undefined;
    });
    const req = request();
    const id = await provider.create(req, live());
    expect(await provider.create(req, live())).toBe(id); // the 409 path: get is granted
    await kubeletStarts(core, namespace, req.name);
    expect((await provider.get(id, live())).state).toBe('Running');
    expect((await provider.listByTag(live())).map((i) => i.id)).toContain(id);
    await provider.delete(id, live());
    expect(classOf(await rejection(provider.get(id, live())))).toBe('NotFound');
    expect((await provider.check(live()))[0]).toMatchObject({ ready: true, reason: 'Reachable' });

    // Nothing beyond: no patching pods, no pods outside the namespace, no secrets.
    const asProvider = new KubeConfig();
    asProvider.loadFromFile(path);
    const api = asProvider.makeApiClient(CoreV1Api);
    const denied = async (p: Promise<unknown>) => {
      try {
        await p;
      } catch (err) {
        return (err as { code?: unknown }).code;
      }
      return 'allowed';
    };
    const other = await createNamespace(kc, 'k8s-rbac-other');
    expect(
      await denied(api.createNamespacedPod({ namespace: other, body: buildPod(request(), provider.config) })),
    ).toBe(403);
    const probe = await provider.create(request(), live());
    expect(
      await denied(
        api.patchNamespacedPod({ ...split(probe), body: { metadata: { labels: { x: 'y' } } } }, mergePatch),
      ),
    ).toBe(403);
    expect(await denied(api.listNamespacedSecret({ namespace }))).toBe(403);
    expect(await denied(api.readNamespacedPod({ namespace: other, name: 'whatever' }))).toBe(403);
  });

  it('without the grants: check() says Forbidden, and every call is Permanent (403), the seed’s decision', async () => {
    const path = await serviceAccount('no-grants');
    const { provider, lines } = makeProvider({ namespace, kubeconfig: path });
    const [target] = await provider.check(live());
    expect(target).toMatchObject({ name: 'apiserver', ready: false, reason: 'Forbidden' });
    expect(target!.message).toBe(
      'list pods (all namespaces, limit 1): apiserver answered 403 Forbidden (RBAC denial or an exhausted ResourceQuota: both are 403)',
    );
    const req = request();
    for (const [op, call] of [
      ['create', () => provider.create(req, live())],
      ['get', () => provider.get(`${namespace}/${req.name}`, live())],
      ['delete', () => provider.delete(`${namespace}/${req.name}`, live())],
      ['list', () => provider.listByTag(live())],
    ] as const) {
      const err = await rejection(call());
      expect(err).toMatchObject({ errorClass: 'Permanent', operation: op, provider: 'k8s-test' });
      expect(err.cause).toMatchObject({ code: '403' });
    }
    // The token never reaches an error or a log line.
    const token = (() => {
      const k = new KubeConfig();
      k.loadFromFile(path);
      return k.getCurrentUser()!.token!;
    })();
    expect(lines.join('\n')).not.toContain(token);
    expect(lines.some((l) => l.includes('"errorClass":"Permanent"'))).toBe(true);
  });

  it('a ResourceQuota 403 is Permanent too', async () => {
    const quotaNs = await createNamespace(kc, 'k8s-quota');
    await core.createNamespacedResourceQuota({
      namespace: quotaNs,
      body: { metadata: { name: 'no-pods' }, spec: { hard: { pods: '0' } } },
    });
    // No quota controller runs here: write the status it would.
    await core.patchNamespacedResourceQuotaStatus(
      { namespace: quotaNs, name: 'no-pods', body: { status: { hard: { pods: '0' }, used: { pods: '0' } } } },
      mergePatch,
    );
    const { provider } = makeProvider({ namespace: quotaNs }, { kubeConfig: kc });
    const err = await rejection(provider.create(request(), live()));
    expect(err).toMatchObject({ errorClass: 'Permanent', operation: 'create' });
    expect(err.message).toContain('apiserver answered 403 Forbidden');
  });
});

// --- end to end ------------------------------------------------------------------

describe('a Proxy with provider: kubernetes, end to end', () => {
  let cp: ControlPlane;
  let core: CoreV1Api;
  let podNamespace: string;

  beforeAll(async () => {
    const kc = kubeConfig();
    core = kc.makeApiClient(CoreV1Api);
    podNamespace = await createNamespace(kc, 'k8s-e2e-pods');
    cp = await startControlPlane({
      prefix: 'k8s-e2e',
      providersYaml: () =>
        [
          'providers:',
          '  - name: kubernetes',
          '    type: kubernetes',
          '    kubernetes:',
          `      namespace: ${podNamespace}`,
          `      kubeconfig: ${inject('kubeconfigPath')}`,
          '',
        ].join('\n'),
    });
  });
  afterAll(async () => {
    await cp?.close();
    if (core !== undefined) await clearNamespace(core, podNamespace);
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);
  const provisioned = isProvisioned;
  const pod = (name: string) =>
    eventually(`pod ${name}`, () => core.readNamespacedPod({ namespace: podNamespace, name }));

  /** The Proxy's status, what the bridge did with it, and its run: what a failed wait should say. */
  async function whereIs(ref: ProxyRef): Promise<string> {
    const lines: string[] = [];
    const proxy = await cp.api.get(ref.namespace, ref.name).catch((e: unknown) => String(e));
    lines.push(`Proxy: ${JSON.stringify(typeof proxy === 'string' ? proxy : (proxy?.status ?? null))}`);
    lines.push(`bridge failures for the key: ${cp.bridge.failures(`${ref.namespace}/${ref.name}`)}`);
    try {
      const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
      const d = await handle.describe();
      lines.push(`run: ${d.status.name}, history ${d.historyLength} events, task queue ${d.taskQueue}`);
      const wft = d.raw.pendingWorkflowTask;
      if (wft) lines.push(`pending workflow task: ${JSON.stringify(wft)}`);
      lines.push(`worker: ${JSON.stringify(cp.worker.getStatus())}, queue ${cp.taskQueue}`);
      const described = await cp.client.workflowService.describeTaskQueue({
        namespace: inject('temporalNamespace'),
        taskQueue: { name: cp.taskQueue },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
      });
      lines.push(
        `workflow pollers: ${JSON.stringify((described.pollers ?? []).map((p) => ({ identity: p.identity, last: p.lastAccessTime })))}`,
      );
      for (const a of d.raw.pendingActivities ?? []) {
        lines.push(
          `pending ${a.activityType?.name}: attempt ${a.attempt}, ${a.lastFailure?.message ?? 'no failure'}`,
        );
      }
      const history = await handle.fetchHistory();
      const types = (history.events ?? []).map((e) =>
        String(temporal.api.enums.v1.EventType[e.eventType ?? 0]).replace(/^EVENT_TYPE_/, ''),
      );
      lines.push(`events (last 30 of ${types.length}): ${types.slice(-30).join(', ')}`);
    } catch (e) {
      lines.push(`run: ${String(e)}`);
    }
    return lines.join('\n');
  }

  it('creates a Squid pod, replaces it on a port change, and deletes it with the Proxy', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-k8s', {
      mode: 'Managed',
      provider: 'kubernetes',
      port: 18080,
    });
    const uid = created.metadata.uid!;
    const name = instanceNameFromUid(uid);
    const ref = { namespace: cp.namespace, name: 'px-k8s', uid };

    // Create: the pod exists, Pending; the Proxy waits for it.
    const first: V1Pod = await pod(name).catch(async (error: unknown) => {
      // Seen in CI: another file's bridge, watching every namespace, had
      // started this Proxy's workflow on its own task queue (tests/helpers/cli.ts
      // now refuses that). Say where the Proxy's way to its pod stopped.
      throw new Error(`${(error as Error).message}\n${await whereIs(ref)}`, { cause: error });
    });
    expect(first.metadata?.labels).toMatchObject({
      [MARK_MANAGED]: 'true',
      [MARK_UID]: uid,
      [MARK_INSTALLATION]: 'test-installation',
    });
    expect(first.spec?.containers[0]?.ports?.[0]?.containerPort).toBe(18080);
    expect(first.spec?.containers[0]?.env?.[0]?.value).toContain('http_port 18080\n');
    const waiting = await waitFor('px-k8s', 'a providerID while the pod is Pending', (p) =>
      Boolean(p.status?.providerID),
    );
    expect(waiting.status?.providerID).toBe(`${podNamespace}/${name}`);
    expect(provisioned(waiting)).toBe(false);
    expect(waiting.status?.ip).toBeFalsy();

    // The kubelet starts it: Provisioned=True with the pod's IP.
    const ip = await kubeletStarts(core, podNamespace, name);
    const running = await waitFor(
      'px-k8s',
      'Provisioned=True with the pod IP',
      (p) => provisioned(p) && p.status?.ip === ip,
    );
    expect(running.metadata.finalizers).toContain(FINALIZER);
    expect(running.status?.observedGeneration).toBe(1);

    // Replace: a new port deletes the pod and creates a new one under the same name.
    await editProxySpec(cp.api, cp.namespace, 'px-k8s', (spec) => ({ ...spec, port: 18081 }));
    const second = await eventually('the replacement pod', async () => {
      const p = await core.readNamespacedPod({ namespace: podNamespace, name });
      return p.metadata?.uid !== first.metadata?.uid ? p : undefined;
    });
    expect(second.spec?.containers[0]?.ports?.[0]?.containerPort).toBe(18081);
    expect(second.spec?.containers[0]?.readinessProbe?.tcpSocket?.port).toBe(18081);
    expect(second.spec?.containers[0]?.env?.[0]?.value).toContain('http_port 18081\n');
    expect(second.metadata?.labels?.[MARK_UID]).toBe(uid);
    const newIp = await kubeletStarts(core, podNamespace, name);
    const replaced = await waitFor(
      'px-k8s',
      'the replacement Provisioned=True on its IP',
      (p) => p.status?.observedGeneration === 2 && provisioned(p) && p.status?.ip === newIp,
    );
    expect(replaced.status?.providerID).toBe(`${podNamespace}/${name}`);
    const managed = await cp.registry.get('kubernetes')!.listByTag(AbortSignal.timeout(5_000));
    expect(managed.filter((i) => i.uid === uid)).toHaveLength(1);
    // The replacement pod has its NetworkPolicy, owned by it.
    const net = kubeConfig().makeApiClient(NetworkingV1Api);
    const policy = await net.readNamespacedNetworkPolicy({ namespace: podNamespace, name });
    expect(policy.metadata?.ownerReferences?.map((r) => r.uid)).toEqual([second.metadata!.uid]);
    expect(policy.spec?.ingress?.[0]?.ports).toEqual([{ protocol: 'TCP', port: 18081 }]);

    // Delete: pod gone, its NetworkPolicy gone, finalizer removed (the object is gone), workflow completed.
    await deleteProxy(cp.api, cp.namespace, 'px-k8s');
    await waitForProxyGone(cp.api, cp.namespace, 'px-k8s');
    expect(await podGone(core, podNamespace, name)).toBe(true);
    const policyLeft = await net.readNamespacedNetworkPolicy({ namespace: podNamespace, name }).then(
      () => 200,
      (err: unknown) => (err as { code?: number }).code,
    );
    expect(policyLeft).toBe(404);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const description = await eventually('workflow completed', async () => {
      const d = await handle.describe();
      return d.status.name === 'COMPLETED' ? d : undefined;
    });
    expect(description.status.name).toBe('COMPLETED');
  });
});
