/**
 * The Helm chart (infra/helm/egress-proxies) with the real `helm`, built from
 * the Go module proxy by infra/scripts/build-helm.sh: `helm lint`; `helm
 * template` for the default values and each documented combination
 * (the chart's ci/*-values.yaml) against what kustomize renders for the same
 * install; the schema refusing a wrong type and an unknown key; and one
 * release's life on a real kube-apiserver: install from zero (the README's
 * command), upgrade with a new image tag, uninstall; then the same
 * `kubectl auth can-i` answers as the kustomize install, cluster-wide and
 * namespaced.
 *
 * The apiserver is one of this file's own, started like the suite's (the
 * same binaries, RBAC enforced) and empty, so "from zero" means no CRDs: the
 * chart's cluster-wide install carries the finalizer admission policy, which
 * acts on every Proxy created on its apiserver, and the objects have the
 * shipped fixed names (ClusterRoles egress-proxies-*), as in
 * k8s-manifests.test.ts and finalizer-policy.test.ts. There is no kubelet:
 * Deployments are objects in the apiserver, so nothing waits for pods
 * (`helm install` without --wait).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { runInfraScript } from '../../local-servers/tools.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { ROOT } from '../helpers/cli.js';
import { kubectl as sharedKubectl } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';

const run = promisify(execFile);
const CHART = join(ROOT, 'infra/helm/egress-proxies');
const K8S = join(ROOT, 'infra/k8s');
const NS = 'egress-proxies';
const RELEASE = 'egress-proxies';
const WATCHED = ['team-a', 'team-b'];
const PROCESSES = ['worker', 'bridge', 'api', 'gateway'] as const;
const CRDS = [
  'proxies.crawl.example.com',
  'providerhealths.crawl.example.com',
  'proxypools.crawl.example.com',
];

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    resourceVersion?: string;
    generation?: number;
  };
  [field: string]: unknown;
}

/** kind/namespace/name, with kustomize's ConfigMap content hash taken off (the chart's ConfigMaps have none). */
function keyOf(o: K8sObject): string {
  const name =
    o.kind === 'ConfigMap'
      ? o.metadata.name.replace(/^(egress-proxies-[a-z]+)-[a-z0-9]{10}$/, '$1')
      : o.metadata.name;
  return `${o.kind}/${o.metadata.namespace ?? ''}/${name}`;
}

function docs(yamlText: string): K8sObject[] {
  return parseAllDocuments(yamlText)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((d): d is K8sObject => d !== null);
}

/** kustomize's ConfigMap names (with their hash) replaced by the plain ones, anywhere in a pod spec. */
function withoutHashes(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value).replace(/"(egress-proxies-(?:env|providers))-[a-z0-9]{10}"/g, '"$1"'),
  );
}

/**
 * What must be equal between the two installs, per object: RBAC rules,
 * bindings, Deployments' selectors, replicas and pod specs, Services' specs,
 * the env ConfigMap, the providers config, the admission policy.
 */
function essence(o: K8sObject): unknown {
  switch (o.kind) {
    case 'Role':
    case 'ClusterRole':
      return o.rules;
    case 'RoleBinding':
    case 'ClusterRoleBinding':
      return { roleRef: o.roleRef, subjects: o.subjects };
    case 'Deployment': {
      const spec = o.spec as {
        replicas: number;
        selector: unknown;
        template: { metadata: { labels: unknown }; spec: unknown };
      };
      return withoutHashes({
        replicas: spec.replicas,
        selector: spec.selector,
        labels: spec.template.metadata.labels,
        pod: spec.template.spec,
      });
    }
    case 'Service':
    case 'MutatingAdmissionPolicy':
    case 'MutatingAdmissionPolicyBinding':
      return o.spec;
    case 'ConfigMap': {
      const data = o.data as Record<string, string>;
      // The providers config is compared as data: the chart renders it through toYaml.
      return data['providers.yaml'] ? parse(data['providers.yaml']) : data;
    }
    default:
      return null;
  }
}

