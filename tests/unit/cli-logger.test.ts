import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** What a process using createLogger prints, as a real child (the logger writes to its stdout). */
async function printed(pretty: boolean): Promise<string> {
  const script = `const { createLogger } = await import('./cli/logger.ts');
createLogger('info', undefined, { pretty: ${pretty} }).info({ token: 'very-secret', proxies: 3 }, 'dev is running');`;
  const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  });
  return stdout;
}

describe('createLogger', () => {
  it('pretty: one human-readable line per entry (what `dev` prints on a terminal), secrets still redacted', async () => {
    const out = await printed(true);
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(egress-proxies\): dev is running\n/);
    expect(out).toContain('proxies: 3');
    expect(out).toContain('token: "[redacted]"');
    expect(out).not.toContain('very-secret');
    expect(() => JSON.parse(out.split('\n')[0]!) as unknown).toThrow();
  }, 30_000);

  it('default: JSON, one object a line', async () => {
    const out = await printed(false);
    const entry = JSON.parse(out.trim()) as Record<string, unknown>;
    expect(entry).toMatchObject({ msg: 'dev is running', proxies: 3, token: '[redacted]', level: 30 });
  }, 30_000);
});
