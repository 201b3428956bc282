/**
 * The set-up scripts' bad-input behaviour: a missing tool is one line saying
 * what and how to get it; a half-finished build is detected and never used.
 * In the integration project: it needs Go and flock on the host, which
 * `make test` installs; unit tests need nothing beyond Node.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPTS = fileURLToPath(new URL('../../infra/scripts/', import.meta.url));
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A PATH holding only links to the named tools (and bash). */
function pathWith(tools: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'ep-path-'));
  dirs.push(dir);
  for (const tool of ['bash', 'dirname', 'rm', 'mkdir', 'mktemp', 'cat', 'grep', 'awk', ...tools]) {
    // python3 may be a pyenv shim that needs PATH: link the real interpreter.
    const probe =
      tool === 'python3' ? `python3 -c 'import sys; print(sys.executable)'` : `command -v ${tool}`;
    const which = spawnSync('bash', ['-c', probe], { encoding: 'utf8' }).stdout.trim();
    if (which) writeFileSync(join(dir, tool), `#!/bin/sh\nexec ${which} "$@"\n`, { mode: 0o755 });
  }
  return dir;
}

describe('infra/scripts/check-prereqs.sh', () => {
  it('names each missing tool on its own line with how to get it, and fails', () => {
    const result = spawnSync('bash', [join(SCRIPTS, 'check-prereqs.sh')], {
      encoding: 'utf8',
      env: { PATH: pathWith(['node', 'npm', 'python3', 'flock', 'curl']) },
    });
    expect(result.status).toBe(1);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^missing: go — install Go >= 1\.26/);
  });

  it('names a missing flock (the kube build takes a lock)', () => {
    const result = spawnSync('bash', [join(SCRIPTS, 'check-prereqs.sh')], {
      encoding: 'utf8',
      env: { PATH: pathWith(['node', 'npm', 'python3', 'go', 'curl']) },
    });
    expect(result.status).toBe(1);
    expect(result.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^missing: flock — .*util-linux/),
    ]);
  });

  it("rejects a Go older than the pinned Kubernetes' go directive (build-kube.sh's GO_MIN)", () => {
    const pin = /^GO_MIN=([0-9.]+)$/m.exec(readFileSync(join(SCRIPTS, 'build-kube.sh'), 'utf8'))?.[1];
    expect(pin).toBeDefined();
    const path = pathWith(['node', 'npm', 'python3', 'flock', 'curl']);
    const goSays = (version: string) => {
      writeFileSync(join(path, 'go'), `#!/bin/sh\necho ${version}\n`, { mode: 0o755 });
      return spawnSync('bash', [join(SCRIPTS, 'check-prereqs.sh')], {
        encoding: 'utf8',
        env: { PATH: path },
      });
    };
    const old = goSays('go1.22.2');
    expect(old.status).toBe(1);
    expect(old.stderr.trim().split('\n')).toEqual([
      `missing: Go >= ${pin} for Kubernetes v1.36.3 (found go1.22.2) — install a newer Go from go.dev or your distribution's backports`,
    ]);
    const [major, minor] = pin!.split('.').map(Number);
    expect(goSays(`go${major}.${minor! - 1}.99`).status).toBe(1);
    for (const ok of [`go${major}.${minor}.0`, `go${major}.${minor}.8`, `go${major}.${minor! + 1}rc1`]) {
      const result = goSays(ok);
      expect(result.stderr, ok).toBe('');
      expect(result.status, ok).toBe(0);
    }
  });

  it('passes on this machine', () => {
    const result = spawnSync('bash', [join(SCRIPTS, 'check-prereqs.sh')], { encoding: 'utf8' });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });
});

