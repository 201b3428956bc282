/**
 * The gateway's Deployments start Node with GATEWAY_NODE_FLAGS (what
 * `npm run bench:gateway` measures) through the image's own entry point,
 * and this Node accepts them: an unknown flag would stop the pod at start.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { GATEWAY_NODE_FLAGS } from '../../gateway/node-flags.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

/** The image's ENTRYPOINT, e.g. ["node", "/app/bin/egress-proxies.js"]. */
function entrypoint(): string[] {
  const line = /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(`${ROOT}Dockerfile`, 'utf8'))?.[1];
  expect(line, 'the Dockerfile has an exec-form ENTRYPOINT').toBeDefined();
  return JSON.parse(line!) as string[];
}

function gatewayContainer(yamlText: string): { command?: string[]; args?: string[] } {
  for (const doc of parseAllDocuments(yamlText)) {
    const object = doc.toJS() as {
      kind?: string;
      spec?: {
        template?: { spec?: { containers?: Array<{ name: string; command?: string[]; args?: string[] }> } };
      };
    } | null;
    const container = object?.spec?.template?.spec?.containers?.find((c) => c.name === 'gateway');
    if (object?.kind === 'Deployment' && container) return container;
  }
  throw new Error('no Deployment with a gateway container');
}

describe('the gateway’s Node flags', () => {
  it('the kustomize Deployment runs the image’s entry point with them', () => {
    const [node, script] = entrypoint();
    const container = gatewayContainer(readFileSync(`${ROOT}infra/k8s/base/gateway.yaml`, 'utf8'));
    expect(container.command).toEqual([node, ...GATEWAY_NODE_FLAGS, script]);
    expect(container.args?.[0]).toBe('gateway');
  });

  it('the Helm chart’s gateway Deployment carries the same command line', () => {
    const [node, script] = entrypoint();
    const template = readFileSync(`${ROOT}infra/helm/egress-proxies/templates/gateway.yaml`, 'utf8');
    const command = /^\s+command: (\[.*\])$/m.exec(template)?.[1];
    expect(command).toBe(`[${[node, ...GATEWAY_NODE_FLAGS, script].join(', ')}]`);
  });

  it('this Node accepts them (an unknown one exits with "bad option")', async () => {
    const { stdout } = await run(process.execPath, [...GATEWAY_NODE_FLAGS, '-e', 'console.log("started")']);
    expect(stdout.trim()).toBe('started');
    await expect(run(process.execPath, ['--single-threaded-gc-no-such-flag', '-e', '0'])).rejects.toThrow(
      /bad option/,
    );
  });
});
