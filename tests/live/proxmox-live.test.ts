/**
 * Live test of the proxmox provider against a real Proxmox VE cluster (issue
 * 34): what a user runs to verify a cluster, its token and its template, and
 * what turns docs/providers/proxmox.md from "unverified" into verified. Run by
 * hand, never by `make test`:
 *
 *   PROXMOX_URL=https://pve1.lan:8006 PROXMOX_TOKEN_ID='egress@pve!proxies' \
 *   PROXMOX_TOKEN_SECRET_FILE=./token PROXMOX_CA_FILE=./pve-root-ca.pem \
 *   PROXMOX_NODE=pve1 PROXMOX_TEMPLATE=9000 npm run test:proxmox-live
 *
 * Optional: PROXMOX_ISO_STORAGE (default local), PROXMOX_FINGERPRINT (the
 * SHA-256 pin), PROXMOX_POOL, PROXMOX_VMID_MIN / PROXMOX_VMID_MAX (default
 * 100000-199999), PROXMOX_RUNNING_TIMEOUT_SECONDS (default 600: boot, agent).
 *
 * Steps: check() all ready; create; create again (same ID, one VM); get until
 * Running with an IP (the template's guest agent); listByTag finds it with
 * its UID; delete; delete again; get is NotFound; listByTag no longer finds
 * it. The VM is deleted in afterAll whatever happened.
 */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { classOf } from '../../providers/errors.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { proxmoxConfigSchema } from '../../providers/proxmox/config.js';
import { createProxmoxProvider } from '../../providers/proxmox/provider.js';
import type { CreateRequest, Instance } from '../../providers/types.js';

const env = process.env;
const URL_ = env.PROXMOX_URL;
if (!URL_) {
  console.log(
    'proxmox-live: skipped: PROXMOX_URL is not set (see the header of tests/live/proxmox-live.test.ts for the variables)',
  );
}

function live(): AbortSignal {
  return new AbortController().signal;
}

describe.skipIf(!URL_)('proxmox provider against a real cluster', () => {
  const required = (name: string): string => {
    const v = env[name];
    if (!v) throw new Error(`${name} is required with PROXMOX_URL`);
    return v;
  };
  const node = env.PROXMOX_NODE ?? 'pve1';
  const provider = URL_
    ? createProxmoxProvider({
        name: 'proxmox-live',
        logger: pino({ level: env.EP_TEST_LOG_LEVEL ?? 'info' }),
        config: proxmoxConfigSchema.parse({
          url: URL_,
          tokenId: required('PROXMOX_TOKEN_ID'),
          tokenSecretFile: required('PROXMOX_TOKEN_SECRET_FILE'),
          caFile: required('PROXMOX_CA_FILE'),
          ...(env.PROXMOX_FINGERPRINT ? { fingerprint: env.PROXMOX_FINGERPRINT } : {}),
          ...(env.PROXMOX_POOL ? { pool: env.PROXMOX_POOL } : {}),
          vmidRange: {
            min: Number(env.PROXMOX_VMID_MIN ?? 100_000),
            max: Number(env.PROXMOX_VMID_MAX ?? 199_999),
          },
          machineTypes: { small: { cores: 1, memoryMiB: 1024 } },
          nodes: [
            {
              name: node,
              templates: { live: Number(required('PROXMOX_TEMPLATE')) },
              isoStorage: env.PROXMOX_ISO_STORAGE ?? 'local',
            },
          ],
          taskPollMillis: 1000,
        }),
      })
    : undefined!;
  const uid = randomUUID();
  const req: CreateRequest = {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'live',
    proxyName: 'proxmox-live',
    placement: { zone: node },
    cloudInit:
      '#cloud-config\npackages: [qemu-guest-agent]\nruncmd: [[systemctl, enable, --now, qemu-guest-agent]]\n',
    port: 3128,
    installation: 'proxmox-live',
  };
  let id: string | undefined;

  afterAll(async () => {
    if (id !== undefined) await provider.delete(id, live()).catch(() => undefined);
    await provider?.close();
  });

  it('check: API, quorum, node and token all ready', async () => {
    const targets = await provider.check(live());
    for (const t of targets)
      console.log(`proxmox-live: check ${t.name}: ${t.ready ? 'ready' : `${t.reason}: ${t.message ?? ''}`}`);
    for (const t of targets) expect([t.name, t.ready]).toEqual([t.name, true]);
  });

  it('create, create again, Running with an IP, listed, delete twice, gone', async () => {
    id = await provider.create(req, live());
    expect(await provider.create(req, live())).toBe(id);
    const deadline = Date.now() + Number(env.PROXMOX_RUNNING_TIMEOUT_SECONDS ?? 600) * 1000;
    let got: Instance | undefined;
    while (Date.now() < deadline) {
      got = await provider.get(id, live());
      if (got.state === 'Running') break;
      expect(got.state).toBe('Provisioning');
      await new Promise((r) => setTimeout(r, 5000));
    }
    expect(got?.state).toBe('Running');
    expect(got?.ip).toBeTruthy();
    expect(got?.uid).toBe(uid);
    console.log(`proxmox-live: ${id} Running at ${got?.ip ?? ''}`);
    const listed = (await provider.listByTag(live())).find((i) => i.id === id);
    expect(listed?.uid).toBe(uid);
    await provider.delete(id, live());
    await provider.delete(id, live());
    expect(classOf(await provider.get(id, live()).catch((e: unknown) => e))).toBe('NotFound');
    expect((await provider.listByTag(live())).map((i) => i.id)).not.toContain(id);
    id = undefined;
  });
});