describe('infra/scripts/build-kube.sh', () => {
  it('throws away a half-finished build (no stamp) instead of using it', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const bin = join(cache, 'kube', 'v0.0.1', 'bin');
    mkdirSync(bin, { recursive: true });
    for (const b of ['kube-apiserver', 'etcd', 'kubectl'])
      writeFileSync(join(bin, b), '#!/bin/sh\n', { mode: 0o755 });
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], {
      encoding: 'utf8',
      // GOPROXY=off: the rebuild fails at once and offline, which is enough to
      // show the unstamped binaries were not taken.
      env: { ...process.env, EGRESS_PROXIES_CACHE: cache, K8S_VERSION: '0.0.1', GOPROXY: 'off', GOFLAGS: '' },
    });
    expect(result.status).not.toBe(0);
    expect(result.stdout).not.toContain(bin);
    expect(result.stderr).toMatch(/build-kube: cannot download k8s\.io\/kubernetes@v0\.0\.1/);
    expect(existsSync(join(bin, 'kube-apiserver'))).toBe(false);
  });

  it('reuses a stamped build without touching the network', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const out = join(cache, 'kube', 'v0.0.2');
    mkdirSync(join(out, 'bin'), { recursive: true });
    for (const b of ['kube-apiserver', 'kube-controller-manager', 'etcd', 'kubectl'])
      writeFileSync(join(out, 'bin', b), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(out, '.complete'), 'k8s=v0.0.2\n');
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], {
      encoding: 'utf8',
      env: { ...process.env, EGRESS_PROXIES_CACHE: cache, K8S_VERSION: '0.0.2', GOPROXY: 'off' },
    });
    expect(result.status).toBe(0);
    expect(result.stdout.trim()).toBe(join(out, 'bin'));
  });

  it('adds only kube-controller-manager to a stamped build from before it, keeping the other binaries', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const out = join(cache, 'kube', 'v0.0.3');
    mkdirSync(join(out, 'bin'), { recursive: true });
    for (const b of ['kube-apiserver', 'etcd', 'kubectl'])
      writeFileSync(join(out, 'bin', b), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(out, '.complete'), 'k8s=v0.0.3\n');
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], {
      encoding: 'utf8',
      // GOPROXY=off: the addition fails at once; what matters is what it kept.
      env: { ...process.env, EGRESS_PROXIES_CACHE: cache, K8S_VERSION: '0.0.3', GOPROXY: 'off', GOFLAGS: '' },
    });
    expect(result.stderr).toContain('build-kube: adding kube-controller-manager v0.0.3 to the cached build');
    expect(result.status).not.toBe(0);
    for (const b of ['kube-apiserver', 'etcd', 'kubectl']) expect(existsSync(join(out, 'bin', b))).toBe(true);
    expect(existsSync(join(out, '.complete'))).toBe(true);
  });
  it('with `node`, adds only kubelet and kube-scheduler to a stamped build, keeping the others', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const out = join(cache, 'kube', 'v0.0.4');
    mkdirSync(join(out, 'bin'), { recursive: true });
    const base = ['kube-apiserver', 'kube-controller-manager', 'etcd', 'kubectl'];
    for (const b of base) writeFileSync(join(out, 'bin', b), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(out, '.complete'), 'k8s=v0.0.4\n');
    const env = {
      ...process.env,
      EGRESS_PROXIES_CACHE: cache,
      K8S_VERSION: '0.0.4',
      GOPROXY: 'off',
      GOFLAGS: '',
    };
    // Without `node` the build is complete as it is.
    const plain = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], { encoding: 'utf8', env });
    expect(plain.status).toBe(0);
    expect(plain.stdout.trim()).toBe(join(out, 'bin'));
    const node = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh'), 'node'], { encoding: 'utf8', env });
    expect(node.stderr).toContain('build-kube: adding kubelet and kube-scheduler v0.0.4 to the cached build');
    expect(node.status).not.toBe(0);
    for (const b of base) expect(existsSync(join(out, 'bin', b))).toBe(true);
    expect(existsSync(join(out, '.complete'))).toBe(true);
  });
});

