import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureTemporalCli } from '../../local-servers/tools.js';
import { SEARCH_ATTRIBUTES } from '../../resources/search-attributes.js';
import { temporalClient } from '../helpers/temporal.js';

describe('the Temporal dev server the harness started from the installed CLI', () => {
  it('has every search attribute of ours registered, as Keyword', async () => {
    const { client, connection } = await temporalClient();
    try {
      const response = await client.connection.operatorService.listSearchAttributes({
        namespace: inject('temporalNamespace'),
      });
      const custom = response.customAttributes ?? {};
      for (const name of Object.keys(SEARCH_ATTRIBUTES)) {
        // 2 = INDEXED_VALUE_TYPE_KEYWORD
        expect(custom[name], name).toBe(2);
      }
    } finally {
      await connection.close();
    }
  });

  it('serves the Web UI', async () => {
    const url = inject('temporalUiUrl');
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('<html');
  });
});

describe('startTemporalDevServer', () => {
  it('starts again when the server lost a port race ("address already in use"), and only then', async () => {
    const real = await ensureTemporalCli();
    const dir = mkdtempSync(join(tmpdir(), 'ep-temporal-race-'));
    try {
      // The first start fails as the CLI does when another process took a
      // port it had picked for an internal service; the next runs the real CLI.
      const wrapper = join(dir, 'temporal');
      writeFileSync(
        wrapper,
        `#!/bin/sh\nif [ ! -f "${dir}/lost" ]; then touch "${dir}/lost"; echo 'level=ERROR msg="Failed to start gRPC listener" error="listen tcp 127.0.0.1:1: bind: address already in use"'; exit 2; fi\nexec "${real}" "$@"\n`,
        { mode: 0o755 },
      );
      const server = await startTemporalDevServer({
        cli: wrapper,
        dataDir: join(dir, 'data'),
        headless: true,
      });
      try {
        const connection = await Connection.connect({ address: server.address });
        await connection.workflowService.getSystemInfo({});
        await connection.close();
      } finally {
        await server.stop();
      }
      expect(readFileSync(join(dir, 'data', 'temporal.log'), 'utf8')).toContain('address already in use');

      // Any other early exit is reported at once, not retried.
      const broken = join(dir, 'broken');
      writeFileSync(broken, `#!/bin/sh\necho "$$" >> "${dir}/starts"; echo 'unknown flag'; exit 1\n`, {
        mode: 0o755,
      });
      await expect(
        startTemporalDevServer({ cli: broken, dataDir: join(dir, 'data2'), headless: true }),
      ).rejects.toThrow(/process exited with code 1 before it was ready/);
      expect(readFileSync(join(dir, 'starts'), 'utf8').trim().split('\n')).toHaveLength(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
