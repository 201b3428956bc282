/**
 * Per-provider credentials (issue 26, item 6): two gcp entries in one
 * process run as two identities. The real google-auth-library obtains
 * every token from the loopback token sources (tests/helpers/gcp-token-source.ts):
 * entry A from its own key file (an `external_account` credential whose
 * token exchange is our STS endpoint), entry B by impersonating a service
 * account through Application Default Credentials (our metadata server is
 * ADC's source; our IAM Credentials endpoint mints B's token). The TLS
 * Compute fake accepts both tokens and records which one each request
 * carried. Nothing reaches a Google endpoint.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderError } from '../../providers/errors.js';
import { gcpConfigSchema, type GcpConfig } from '../../providers/gcp/config.js';
import { createGcpProvider, type GcpProvider } from '../../providers/gcp/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { CreateRequest } from '../../providers/types.js';
import { FakeCompute } from '../helpers/gcp-fake.js';
import { FakeTokenSource } from '../helpers/gcp-token-source.js';

const ZONE = 'europe-west1-b';
const SA_B = 'proxies-b@other-project.iam.gserviceaccount.com';
const SA_DENIED = 'not-allowed@other-project.iam.gserviceaccount.com';
const live = () => new AbortController().signal;

function request(): CreateRequest {
  const uid = randomUUID();
  return {
    name: instanceNameFromUid(uid),
    uid,
    namespace: 'ns',
    proxyName: 'px',
    placement: {
      zone: ZONE,
      machineType: 'e2-micro',
      image: 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64',
    },
    port: 3128,
    installation: 'creds',
  };
}

async function rejectionOf(p: Promise<unknown>): Promise<ProviderError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return err as ProviderError;
  }
  throw new Error('expected a rejection, got a value');
}

describe('gcp: each provider entry may run as its own identity', () => {
  let fake: FakeCompute;
  let tokens: FakeTokenSource;
  const dir = mkdtempSync(join(tmpdir(), 'ep-gcp-ids-'));
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (l: string) => void lines.push(l) });
  const providers: GcpProvider[] = [];
  const adcToken = `adc-source-${randomUUID()}`;
  const tokenA = `token-a-${randomUUID()}`;
  const tokenB = `token-b-${randomUUID()}`;
  const saved = {
    GCE_METADATA_HOST: process.env.GCE_METADATA_HOST,
    METADATA_SERVER_DETECTION: process.env.METADATA_SERVER_DETECTION,
    GOOGLE_APPLICATION_CREDENTIALS: process.env.GOOGLE_APPLICATION_CREDENTIALS,
  };
  let keyFileA: string;

  const entry = (name: string, credentials: GcpConfig['credentials']): GcpProvider => {
    const p = createGcpProvider({
      name,
      config: gcpConfigSchema.parse({ project: fake.project, ...fake.connection, credentials }),
      logger,
      insertWaitMs: 5_000,
    });
    providers.push(p);
    return p;
  };

  beforeAll(async () => {
    fake = await FakeCompute.start('ids-project');
    fake.otherTokens.add(`Bearer ${tokenA}`).add(`Bearer ${tokenB}`);
    tokens = await FakeTokenSource.start(adcToken);
    tokens.sts = {
      status: 200,
      body: {
        access_token: tokenA,
        issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
        token_type: 'Bearer',
        expires_in: 3600,
      },
    };
    tokens.impersonation.set(SA_B, tokenB);
    tokens.impersonators.add(adcToken);
    // ADC is the node's metadata server: ours, on the loopback (the detection
    // probe is skipped: the library takes it as present).
    process.env.GCE_METADATA_HOST = tokens.host;
    process.env.METADATA_SERVER_DETECTION = 'assume-present';
    delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
    const subject = join(dir, 'subject-token');
    writeFileSync(subject, 'a-subject-token');
    keyFileA = join(dir, 'entry-a.json');
    writeFileSync(keyFileA, JSON.stringify(tokens.externalAccount(subject)));
  });
  afterAll(async () => {
    await Promise.allSettled(providers.map((p) => p.close()));
    await fake?.stop();
    await tokens?.stop();
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('entry A uses its key file, entry B impersonates a service account through ADC: two identities at Compute', async () => {
    const a = entry('gcp-a', { keyFile: keyFileA });
    const b = entry('gcp-b', { impersonate: SA_B, impersonationEndpoint: tokens.iamEndpoint });
    const [reqA, reqB] = [request(), request()];
    const [idA, idB] = await Promise.all([a.create(reqA, live()), b.create(reqB, live())]);
    const insertOf = (name: string) =>
      fake.requests.find((r) => r.method === 'POST' && (r.body as { name?: string }).name === name)!;
    expect(insertOf(reqA.name).authorization).toBe(`Bearer ${tokenA}`);
    expect(insertOf(reqB.name).authorization).toBe(`Bearer ${tokenB}`);
    // Every Compute request of each entry carried its own token, never the ADC source's.
    const used = new Set(fake.requests.map((r) => r.authorization));
    expect(used).not.toContain(`Bearer ${adcToken}`);
    expect((await a.get(idA, live())).uid).toBe(reqA.uid);
    expect((await b.get(idB, live())).uid).toBe(reqB.uid);
    // B's token was minted for the ADC identity (the metadata server's token), through the IAM endpoint.
    expect(tokens.impersonationCallers.length).toBeGreaterThan(0);
    for (const c of tokens.impersonationCallers) expect(c).toBe(`Bearer ${adcToken}`);
    expect(tokens.hits).toContain('POST /v1/token');
    // The ready lines name each identity.
    const ready = lines
      .filter((l) => l.includes('gcp provider ready'))
      .map((l) => JSON.parse(l) as Record<string, string>);
    expect(ready.find((l) => l.provider === 'gcp-a')?.credentials).toBe(
      `external account credentials (key file ${keyFileA})`,
    );
    expect(ready.find((l) => l.provider === 'gcp-b')?.credentials).toBe(
      `service account ${SA_B} impersonated by the metadata server's service account`,
    );
  });

  it('an impersonation IAM refuses (403) is Permanent for that entry only, naming both identities and the role; nothing reaches Compute', async () => {
    const denied = entry('gcp-denied', { impersonate: SA_DENIED, impersonationEndpoint: tokens.iamEndpoint });
    const fine = entry('gcp-fine', { keyFile: keyFileA });
    const before = fake.requests.length;
    const err = await rejectionOf(denied.listByTag(live()));
    expect(err.errorClass).toBe('Permanent');
    expect(err.message).toContain(
      `the IAM Credentials API refused to let the metadata server's service account impersonate service account ${SA_DENIED} (403): ` +
        `grant it roles/iam.serviceAccountTokenCreator on ${SA_DENIED} (permission iam.serviceAccounts.getAccessToken)`,
    );
    // Composed from identifiers: never IAM's own text.
    expect(err.message).not.toContain('denied on resource');
    const [t] = await denied.check(live());
    expect(t).toMatchObject({ ready: false, reason: 'Forbidden' });
    expect(t!.message).toContain('roles/iam.serviceAccountTokenCreator');
    expect(fake.requests.slice(before).filter((r) => r.authorization !== `Bearer ${tokenA}`)).toEqual([]);
    // The other entry in the same process is unaffected.
    expect(Array.isArray(await fine.listByTag(live()))).toBe(true);
  });

  it('a key file not there yet is Transient naming the file, and picked up once it lands', async () => {
    const later = join(dir, `later-${randomUUID()}.json`);
    const p = entry('gcp-later', { keyFile: later });
    const err = await rejectionOf(p.listByTag(live()));
    expect(err.errorClass).toBe('Transient');
    expect(err.message).toContain(`the credentials key file ${later} cannot be read (ENOENT)`);
    writeFileSync(later, JSON.stringify(tokens.externalAccount(join(dir, 'subject-token'))));
    expect(Array.isArray(await p.listByTag(live()))).toBe(true);
  });

  it('the credentials block is validated', () => {
    expect(() => gcpConfigSchema.parse({ project: 'ids-project', credentials: {} })).toThrow(
      /must name a keyFile, a service account to impersonate, or both/,
    );
    expect(() =>
      gcpConfigSchema.parse({ project: 'ids-project', credentials: { impersonate: 'not-an-email' } }),
    ).toThrow(/must be a service account email/);
  });
});