describe('infra/scripts/build-kube.sh, one build at a time', () => {
  /** Fake kube binaries and the stamp: what a finished build leaves. */
  const finishBuild = (out: string, version: string): void => {
    mkdirSync(join(out, 'bin'), { recursive: true });
    for (const b of ['kube-apiserver', 'kube-controller-manager', 'etcd', 'kubectl'])
      writeFileSync(join(out, 'bin', b), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(out, '.complete'), `k8s=v${version}\n`);
  };

  it('waits for a build holding the lock, then reuses its output instead of rebuilding', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    mkdirSync(join(cache, 'kube'), { recursive: true });
    const lock = join(cache, 'kube', 'build.lock');
    const release = join(cache, 'release');
    // The "first build": holds the lock until the test creates `release`.
    const holder = spawn(
      'flock',
      [lock, 'bash', '-c', `echo locked; while [ ! -e '${release}' ]; do sleep 0.05; done`],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const holderExited = new Promise((resolve) => holder.on('exit', resolve));
    let second: ChildProcess | undefined;
    try {
      await new Promise<void>((resolve) => holder.stdout.once('data', () => resolve()));

      // The second caller. GOPROXY=off: were it to build instead of waiting, it would fail at once.
      const proc = spawn('bash', [join(SCRIPTS, 'build-kube.sh')], {
        env: {
          ...process.env,
          EGRESS_PROXIES_CACHE: cache,
          K8S_VERSION: '0.0.5',
          GOPROXY: 'off',
          GOFLAGS: '',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      second = proc;
      let stdout = '';
      let stderr = '';
      proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
      await new Promise<void>((resolve) =>
        proc.stderr.on('data', (d: Buffer) => {
          stderr += d.toString();
          if (stderr.includes('waiting for it')) resolve();
        }),
      );
      expect(stderr).toContain(`build-kube: another build is running (lock ${lock}); waiting for it`);

      // The first build finishes (stamp last) and lets go of the lock.
      const out = join(cache, 'kube', 'v0.0.5');
      finishBuild(out, '0.0.5');
      writeFileSync(release, '');
      expect(await exited).toBe(0);
      expect(stdout.trim()).toBe(join(out, 'bin'));
      expect(stderr).not.toContain('building Kubernetes');
      expect(existsSync(join(out, 'bin', 'kube-apiserver'))).toBe(true);
      await holderExited;
    } finally {
      // Never leave either behind when an expectation failed midway.
      if (second?.exitCode === null) second.kill();
      if (holder.exitCode === null) holder.kill();
    }
  });
});

describe('infra/scripts/build-kube.sh against a fake module proxy', () => {
  /**
   * A GOPROXY directory serving k8s.io/kubernetes at `version` with the given
   * go.mod. Nothing leaves the machine; the module cache is a temporary one.
   */
  function fakeProxy(version: string, gomod: string): { env: NodeJS.ProcessEnv; cache: string } {
    const root = mkdtempSync(join(tmpdir(), 'ep-goproxy-'));
    dirs.push(root);
    const at = join(root, 'proxy', 'k8s.io', 'kubernetes', '@v');
    mkdirSync(at, { recursive: true });
    writeFileSync(join(at, 'list'), `v${version}\n`);
    writeFileSync(
      join(at, `v${version}.info`),
      JSON.stringify({ Version: `v${version}`, Time: '2026-01-01T00:00:00Z' }),
    );
    writeFileSync(join(at, `v${version}.mod`), gomod);
    const zipped = spawnSync(
      'python3',
      [
        '-c',
        'import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], "w") as z: z.writestr(sys.argv[2] + "/go.mod", sys.argv[3])',
        join(at, `v${version}.zip`),
        `k8s.io/kubernetes@v${version}`,
        gomod,
      ],
      { encoding: 'utf8' },
    );
    expect(zipped.stderr).toBe('');
    const cache = join(root, 'cache');
    return {
      cache,
      env: {
        ...process.env,
        EGRESS_PROXIES_CACHE: cache,
        K8S_VERSION: version,
        GOPROXY: `file://${join(root, 'proxy')}`,
        GOSUMDB: 'off',
        GOMODCACHE: join(root, 'modcache'),
        GOTOOLCHAIN: 'local',
        GOFLAGS: '',
      },
    };
  }

  afterEach(() => {
    // The module cache is read-only by design; make it removable.
    for (const d of dirs) spawnSync('chmod', ['-R', 'u+w', d]);
  });

  it('fails clearly when the go.mod pins no etcd version', () => {
    const { env, cache } = fakeProxy('0.0.6', 'module k8s.io/kubernetes\n\ngo 1.20\n');
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], { encoding: 'utf8', env });
    expect(result.stderr).toContain(
      "build-kube: k8s.io/kubernetes@v0.0.6's go.mod pins no go.etcd.io/etcd/server/v3 version; cannot choose an etcd to build",
    );
    expect(result.status).toBe(1);
    expect(result.stdout).toBe('');
    expect(existsSync(join(cache, 'kube', 'v0.0.6', '.complete'))).toBe(false);
  });

  it("fails clearly when the local Go is older than the go.mod's go directive", () => {
    const { env } = fakeProxy(
      '0.0.7',
      'module k8s.io/kubernetes\n\ngo 1.99.0\n\nrequire go.etcd.io/etcd/server/v3 v3.6.8\n',
    );
    const goVersion = spawnSync('go', ['env', 'GOVERSION'], { encoding: 'utf8', env }).stdout.trim();
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], { encoding: 'utf8', env });
    expect(result.stderr.trim().split('\n').at(-1)).toBe(
      `build-kube: k8s.io/kubernetes@v0.0.7 needs Go >= 1.99.0 (its go.mod); found ${goVersion}`,
    );
    expect(result.status).toBe(1);
  });
});

