/**
 * An HTTP relay in front of moto's EC2 server: the provider's `endpoint`
 * points here, and every request goes on to moto unchanged (moto does not
 * check signatures, so the Host the SDK signed for may differ). A test can
 * hold requests (a backend that hangs) or answer one itself with an error
 * written as EC2 writes its errors (docs/providers/aws.md): XML
 * `Response/Errors/Error/Code` with `RequestID`, and the
 * `X-Amzn-Requestid` header the SDK reads the request id from.
 *
 * This is the start of issue 59's relay: ClientToken emulation, a pending
 * phase and the eventual-consistency NotFound are later slices.
 */
import { randomUUID } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What a rule sees of a request: the EC2 action and the whole form body. */
export interface RelayedRequest {
  action: string;
  body: string;
}

export interface InjectedError {
  status: number;
  code: string;
  message: string;
}

type Rule =
  | { kind: 'hold'; match: (r: RelayedRequest) => boolean; released: Promise<void>; release: () => void }
  | { kind: 'error'; match: (r: RelayedRequest) => boolean; error: InjectedError; times: number }
  | { kind: 'rewrite'; match: (r: RelayedRequest) => boolean; rewrite: (body: string) => string };

/** EC2's error body for `error` (the shape of AWS's documented example, RequestID spelled as EC2 does). */
export function ec2ErrorXml(error: InjectedError, requestId: string): string {
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${esc(error.code)}</Code><Message>${esc(error.message)}</Message></Error></Errors><RequestID>${requestId}</RequestID></Response>`;
}

export class Ec2Relay {
  private rules: Rule[] = [];
  /** Every action relayed or answered, in order (the test's evidence of what the provider sent). */
  readonly seen: RelayedRequest[] = [];

  private constructor(
    private readonly server: Server,
    private readonly target: URL,
  ) {}

  static async start(target: string): Promise<Ec2Relay> {
    const server = createServer();
    const relay = new Ec2Relay(server, new URL(target));
    server.on('request', (req, res) => void relay.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return relay;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Holds every matching request until the returned function is called (then they go on to moto). */
  hold(match: (r: RelayedRequest) => boolean): () => void {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const rule: Rule = { kind: 'hold', match, released, release };
    this.rules.push(rule);
    return () => {
      this.rules = this.rules.filter((r) => r !== rule);
      release();
    };
  }

  /** Answers the next `times` matching requests with `error` instead of relaying them. */
  failNext(match: (r: RelayedRequest) => boolean, error: InjectedError, times = 1): void {
    this.rules.push({ kind: 'error', match, error, times });
  }

  /**
   * Relays matching requests and rewrites moto's answer with `rewrite`
   * (EC2 behaviour moto lacks: an instance still shutting-down after
   * TerminateInstances). Returns the function that stops it.
   */
  rewriteAnswers(match: (r: RelayedRequest) => boolean, rewrite: (body: string) => string): () => void {
    const rule: Rule = { kind: 'rewrite', match, rewrite };
    this.rules.push(rule);
    return () => {
      this.rules = this.rules.filter((r) => r !== rule);
    };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const text = body.toString('utf8');
    const action = new URLSearchParams(text).get('Action') ?? '';
    const seen = { action, body: text };
    this.seen.push(seen);
    let rewrite: ((body: string) => string) | undefined;
    for (const rule of [...this.rules]) {
      if (!rule.match(seen)) continue;
      if (rule.kind === 'rewrite') {
        rewrite ??= rule.rewrite;
        continue;
      }
      if (rule.kind === 'hold') {
        await rule.released;
        break;
      }
      if (--rule.times <= 0) this.rules = this.rules.filter((r) => r !== rule);
      const requestId = randomUUID();
      res.writeHead(rule.error.status, {
        'Content-Type': 'text/xml;charset=UTF-8',
        Server: 'AmazonEC2',
        'X-Amzn-Requestid': requestId,
        'Cache-Control': 'no-cache, no-store',
      });
      res.end(ec2ErrorXml(rule.error, requestId));
      return;
    }
    const upstream = request(
      {
        host: this.target.hostname,
        port: this.target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: this.target.host, 'content-length': String(body.length) },
      },
      (answer) => {
        if (rewrite === undefined) {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
          return;
        }
        const parts: Buffer[] = [];
        answer.on('data', (d: Buffer) => parts.push(d));
        answer.once('end', () => {
          const out = Buffer.from(rewrite(Buffer.concat(parts).toString('utf8')), 'utf8');
          const headers = { ...answer.headers, 'content-length': String(out.length) };
          delete headers['transfer-encoding'];
          res.writeHead(answer.statusCode ?? 502, headers);
          res.end(out);
        });
      },
    );
    upstream.once('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    upstream.end(body);
  }

  async close(): Promise<void> {
    // Held requests go on (and fail on the closed connections) rather than wait forever.
    for (const rule of this.rules) if (rule.kind === 'hold') rule.release();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
