/**
 * The set-up scripts' bad-input behaviour: a missing tool is one line saying
 * what and how to get it; a half-finished build is detected and never used.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
      env: { PATH: pathWith(['node', 'npm', 'python3']) },
    });
    expect(result.status).toBe(1);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^missing: go — install Go >= 1\.26/);
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
    for (const b of ['kube-apiserver', 'etcd', 'kubectl'])
      writeFileSync(join(out, 'bin', b), '#!/bin/sh\n', { mode: 0o755 });
    writeFileSync(join(out, '.complete'), 'k8s=v0.0.2\n');
    const result = spawnSync('bash', [join(SCRIPTS, 'build-kube.sh')], {
      encoding: 'utf8',
      env: { ...process.env, EGRESS_PROXIES_CACHE: cache, K8S_VERSION: '0.0.2', GOPROXY: 'off' },
    });
    expect(result.status).toBe(0);
    expect(result.stdout.trim()).toBe(join(out, 'bin'));
  });
});