describe('infra/scripts/build-helm.sh', () => {
  it('names a missing go on one line, with how to get it', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const result = spawnSync('bash', [join(SCRIPTS, 'build-helm.sh')], {
      encoding: 'utf8',
      env: { PATH: pathWith(['flock', 'python3']), EGRESS_PROXIES_CACHE: cache },
    });
    expect(result.status).toBe(1);
    expect(result.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^build-helm: 'go' is not on PATH; install Go >= 1\.26/),
    ]);
  });

  it('a version the module proxy cannot give fails on one line naming it, leaving no binary', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const result = spawnSync('bash', [join(SCRIPTS, 'build-helm.sh')], {
      encoding: 'utf8',
      // GOPROXY=off: fails at once and offline.
      env: {
        ...process.env,
        EGRESS_PROXIES_CACHE: cache,
        HELM_VERSION: '0.0.1',
        GOPROXY: 'off',
        GOFLAGS: '',
      },
    });
    expect(result.status).not.toBe(0);
    expect(result.stderr).toMatch(/build-helm: cannot download helm\.sh\/helm\/v4@v0\.0\.1/);
    expect(existsSync(join(cache, 'helm', 'v0.0.1', 'bin', 'helm'))).toBe(false);
  });

  it('reuses a built helm without touching the network', () => {
    const cache = mkdtempSync(join(tmpdir(), 'ep-cache-'));
    dirs.push(cache);
    const bin = join(cache, 'helm', 'v0.0.2', 'bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, 'helm'), '#!/bin/sh\n', { mode: 0o755 });
    const result = spawnSync('bash', [join(SCRIPTS, 'build-helm.sh')], {
      encoding: 'utf8',
      env: { ...process.env, EGRESS_PROXIES_CACHE: cache, HELM_VERSION: '0.0.2', GOPROXY: 'off' },
    });
    expect(result.status).toBe(0);
    expect(result.stdout.trim()).toBe(join(bin, 'helm'));
  });
});

