/**
 * The seed's router for comparison: tests/helpers/go-servemux/main.go (Go's
 * net/http ServeMux with the seed's lease API patterns behind its token
 * check) built with the local Go toolchain and started on a free loopback
 * port. Go is a prerequisite of the test run (check-prereqs.sh: it builds
 * kube-apiserver), so a missing toolchain fails the test rather than
 * skipping it.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SOURCE = fileURLToPath(new URL('./go-servemux/', import.meta.url));

export interface GoServeMux {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function startGoServeMux(token: string): Promise<GoServeMux> {
  const dir = mkdtempSync(join(tmpdir(), 'ep-go-servemux-'));
  const binary = join(dir, 'servemux');
  try {
    // GOTOOLCHAIN=local: never download another Go; GOFLAGS cleared so a
    // developer's -mod settings cannot change the build.
    await run('nice', ['go', 'build', '-o', binary, '.'], {
      cwd: SOURCE,
      env: { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '' },
      timeout: 300_000,
    });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`building the Go ServeMux reference failed: ${(error as Error).message}`);
  }
  const child = spawn(binary, [token], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.once('exit', (code) => reject(new Error(`Go ServeMux reference exited (${code}): ${out}`)));
  });
  return {
    url,
    port: Number(new URL(url).port),
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
