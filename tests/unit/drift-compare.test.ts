import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { createGcpProvider } from '../../providers/gcp/provider.js';
import {
  findDrift,
  isSteady,
  withIdAliases,
  type RecordedProxy,
} from '../../workflows/drift-sweep/compare.js';

function proxy(name: string, over: Partial<RecordedProxy> = {}): RecordedProxy {
  return {
    ref: { namespace: 'ns', name, uid: `uid-${name}` },
    mode: 'Managed',
    provider: 'local',
    deleting: false,
    providerID: `local/${name}`,
    ip: '127.0.0.5',
    provisioned: { status: 'True', reason: 'Running' },
    ...over,
  };
}

describe('drift sweep rule', () => {
  it('compares only steady Managed Proxies of this provider', () => {
    expect(isSteady(proxy('a'), 'local')).toBe(true);
    expect(isSteady(proxy('a'), 'other')).toBe(false);
    expect(isSteady(proxy('a', { mode: 'External' }), 'local')).toBe(false);
    expect(isSteady(proxy('a', { deleting: true }), 'local')).toBe(false);
    expect(isSteady(proxy('a', { provisioned: { status: 'False', reason: 'Provisioning' } }), 'local')).toBe(
      false,
    );
    expect(isSteady(proxy('a', { provisioned: { status: 'False', reason: 'Replacing' } }), 'local')).toBe(
      false,
    );
    expect(isSteady(proxy('a', { ip: undefined }), 'local')).toBe(false);
    expect(isSteady(proxy('a', { providerID: undefined }), 'local')).toBe(false);
  });

  it('an end the provider announced that the Proxy has not recorded is drift; the same instant spelled otherwise is not', () => {
    const proxies = [
      proxy('unrecorded'),
      proxy('recorded', { expiresAt: '2026-12-06T15:00:00.000Z' }),
      proxy('spelled', { expiresAt: '2026-12-06T15:00:00Z' }),
      proxy('moved-end', { expiresAt: '2026-12-06T15:00:00Z' }),
      proxy('no-end', { expiresAt: '2026-12-06T15:00:00Z' }),
    ];
    const end = '2026-12-06T15:00:00.000Z';
    const { drifted } = findDrift('local', proxies, [
      { id: 'local/unrecorded', state: 'Running', ip: '127.0.0.5', expiresAt: end },
      { id: 'local/recorded', state: 'Running', ip: '127.0.0.5', expiresAt: end },
      { id: 'local/spelled', state: 'Running', ip: '127.0.0.5', expiresAt: end },
      { id: 'local/moved-end', state: 'Running', ip: '127.0.0.5', expiresAt: '2026-12-06T14:59:00.000Z' },
      // No end listed: the recorded one stays until the workflow's own look (a listing may not know it).
      { id: 'local/no-end', state: 'Running', ip: '127.0.0.5' },
    ]);
    expect(drifted.map((d) => [d.ref.name, d.why])).toEqual([
      ['unrecorded', 'expiring'],
      ['moved-end', 'expiring'],
    ]);
    expect(drifted[0]!.report).toEqual({
      instanceId: 'local/unrecorded',
      observed: { found: true, state: 'Running', ip: '127.0.0.5' },
    });
  });

  it('reports only the instances that differ: gone, not running, another address', () => {
    const proxies = [proxy('same'), proxy('gone'), proxy('stopped'), proxy('moved'), proxy('noip')];
    const { compared, drifted } = findDrift('local', proxies, [
      { id: 'local/same', state: 'Running', ip: '127.0.0.5' },
      { id: 'local/stopped', state: 'Stopped' },
      { id: 'local/moved', state: 'Running', ip: '127.0.0.9' },
      { id: 'local/noip', state: 'Running' },
      { id: 'local/unrelated', state: 'Running', ip: '127.0.0.1' },
    ]);
    expect(compared).toBe(5);
    expect(drifted.map((d) => [d.ref.name, d.why])).toEqual([
      ['gone', 'gone'],
      ['stopped', 'not-running'],
      ['moved', 'address-changed'],
      ['noip', 'not-running'],
    ]);
    expect(drifted[0]!.report).toEqual({ instanceId: 'local/gone', observed: { found: false } });
    expect(drifted[2]!.report).toEqual({
      instanceId: 'local/moved',
      observed: { found: true, state: 'Running', ip: '127.0.0.9' },
    });
  });

  it('an unchanged fleet produces no report at all', () => {
    const proxies = Array.from({ length: 1_000 }, (_, i) => proxy(`p${i}`));
    const listed = proxies.map((p) => ({ id: p.providerID!, state: 'Running' as const, ip: '127.0.0.5' }));
    expect(findDrift('local', proxies, listed)).toEqual({ compared: 1_000, drifted: [] });
  });

  it("matches a gcp Proxy recorded with the old providerID form through the provider's aliases", () => {
    // Construction dials nothing; idAliases is pure.
    const gcp = createGcpProvider({
      name: 'gcp-eu',
      config: gcpConfigSchema.parse({ project: 'my-project' }),
      logger: pino({ level: 'silent' }),
    });
    const old = proxy('old', { provider: 'gcp-eu', providerID: 'zones/europe-west1-b/instances/proxy-old' });
    const current = proxy('new', {
      provider: 'gcp-eu',
      providerID: 'projects/my-project/zones/europe-west1-b/instances/proxy-new',
    });
    const listed = [
      {
        id: 'projects/my-project/zones/europe-west1-b/instances/proxy-old',
        state: 'Running' as const,
        ip: '127.0.0.5',
      },
      {
        id: 'projects/my-project/zones/europe-west1-b/instances/proxy-new',
        state: 'Running' as const,
        ip: '127.0.0.5',
      },
    ];
    // Without the aliases the old-form Proxy reads as gone on every sweep.
    expect(
      findDrift('gcp-eu', [old, current], withIdAliases(listed, undefined)).drifted.map((d) => d.why),
    ).toEqual(['gone']);
    expect(
      findDrift(
        'gcp-eu',
        [old, current],
        withIdAliases(listed, (id) => gcp.idAliases(id)),
      ),
    ).toEqual({
      compared: 2,
      drifted: [],
    });
    // A VM of another project has no old-form alias: the old form meant the configured project.
    expect(gcp.idAliases('projects/other-project/zones/europe-west1-b/instances/proxy-x')).toEqual([]);
  });
});
