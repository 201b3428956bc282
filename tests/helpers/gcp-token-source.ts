/**
 * Token sources for google-auth-library on the loopback, so a test can make
 * the real library fail to obtain a token the way it does in production,
 * without a mock of our code and without anything leaving the machine:
 *
 * - a GCE metadata server (`GET /computeMetadata/v1/instance/service-accounts/default/token`,
 *   `Metadata-Flavor: Google` required), reached by the library's `Compute`
 *   credential when `GCE_METADATA_HOST` names this server: it serves the
 *   given token (with a 1 s lifetime, so the library fetches again before
 *   every request) or, when told, answers 404 as a metadata server with no
 *   service account for the node does;
 * - an OAuth/STS token endpoint (`POST /v1/token`) for an `external_account`
 *   credential whose `token_url` points here: it answers 400 `invalid_grant`
 *   (a refused credential), or whatever `sts` is set to.
 *
 * - an IAM Credentials endpoint (`POST /v1/projects/-/serviceAccounts/<email>:generateAccessToken`)
 *   for the library's `Impersonated` credential: it mints `impersonation[email]`
 *   for a caller whose bearer token is in `impersonators`, and answers 403
 *   PERMISSION_DENIED otherwise (the caller lacks Service Account Token Creator).
 *
 * (A service-account key's `token_uri` cannot be pointed here: the library's
 * JWT path always posts to oauth2.googleapis.com.)
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface TokenAnswer {
  status: number;
  body: unknown;
}

export class FakeTokenSource {
  /** What the metadata token path answers: the token, or an error answer. */
  metadata: { token: string } | TokenAnswer;
  /** What the STS token path answers. */
  sts: TokenAnswer = {
    status: 400,
    body: { error: 'invalid_grant', error_description: 'sentinel-token-endpoint-text' },
  };
  /** Paths requested, in order. */
  readonly hits: string[] = [];
  /** The token generateAccessToken mints for each service account email. */
  readonly impersonation = new Map<string, string>();
  /** Bearer tokens allowed to impersonate (the source identity's). */
  readonly impersonators = new Set<string>();
  /** The Authorization header of each generateAccessToken call, in order. */
  readonly impersonationCallers: string[] = [];

  private readonly server: Server;

  private constructor(token: string) {
    this.metadata = { token };
    this.server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0]!;
      this.hits.push(`${req.method} ${path}`);
      const send = (a: TokenAnswer, extra: Record<string, string> = {}) => {
        res.statusCode = a.status;
        res.setHeader('content-type', typeof a.body === 'string' ? 'text/plain' : 'application/json');
        for (const [k, v] of Object.entries(extra)) res.setHeader(k, v);
        res.end(typeof a.body === 'string' ? a.body : JSON.stringify(a.body));
      };
      req.resume();
      req.on('end', () => {
        if (path.startsWith('/computeMetadata/')) {
          const flavor = { 'Metadata-Flavor': 'Google' };
          if (req.headers['metadata-flavor'] !== 'Google')
            return send({ status: 403, body: 'missing flavor' }, flavor);
          if (path !== '/computeMetadata/v1/instance/service-accounts/default/token') {
            return send({ status: 404, body: 'not found' }, flavor);
          }
          const m = this.metadata;
          if ('token' in m) {
            return send(
              { status: 200, body: { access_token: m.token, expires_in: 1, token_type: 'Bearer' } },
              flavor,
            );
          }
          return send(m, flavor);
        }
        if (path === '/v1/token' && req.method === 'POST') return send(this.sts);
        const iam = /^\/v1\/projects\/-\/serviceAccounts\/([^/:]+):generateAccessToken$/.exec(path);
        if (iam !== null && req.method === 'POST') {
          const caller = req.headers.authorization ?? '';
          this.impersonationCallers.push(caller);
          const token = this.impersonation.get(decodeURIComponent(iam[1]!));
          if (token === undefined || !this.impersonators.has(caller.replace(/^Bearer /, ''))) {
            return send({
              status: 403,
              body: {
                error: {
                  code: 403,
                  message:
                    "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
                  status: 'PERMISSION_DENIED',
                },
              },
            });
          }
          return send({
            status: 200,
            body: { accessToken: token, expireTime: new Date(Date.now() + 3_600_000).toISOString() },
          });
        }
        send({ status: 404, body: 'not found' });
      });
    });
  }

  static async start(token: string): Promise<FakeTokenSource> {
    const self = new FakeTokenSource(token);
    await new Promise<void>((resolve) => self.server.listen(0, '127.0.0.1', resolve));
    return self;
  }

  /** host:port, the value for GCE_METADATA_HOST. */
  get host(): string {
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** The base URL for `Impersonated`'s `endpoint` (the IAM Credentials API). */
  get iamEndpoint(): string {
    return `http://${this.host}`;
  }

  /** An external_account credential (workload identity federation) whose token exchange comes here. */
  externalAccount(subjectTokenFile: string): Record<string, unknown> {
    return {
      type: 'external_account',
      audience: '//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/test',
      subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
      token_url: `http://${this.host}/v1/token`,
      credential_source: { file: subjectTokenFile },
    };
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