/**
 * The `helm install` of README's "Install with Helm", as written there (its
 * continuation lines joined), with the chart's path made absolute.
 */
function readmeInstall(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Install with Helm'));
  const command = /^helm install (?:.*\\\n)*.*$/m.exec(section)?.[0];
  expect(command, 'README: a helm install command under Install with Helm').toBeDefined();
  const words = command!.replace(/\\\n/g, ' ').trim().split(/\s+/).slice(1);
  return words.map((w) => (w === 'infra/helm/egress-proxies' ? CHART : w));
}

/** Sorted lines of `kubectl auth can-i --list`, per ServiceAccount and namespace. */
type CanI = Record<string, string>;

describe('the Helm chart infra/helm/egress-proxies', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-helm-'));
  let helmBin: string;
  let apiserver: LocalKubeApiServer | undefined;
  const kubeconfig = () => apiserver!.kubeconfigPath;
  const kubectl = (args: string[]) => sharedKubectl(args, kubeconfig());
  const kubectlBin = () => join(inject('kubeBinDir'), 'kubectl');

  /** helm's exit code and everything it printed; its config, cache and data in this file's directory. */
  async function helm(args: string[]): Promise<{ code: number; output: string; stdout: string }> {
    const env = {
      ...process.env,
      HELM_CONFIG_HOME: join(dir, 'helm/config'),
      HELM_CACHE_HOME: join(dir, 'helm/cache'),
      HELM_DATA_HOME: join(dir, 'helm/data'),
      KUBECONFIG: apiserver?.kubeconfigPath ?? join(dir, 'no-kubeconfig'),
    };
    try {
      const { stdout, stderr } = await run(helmBin, args, { env, timeout: 120_000, maxBuffer: 64 << 20 });
      return { code: 0, output: stdout + stderr, stdout };
    } catch (error) {
      const e = error as { code?: number; stdout?: string; stderr?: string };
      const stdout = e.stdout ?? '';
      return { code: typeof e.code === 'number' ? e.code : -1, output: stdout + (e.stderr ?? ''), stdout };
    }
  }

  async function helmOk(args: string[]): Promise<string> {
    const { code, output, stdout } = await helm(args);
    expect(code, `helm ${args.join(' ')}:\n${output}`).toBe(0);
    return stdout;
  }

  /** `helm template` of the release as the README installs it (CRDs included), with these values files. */
  async function template(values: string[]): Promise<K8sObject[]> {
    return docs(
      await helmOk([
        'template',
        RELEASE,
        CHART,
        '--namespace',
        NS,
        '--include-crds',
        ...values.flatMap((v) => ['-f', v]),
      ]),
    );
  }

  /** `kubectl kustomize` of a kustomization written here: `resources` and `components` under infra/k8s, plus `extra`. */
  async function kustomize(
    name: string,
    opts: { resources: string[]; components?: string[]; extra?: Record<string, unknown> },
  ): Promise<K8sObject[]> {
    const at = join(dir, 'kustomize', name);
    mkdirSync(at, { recursive: true });
    // kustomize takes only relative paths to other kustomizations.
    const rel = (p: string) => relative(at, join(K8S, p));
    writeFileSync(
      join(at, 'kustomization.yaml'),
      stringify({
        apiVersion: 'kustomize.config.k8s.io/v1beta1',
        kind: 'Kustomization',
        resources: opts.resources.map(rel),
        ...(opts.components ? { components: opts.components.map(rel) } : {}),
        ...opts.extra,
      }),
    );
    const { stdout } = await run(kubectlBin(), ['kustomize', at], { maxBuffer: 64 << 20 });
    return docs(stdout);
  }

  const ci = (name: string) => join(CHART, 'ci', `${name}-values.yaml`);

  /** Asserts the two renderings hold the same objects, and each the same essence. */
  function expectSameInstall(
    chart: K8sObject[],
    kustomized: K8sObject[],
    opts: { chartOnly?: string[]; differing?: string[] } = {},
  ) {
    // The namespace: `helm install --create-namespace` makes it (Helm charts do not own their namespace).
    const expected = kustomized.filter((o) => o.kind !== 'Namespace');
    const rendered = chart.filter((o) => !(opts.chartOnly ?? []).includes(keyOf(o)));
    expect(rendered.map(keyOf).sort()).toEqual(expected.map(keyOf).sort());
    const byKey = new Map(expected.map((o) => [keyOf(o), o]));
    for (const o of rendered.filter((r) => !(opts.differing ?? []).includes(keyOf(r)))) {
      expect(essence(o), keyOf(o)).toEqual(essence(byKey.get(keyOf(o))!));
    }
  }

  /** What each ServiceAccount may do in each namespace (and so cluster-wide), as the apiserver answers now. */
  async function canI(): Promise<CanI> {
    const answers: CanI = {};
    for (const p of PROCESSES) {
      // One process's namespaces at once: five kubectl calls in flight.
      const namespaces = [NS, ...WATCHED, 'default', 'elsewhere'];
      const outs = await Promise.all(
        namespaces.map((ns) =>
          kubectl([
            'auth',
            'can-i',
            '--list',
            '-n',
            ns,
            `--as=system:serviceaccount:${NS}:egress-proxies-${p}`,
          ]),
        ),
      );
      namespaces.forEach((ns, i) => {
        answers[`${p} in ${ns}`] = outs[i]!.trim().split('\n').slice(1).sort().join('\n');
      });
    }
    return answers;
  }

  /** `kubectl auth can-i` answers once the apiserver's RBAC informer shows `expected` (it reads roles a moment after a write). */
  async function canIEquals(expected: CanI, what: string): Promise<void> {
    let last: CanI = {};
    await eventually(
      what,
      async () => {
        last = await canI();
        return JSON.stringify(last) === JSON.stringify(expected) ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    ).catch(() => undefined);
    expect(last).toEqual(expected);
  }

  /** Every release object and CRD as the apiserver holds it now, by key. */
  async function snapshot(manifestFile: string): Promise<Map<string, K8sObject>> {
    const list = JSON.parse(
      await kubectl(['get', '-f', manifestFile, '-o', 'json', '--ignore-not-found']).then(
        (s) => s || '{"items":[]}',
      ),
    ) as { items: K8sObject[] };
    const crds = JSON.parse(await kubectl(['get', 'crd', ...CRDS, '-o', 'json'])) as { items: K8sObject[] };
    return new Map([...list.items, ...crds.items].map((o) => [keyOf(o), o]));
  }

  /** Everything labelled part-of=egress-proxies that the chart or kustomize may make, by name. */
  async function labelled(): Promise<string[]> {
    const out = await kubectl([
      'get',
      'deploy,sa,role,rolebinding,clusterrole,clusterrolebinding,svc,cm,secret,mutatingadmissionpolicy,mutatingadmissionpolicybinding',
      '-A',
      '-l',
      'app.kubernetes.io/part-of=egress-proxies',
      '-o',
      'name',
    ]);
    return out.trim().split('\n').filter(Boolean).sort();
  }

  beforeAll(async () => {
    helmBin = await runInfraScript('build-helm.sh', { stderr: 'capture' });
  }, 1_800_000);

  afterAll(async () => {
    await apiserver?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('helm lint is clean for the default values and every documented combination', async () => {
    const combos = readdirSync(join(CHART, 'ci')).filter((f) => f.endsWith('-values.yaml'));
    expect(combos.sort()).toEqual([
      'namespaced-values.yaml',
      'observability-values.yaml',
      'temporal-mtls-values.yaml',
      'tenants-values.yaml',
    ]);
    for (const values of [[], ...combos.map((f) => ['-f', join(CHART, 'ci', f)])]) {
      const { code, output } = await helm(['lint', CHART, '--strict', ...values]);
      expect(output, values.join(' ')).toContain('1 chart(s) linted, 0 chart(s) failed');
      expect(output).not.toMatch(/\[(WARNING|ERROR)\]/);
      expect(code).toBe(0);
    }
  });

  it('helm template renders the objects kustomize renders for the same install, for each combination', async () => {
    // Default: the cluster-wide overlay.
    const clusterWide = await kustomize('cluster-wide', { resources: ['overlays/cluster-wide'] });
    const defaults = await template([]);
    expectSameInstall(defaults, clusterWide);
    expect(
      defaults
        .filter((o) => o.kind === 'CustomResourceDefinition')
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual([...CRDS].sort());
    // The images: kustomize's `images:` entry is the chart's image.repository and image.tag.
    for (const d of defaults.filter((o) => o.kind === 'Deployment')) {
      expect(JSON.stringify(d)).toContain('"image":"registry.example.com/egress-proxies:0.1.0"');
    }

    // Namespaced: the namespaced overlay (team-a and team-b).
    expectSameInstall(
      await template([ci('namespaced')]),
      await kustomize('namespaced', { resources: ['overlays/namespaced'] }),
    );

    // Temporal over mTLS: the cluster-wide overlay with the temporal-mtls component and its own Temporal.
    expectSameInstall(
      await template([ci('temporal-mtls')]),
      await kustomize('temporal-mtls', {
        resources: ['overlays/cluster-wide'],
        components: ['components/temporal-mtls'],
        extra: {
          configMapGenerator: [
            {
              name: 'egress-proxies-env',
              namespace: NS,
              behavior: 'merge',
              literals: ['TEMPORAL_ADDRESS=temporal.example.internal:7233', 'TEMPORAL_NAMESPACE=crawling'],
            },
          ],
        },
      }),
    );

    // Tenants (no kustomize counterpart): the Secret, and --tenants-file on the api and the gateway only.
    const tenants = await template([ci('tenants')]);
    const secret = tenants.find((o) => keyOf(o) === `Secret/${NS}/egress-proxies-tenants`)!;
    const file = parse((secret.stringData as Record<string, string>)['tenants.yaml']!) as {
      tenants: Array<{ name: string }>;
    };
    expect(file.tenants.map((t) => t.name)).toEqual(['team-a', 'team-b']);
    for (const d of tenants.filter((o) => o.kind === 'Deployment')) {
      const reads = JSON.stringify(d).includes('--tenants-file=/etc/egress-proxies/tenants/tenants.yaml');
      expect(reads, d.metadata.name).toBe(
        ['egress-proxies-api', 'egress-proxies-gateway'].includes(d.metadata.name),
      );
    }
    expectSameInstall(tenants, clusterWide, {
      chartOnly: [`Secret/${NS}/egress-proxies-tenants`],
      differing: [`Deployment/${NS}/egress-proxies-api`, `Deployment/${NS}/egress-proxies-gateway`],
    });
  });

  it('a wrong type or an unknown key is refused by the schema, naming the field', async () => {
    const wrongType = join(dir, 'wrong-type.yaml');
    writeFileSync(wrongType, stringify({ worker: { replicas: 'two' } }));
    const unknownKey = join(dir, 'unknown-key.yaml');
    writeFileSync(unknownKey, stringify({ image: { tga: '0.2.0' }, wroker: { replicas: 2 } }));
    for (const command of [
      ['template', RELEASE, CHART],
      ['install', RELEASE, CHART, '--namespace', NS, '--dry-run=client'],
    ]) {
      const typed = await helm([...command, '-f', wrongType]);
      expect(typed.code).not.toBe(0);
      expect(typed.output).toMatch(/at '\/worker\/replicas': got string, want integer/);
      const unknown = await helm([...command, '-f', unknownKey]);
      expect(unknown.code).not.toBe(0);
      expect(unknown.output).toMatch(/at '\/image': additional properties 'tga' not allowed/);
      expect(unknown.output).toMatch(/additional properties 'wroker' not allowed/);
    }
    // A kubernetes provider without a namespace would need pod rights everywhere: refused, naming it.
    const noNamespace = join(dir, 'no-namespace.yaml');
    writeFileSync(noNamespace, stringify({ providers: [{ name: 'k', type: 'kubernetes' }] }));
    const refused = await helm(['template', RELEASE, CHART, '-f', noNamespace]);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain('providers[0].kubernetes.namespace');
  });

  it('install from zero, upgrade with a new image tag, uninstall; can-i as the kustomize install, cluster-wide and namespaced', async () => {
    apiserver = await startLocalKubeApiServer({ binDir: inject('kubeBinDir'), dataDir: join(dir, 'kube') });
    for (const ns of WATCHED) await kubectl(['create', 'namespace', ns]);

    // The README's install, from zero: no CRDs, no namespace.
    await helmOk(readmeInstall());
    expect(
      (await kubectl(['get', 'secret', '-n', NS, '-l', `owner=helm,name=${RELEASE}`, '-o', 'name'])).trim(),
    ).toBe(`secret/sh.helm.release.v1.${RELEASE}.v1`);
    for (const crd of CRDS) {
      await kubectl(['wait', '--for=condition=Established', `crd/${crd}`, '--timeout=30s']);
    }
    const manifest = join(dir, 'manifest.yaml');
    writeFileSync(manifest, await helmOk(['get', 'manifest', RELEASE, '--namespace', NS]));
    const kustomized = await kustomize('cluster-wide', { resources: ['overlays/cluster-wide'] });
    // Exactly the kustomize install's objects are in the apiserver, with the same RBAC and config
    // (Deployments and Services as stored carry the apiserver's defaults; their specs are compared as rendered above).
    const installed = await snapshot(manifest);
    expect([...installed.keys()].sort()).toEqual(
      kustomized
        .filter((o) => o.kind !== 'Namespace')
        .map(keyOf)
        .sort(),
    );
    const expectedByKey = new Map(kustomized.map((o) => [keyOf(o), o]));
    for (const [key, o] of installed) {
      if (!/^(Cluster)?Role(Binding)?$|^ConfigMap$/.test(o.kind)) continue;
      expect(essence(o), key).toEqual(essence(expectedByKey.get(key)!));
    }
    await kubectl(['get', 'namespace', NS]);
    const helmCanI = await canI();
    // The answers are the rules': the worker lists proxies everywhere, the gateway writes nothing.
    expect(helmCanI[`worker in elsewhere`]).toMatch(
      /^proxies\.crawl\.example\.com\s+\[\]\s+\[\]\s+\[get list patch create delete\]$/m,
    );
    expect(helmCanI[`gateway in ${NS}`]).toMatch(/^secrets\s+\[\]\s+\[\]\s+\[list watch\]$/m);
    expect(helmCanI[`gateway in ${NS}`]).not.toMatch(/^(proxies|secrets|pods)\S*\s.*(create|patch|delete)/m);

    // Upgrade with a new image tag: the four Deployments change (and roll: a new generation), nothing else.
    await helmOk([
      'upgrade',
      RELEASE,
      CHART,
      '--namespace',
      NS,
      '--reuse-values',
      '--set',
      'image.tag=0.2.0',
    ]);
    const upgraded = await snapshot(manifest);
    expect([...upgraded.keys()].sort()).toEqual([...installed.keys()].sort());
    const changed = [...upgraded]
      .filter(([key, o]) => o.metadata.resourceVersion !== installed.get(key)!.metadata.resourceVersion)
      .map(([key]) => key)
      .sort();
    expect(changed).toEqual(PROCESSES.map((p) => `Deployment/${NS}/egress-proxies-${p}`).sort());
    for (const key of changed) {
      const before = installed.get(key)!;
      const after = upgraded.get(key)!;
      expect(after.metadata.generation).toBe(before.metadata.generation! + 1);
      expect(JSON.stringify(after)).toContain('"image":"registry.mycompany.internal/egress-proxies:0.2.0"');
    }
    expect(
      (await kubectl(['get', 'secret', '-n', NS, '-l', `owner=helm,name=${RELEASE}`, '-o', 'name']))
        .trim()
        .split('\n'),
    ).toEqual([`secret/sh.helm.release.v1.${RELEASE}.v1`, `secret/sh.helm.release.v1.${RELEASE}.v2`]);

    // Uninstall: only the CRDs stay (Helm never deletes crds/), and the namespace --create-namespace made.
    await helmOk(['uninstall', RELEASE, '--namespace', NS]);
    await eventually(
      'the release objects gone',
      async () => ((await labelled()).length === 0 ? true : undefined),
      {
        timeoutMs: 30_000,
        intervalMs: 200,
      },
    ).catch(() => undefined);
    expect(await labelled()).toEqual([]);
    const left = await snapshot(manifest);
    expect([...left.keys()].sort()).toEqual(CRDS.map((c) => `CustomResourceDefinition//${c}`).sort());
    for (const [key, crd] of left) {
      expect(crd.metadata.resourceVersion, key).toBe(installed.get(key)!.metadata.resourceVersion);
    }
    expect((await kubectl(['get', 'secret', '-n', NS, '-l', `owner=helm`, '-o', 'name'])).trim()).toBe('');

    // The kustomize install gives the same can-i answers (the CRDs are already there; the namespace too).
    const kustomizeFile = join(dir, 'kustomize-cluster-wide.yaml');
    writeFileSync(kustomizeFile, kustomized.map((o) => stringify(o)).join('---\n'));
    await kubectl(['apply', '--server-side', '--force-conflicts', '-f', kustomizeFile]);
    await canIEquals(helmCanI, 'the kustomize install’s can-i answers');
    const withoutNamespace = join(dir, 'kustomize-cluster-wide-objects.yaml');
    writeFileSync(
      withoutNamespace,
      kustomized
        .filter((o) => o.kind !== 'Namespace' && o.kind !== 'CustomResourceDefinition')
        .map((o) => stringify(o))
        .join('---\n'),
    );
    await kubectl(['delete', '-f', withoutNamespace, '--wait=false']);
    await eventually(
      'the kustomize objects gone',
      async () => ((await labelled()).length === 0 ? true : undefined),
      {
        timeoutMs: 30_000,
        intervalMs: 200,
      },
    );

    // Namespaced: the chart with the namespaced combination, then the namespaced overlay.
    await helmOk(['install', RELEASE, CHART, '--namespace', NS, '-f', ci('namespaced')]);
    const helmNamespaced = await canI();
    expect(helmNamespaced[`worker in elsewhere`]).not.toMatch(/proxies/);
    expect(helmNamespaced[`worker in team-a`]).toMatch(/^proxies\.crawl\.example\.com\s/m);
    await helmOk(['uninstall', RELEASE, '--namespace', NS]);
    await eventually(
      'the namespaced release gone',
      async () => ((await labelled()).length === 0 ? true : undefined),
      {
        timeoutMs: 30_000,
        intervalMs: 200,
      },
    );
    const namespaced = (await kustomize('namespaced', { resources: ['overlays/namespaced'] })).filter(
      (o) => o.kind !== 'CustomResourceDefinition',
    );
    const namespacedFile = join(dir, 'kustomize-namespaced.yaml');
    writeFileSync(namespacedFile, namespaced.map((o) => stringify(o)).join('---\n'));
    await kubectl(['apply', '--server-side', '--force-conflicts', '-f', namespacedFile]);
    await canIEquals(helmNamespaced, 'the namespaced kustomize install’s can-i answers');
  }, 240_000);
});