describe('infra/scripts/lib/apt-mirror.sh', () => {
  /** A sources.list and a sources.list.d with these files, and an APT_CONFIG pointing apt at them. */
  function aptSources(list: string, parts: Record<string, string>): NodeJS.ProcessEnv {
    const root = mkdtempSync(join(tmpdir(), 'ep-apt-'));
    dirs.push(root);
    mkdirSync(join(root, 'sources.list.d'));
    writeFileSync(join(root, 'sources.list'), list);
    for (const [name, text] of Object.entries(parts)) writeFileSync(join(root, 'sources.list.d', name), text);
    writeFileSync(
      join(root, 'apt.conf'),
      `Dir::Etc::sourcelist "${join(root, 'sources.list')}";\nDir::Etc::sourceparts "${join(root, 'sources.list.d')}";\n`,
    );
    return { ...process.env, APT_CONFIG: join(root, 'apt.conf'), TEST_MIRROR: '' };
  }
  /** apt_mirror SUITE TEST_MIRROR, its messages through a `say` like the build scripts'. */
  const mirror = (suite: string, env: NodeJS.ProcessEnv) =>
    spawnSync(
      'bash',
      [
        '-c',
        `say() { echo "build-x: $*" >&2; }; source '${join(SCRIPTS, 'lib', 'apt-mirror.sh')}'; apt_mirror "$1" TEST_MIRROR`,
        'apt-mirror-test',
        suite,
      ],
      { encoding: 'utf8', env },
    );

  const debian = [
    'Types: deb deb-src',
    '# http://snapshot.debian.org/archive/debian/20250520T000000Z',
    'URIs: http://mirror.example/debian/',
    'Suites: bookworm',
    '  bookworm-updates',
    'Components: main contrib',
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg',
    '',
    'types: deb',
    'uris: http://mirror.example/debian-security',
    'suites: bookworm-security',
    'components: main',
    '',
  ].join('\n');
  const env = () =>
    aptSources(
      [
        '# deb http://commented.example/debian bookworm main',
        'deb-src http://source-only.example/debian bookworm main',
        'deb [arch=amd64 signed-by=/etc/apt/keyrings/x.gpg] http://no-main.example/debian bookworm contrib',
        '',
      ].join('\n'),
      {
        'a-nodesource.sources':
          'Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n',
        'b-off.sources':
          'Enabled: no\nTypes: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nComponents: main\n',
        'c-debian.sources': debian,
        'd-later.list': 'deb http://later.example/debian bookworm main\n',
        'a-ignored.list.disabled': 'deb http://ignored.example/debian bookworm main\n',
      },
    );

  it("takes the first enabled deb entry with the suite and main, in apt's order, from deb822 files", () => {
    const e = env();
    for (const [suite, want] of [
      ['bookworm', 'http://mirror.example/debian'],
      ['bookworm-updates', 'http://mirror.example/debian'],
      ['bookworm-security', 'http://mirror.example/debian-security'],
    ] as const) {
      const result = mirror(suite, e);
      expect(result.stderr, suite).toBe('');
      expect(result.status, suite).toBe(0);
      expect(result.stdout, suite).toBe(`${want}\n`);
    }
  });

  it('reads one-line entries (options in brackets) and the .list and .sources files in name order', () => {
    const result = mirror(
      'bookworm',
      aptSources('', {
        'a-local.list':
          '# a mirror of our own\ndeb [ arch=amd64 trusted=yes ] https://local.example/debian bookworm main # pinned\n',
        'b-debian.sources': debian,
      }),
    );
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe('https://local.example/debian\n');
    const fromList = mirror('bookworm', aptSources('deb http://list.example/debian/ bookworm main\n', {}));
    expect(fromList.stdout).toBe('http://list.example/debian\n');
  });

  it('lets the variable override the machine', () => {
    const result = mirror('bookworm', { ...env(), TEST_MIRROR: 'https://override.example/debian/' });
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe('https://override.example/debian\n');
  });

  it('fails with one line saying what it looked for and which variable to set', () => {
    const e = env();
    const result = mirror('trixie', e);
    expect(result.status).toBe(1);
    expect(result.stdout).toBe('');
    const root = e.APT_CONFIG!.replace(/\/apt\.conf$/, '');
    expect(result.stderr.trim().split('\n')).toEqual([
      `build-x: no Debian mirror for trixie (an enabled deb entry with component main) in ${root}/sources.list or ${root}/sources.list.d/*.list, *.sources; set TEST_MIRROR to the mirror's URL (the directory holding dists/)`,
    ]);
  });

  it("finds this machine's mirror for the suite the images are built from", () => {
    const result = mirror('bookworm', { ...process.env, TEST_MIRROR: '' });
    expect(result.stderr).toBe('');
    expect(result.stdout).toMatch(/^\S+:\/\/\S+\n$/);
  });
});
