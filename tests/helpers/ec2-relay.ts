/**
 * An HTTP relay in front of moto's EC2 server: the provider's `endpoint`
 * points here, and every request goes on to moto unchanged (moto does not
 * check signatures, so the Host the SDK signed for may differ). A test can
 * hold requests (a backend that hangs) or answer one itself with an error
 * written as EC2 writes its errors (docs/providers/aws.md): XML
 * `Response/Errors/Error/Code` with `RequestID`, and the
 * `X-Amzn-Requestid` header the SDK reads the request id from.
 *
 * With `emulate` it also behaves as EC2 does where moto does not (issue 59,
 * item 8; docs/providers/aws.md):
 *
 * - ClientToken: a RunInstances with a token seen before and the same
 *   parameters gets the first call's answer again (no new instance); other
 *   parameters get `IdempotentParameterMismatch`; a token whose instance was
 *   terminated gets `IdempotentInstanceTerminated`.
 * - Eventual consistency: for `invisibleMs` after a launch, DescribeInstances
 *   and TerminateInstances naming the instance answer
 *   `InvalidInstanceID.NotFound`, and filtered listings leave it out.
 * - A pending phase: for `pendingMs` after a launch the instance is
 *   `pending` (state code 0) in DescribeInstances.
 * - Spot: an instance launched with `InstanceMarketOptions.MarketType=spot`
 *   gets a Spot request (`sir-...`, its `spotInstanceRequestId`), which
 *   DescribeSpotInstanceRequests answers (moto keeps none for RunInstances);
 *   `interrupt()` gives EC2's two-minute notice (status
 *   `marked-for-termination`), then terminates the instance in moto and
 *   shows it as EC2 shows an interrupted one (StateReason
 *   `Server.SpotInstanceTermination`).
 * - Addresses: `addresses` names the public address each launched instance
 *   shows (moto's are invented, unreachable; a test puts a real proxy on a
 *   loopback address and hands it out here).
 *
 * And a test can drop an answer after moto has acted on the request (a lost
 * answer: the connection closes with nothing sent).
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

/** EC2 behaviour moto lacks, emulated here; all off unless set. */
export interface Ec2Emulation {
  clientToken?: boolean;
  /** How long a launched instance is invisible (InvalidInstanceID.NotFound, left out of listings). */
  invisibleMs?: number;
  /** How long a launched instance shows as pending. */
  pendingMs?: number;
  /** Spot requests for Spot launches (DescribeSpotInstanceRequests, interruptions). */
  spot?: boolean;
  /** The public address of each instance launched from now on; undefined: moto's. */
  addresses?: () => string | undefined;
  /**
   * The IPv6 address of each instance launched from now on with
   * `Ipv6AddressCount` (moto assigns none): shown as EC2 shows it,
   * `ipv6Address` on the instance.
   */
  ipv6Addresses?: () => string | undefined;
  /**
   * SSM parameters EC2 resolves an `ImageId` of `resolve:ssm:<name>` with
   * (moto does not): the name's AMI is launched; an unknown name is
   * refused with `SsmInvalidParameter` (EC2's code; the message is ours).
   */
  ssmParameters?: Record<string, string>;
}

interface SpotRequest {
  id: string;
  instanceId: string;
  state: 'active' | 'closed';
  code: string;
  updatedAt: Date;
  createdAt: Date;
}

/** What EC2 says of an instance it interrupted. */
const INTERRUPTED_REASON =
  '<stateReason><code>Server.SpotInstanceTermination</code><message>Server.SpotInstanceTermination: Spot instance termination</message></stateReason>';
const EC2_XMLNS = 'http://ec2.amazonaws.com/doc/2016-11-15/';

interface TokenRecord {
  /** The whole form body of the first call: EC2 compares every parameter. */
  body: string;
  answer: string;
  instanceIds: string[];
  terminated: boolean;
}

type Rule =
  | { kind: 'hold'; match: (r: RelayedRequest) => boolean; released: Promise<void>; release: () => void }
  | { kind: 'error'; match: (r: RelayedRequest) => boolean; error: InjectedError; times: number }
  | { kind: 'rewrite'; match: (r: RelayedRequest) => boolean; rewrite: (body: string) => string }
  | { kind: 'drop'; match: (r: RelayedRequest) => boolean; times: number };

/** EC2's error body for `error` (the shape of AWS's documented example, RequestID spelled as EC2 does). */
export function ec2ErrorXml(error: InjectedError, requestId: string): string {
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${esc(error.code)}</Code><Message>${esc(error.message)}</Message></Error></Errors><RequestID>${requestId}</RequestID></Response>`;
}

/** The values of a query-API list parameter (`InstanceId.1`, `InstanceId.2`...). */
function listParam(params: URLSearchParams, name: string): string[] {
  const out: string[] = [];
  for (const [k, v] of params) if (k === name || k.startsWith(`${name}.`)) out.push(v);
  return out;
}

/**
 * The top-level `<item>` spans of the first `<set>` element: a reservation
 * each in a DescribeInstances answer (items nest, so depth is counted).
 */
function topLevelItems(xml: string, set: string): { start: number; end: number }[] {
  const open = xml.indexOf(`<${set}>`);
  const close = xml.indexOf(`</${set}>`);
  if (open < 0 || close < 0) return [];
  const spans: { start: number; end: number }[] = [];
  const tag = /<(\/?)item>/g;
  tag.lastIndex = open;
  let depth = 0;
  let start = -1;
  for (let m = tag.exec(xml); m !== null && m.index < close; m = tag.exec(xml)) {
    if (m[1] === '') {
      if (depth++ === 0) start = m.index;
    } else if (--depth === 0) {
      spans.push({ start, end: m.index + m[0].length });
    }
  }
  return spans;
}

/** A DescribeInstances answer without the reservations holding any of `instanceIds` (gone from listings). */
export function withoutInstances(xml: string, instanceIds: readonly string[]): string {
  let out = xml;
  for (const span of topLevelItems(xml, 'reservationSet').reverse()) {
    const item = out.slice(span.start, span.end);
    if (instanceIds.some((id) => item.includes(`<instanceId>${id}</instanceId>`)))
      out = out.slice(0, span.start) + out.slice(span.end);
  }
  return out;
}

export class Ec2Relay {
  private rules: Rule[] = [];
  private emulation: Ec2Emulation = {};
  private readonly tokens = new Map<string, TokenRecord>();
  /** Instances launched through the relay: when. */
  private readonly launched = new Map<string, number>();
  /** Every action relayed or answered, in order (the test's evidence of what the provider sent). */
  readonly seen: RelayedRequest[] = [];
  /** Spot requests by instance id. */
  private readonly spotRequests = new Map<string, SpotRequest>();
  /** Instances EC2 (this relay) interrupted. */
  private readonly interruptedIds = new Set<string>();
  /** The address each instance shows instead of moto's. */
  private readonly addressOf = new Map<string, string>();
  /** The IPv6 address each instance shows. */
  private readonly ipv6Of = new Map<string, string>();
  private readonly timers = new Set<NodeJS.Timeout>();

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

  /** Turns EC2's behaviours on or off (see the top of this file); returns the relay. */
  emulate(emulation: Ec2Emulation): this {
    this.emulation = { ...emulation };
    return this;
  }

  /**
   * Sends the next `times` matching requests on to moto and closes the
   * connection instead of answering: moto has acted, the caller never hears.
   */
  dropAnswers(match: (r: RelayedRequest) => boolean, times = 1): void {
    this.rules.push({ kind: 'drop', match, times });
  }

  /** Stops every injected error still pending (failNext's remaining answers). */
  stopFailing(): void {
    this.rules = this.rules.filter((r) => r.kind !== 'error');
  }

  private isInvisible(instanceId: string): boolean {
    const at = this.launched.get(instanceId);
    return at !== undefined && Date.now() - at < (this.emulation.invisibleMs ?? 0);
  }

  private isPending(instanceId: string): boolean {
    const at = this.launched.get(instanceId);
    return at !== undefined && Date.now() - at < (this.emulation.pendingMs ?? 0);
  }

  private answerError(res: ServerResponse, error: InjectedError): void {
    const requestId = randomUUID();
    res.writeHead(error.status, {
      'Content-Type': 'text/xml;charset=UTF-8',
      Server: 'AmazonEC2',
      'X-Amzn-Requestid': requestId,
      'Cache-Control': 'no-cache, no-store',
    });
    res.end(ec2ErrorXml(error, requestId));
  }

  /** An answer of ours to a request EC2 would answer without moto (a token's replay, a not-yet-visible instance). */
  private emulated(
    action: string,
    params: URLSearchParams,
    body: string,
  ): InjectedError | { replay: string } | undefined {
    if (action === 'RunInstances' && this.emulation.clientToken) {
      const token = params.get('ClientToken');
      const record = token === null ? undefined : this.tokens.get(token);
      if (record === undefined) return undefined;
      if (record.terminated)
        return {
          status: 400,
          code: 'IdempotentInstanceTerminated',
          message:
            'The client token you have provided is associated with a terminated instance. Please use a different client token.',
        };
      if (record.body !== body)
        return {
          status: 400,
          code: 'IdempotentParameterMismatch',
          message:
            'Arguments on this idempotent request are inconsistent with arguments used in previous request(s).',
        };
      return { replay: record.answer };
    }
    if (action === 'DescribeInstances' || action === 'TerminateInstances') {
      const hidden = listParam(params, 'InstanceId').filter((id) => this.isInvisible(id));
      if (hidden.length === 1)
        return {
          status: 400,
          code: 'InvalidInstanceID.NotFound',
          message: `The instance ID '${hidden[0]}' does not exist`,
        };
      if (hidden.length > 1)
        return {
          status: 400,
          code: 'InvalidInstanceID.NotFound',
          message: `The instance IDs '${hidden.join(', ')}' do not exist`,
        };
    }
    return undefined;
  }

  /** moto's answer as EC2 would give it now, and what the relay learns from it. */
  private observed(
    action: string,
    params: URLSearchParams,
    body: string,
    status: number,
    answer: string,
  ): string {
    if (status !== 200) return answer;
    if (action === 'RunInstances') {
      const ids = [...answer.matchAll(/<instanceId>(i-[0-9a-f]+)<\/instanceId>/g)].map((m) => m[1]!);
      const now = Date.now();
      for (const id of ids) this.launched.set(id, now);
      for (const id of ids) {
        const address = this.emulation.addresses?.();
        if (address !== undefined) this.addressOf.set(id, address);
        if (Number(params.get('NetworkInterface.1.Ipv6AddressCount') ?? '0') > 0) {
          const v6 = this.emulation.ipv6Addresses?.();
          if (v6 !== undefined) this.ipv6Of.set(id, v6);
        }
        if (this.emulation.spot && params.get('InstanceMarketOptions.MarketType') === 'spot')
          this.spotRequests.set(id, {
            id: `sir-${randomUUID().replace(/-/g, '').slice(0, 8)}`,
            instanceId: id,
            state: 'active',
            code: 'fulfilled',
            updatedAt: new Date(now),
            createdAt: new Date(now),
          });
      }
      const token = params.get('ClientToken');
      if (this.emulation.clientToken && token !== null)
        this.tokens.set(token, { body, answer, instanceIds: ids, terminated: false });
      return answer;
    }
    if (action === 'TerminateInstances') {
      const ids = listParam(params, 'InstanceId');
      for (const record of this.tokens.values())
        if (record.instanceIds.some((id) => ids.includes(id))) record.terminated = true;
      return answer;
    }
    if (action === 'DescribeInstances') {
      let out = answer;
      // From the end, so earlier spans keep their offsets.
      for (const span of topLevelItems(answer, 'reservationSet').reverse()) {
        const item = out.slice(span.start, span.end);
        const ids = [...item.matchAll(/<instanceId>(i-[0-9a-f]+)<\/instanceId>/g)].map((m) => m[1]!);
        let replaced = this.asEc2Shows(item, ids);
        if (ids.some((id) => this.isInvisible(id))) replaced = '';
        else if (ids.some((id) => this.isPending(id)))
          replaced = replaced.replace(
            /<instanceState><code>16<\/code><name>running<\/name><\/instanceState>/g,
            '<instanceState><code>0</code><name>pending</name></instanceState>',
          );
        out = out.slice(0, span.start) + replaced + out.slice(span.end);
      }
      return out;
    }
    return answer;
  }

  /** One reservation of a DescribeInstances answer with each instance's Spot request, address and interruption. */
  private asEc2Shows(item: string, ids: readonly string[]): string {
    let out = item;
    for (const id of ids) {
      const spot = this.spotRequests.get(id);
      if (spot !== undefined)
        out = out.replace(
          `<instanceId>${id}</instanceId>`,
          `<instanceId>${id}</instanceId><spotInstanceRequestId>${spot.id}</spotInstanceRequestId>`,
        );
      const v6 = this.ipv6Of.get(id);
      if (v6 !== undefined)
        out = out.replace(
          `<instanceId>${id}</instanceId>`,
          `<instanceId>${id}</instanceId><ipv6Address>${v6}</ipv6Address>`,
        );
      const address = this.addressOf.get(id);
      if (address !== undefined)
        out = out.replace(/<ipAddress>[^<]*<\/ipAddress>/, `<ipAddress>${address}</ipAddress>`);
      if (this.interruptedIds.has(id)) {
        out = /<stateReason>[\s\S]*?<\/stateReason>/.test(out)
          ? out.replace(/<stateReason>[\s\S]*?<\/stateReason>/, INTERRUPTED_REASON)
          : out.replace('</instanceState>', `</instanceState>${INTERRUPTED_REASON}`);
        out = out.replace(/<reason>[^<]*<\/reason>/, '<reason>Server.SpotInstanceTermination</reason>');
      }
    }
    return out;
  }

  /** DescribeSpotInstanceRequests, answered here (by ids, or filtered by status-code), as EC2 writes it. */
  private spotRequestsAnswer(params: URLSearchParams): { status: number; body: string } {
    const ids = listParam(params, 'SpotInstanceRequestId');
    const all = [...this.spotRequests.values()];
    const unknown = ids.find((id) => !all.some((r) => r.id === id));
    if (unknown !== undefined)
      return {
        status: 400,
        body: ec2ErrorXml(
          {
            status: 400,
            code: 'InvalidSpotInstanceRequestID.NotFound',
            message: `The spot instance request ID '${unknown}' does not exist`,
          },
          randomUUID(),
        ),
      };
    // Filter.N.Name=status-code with Filter.N.Value.M: the only filter the provider sends.
    const codes: string[] = [];
    for (const [k, v] of params) {
      const m = /^Filter\.(\d+)\.Name$/.exec(k);
      if (m && v === 'status-code') codes.push(...listParam(params, `Filter.${m[1]}.Value`));
    }
    const chosen = all.filter(
      (r) => (ids.length === 0 || ids.includes(r.id)) && (codes.length === 0 || codes.includes(r.code)),
    );
    const items = chosen
      .map(
        (r) =>
          `<item><spotInstanceRequestId>${r.id}</spotInstanceRequestId><type>one-time</type><state>${r.state}</state>` +
          `<status><code>${r.code}</code><updateTime>${r.updatedAt.toISOString()}</updateTime><message>${r.code}</message></status>` +
          `<instanceId>${r.instanceId}</instanceId><createTime>${r.createdAt.toISOString()}</createTime>` +
          `<productDescription>Linux/UNIX</productDescription><instanceInterruptionBehavior>terminate</instanceInterruptionBehavior></item>`,
      )
      .join('');
    return {
      status: 200,
      body: `<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSpotInstanceRequestsResponse xmlns="${EC2_XMLNS}"><requestId>${randomUUID()}</requestId><spotInstanceRequestSet>${items}</spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>`,
    };
  }

  /**
   * EC2 interrupts a Spot instance: the notice now (its updateTime
   * `noticeAgoMs` in the past: a notice the provider sees late), and two
   * minutes after the notice the instance is terminated (through
   * `terminate`, the test's raw client on moto) and shows
   * Server.SpotInstanceTermination. Resolves when it is terminated.
   */
  interrupt(
    instanceId: string,
    options: { noticeAgoMs?: number; terminate: (instanceId: string) => Promise<void> },
  ): Promise<void> {
    const spot = this.spotRequests.get(instanceId);
    if (spot === undefined)
      throw new Error(`${instanceId} is not a Spot instance launched through the relay`);
    const noticeAgoMs = options.noticeAgoMs ?? 0;
    spot.code = 'marked-for-termination';
    spot.updatedAt = new Date(Date.now() - noticeAgoMs);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.timers.delete(timer);
          options
            .terminate(instanceId)
            .then(() => {
              this.interruptedIds.add(instanceId);
              spot.state = 'closed';
              spot.code = 'instance-terminated-no-capacity';
              spot.updatedAt = new Date();
              for (const record of this.tokens.values())
                if (record.instanceIds.includes(instanceId)) record.terminated = true;
              resolve();
            })
            .catch(reject);
        },
        Math.max(0, 120_000 - noticeAgoMs),
      );
      this.timers.add(timer);
    });
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
    const params = new URLSearchParams(text);
    const action = params.get('Action') ?? '';
    const seen = { action, body: text };
    this.seen.push(seen);
    let rewrite: ((body: string) => string) | undefined;
    let drop = false;
    for (const rule of [...this.rules]) {
      if (!rule.match(seen)) continue;
      if (rule.kind === 'rewrite') {
        rewrite ??= rule.rewrite;
        continue;
      }
      if (rule.kind === 'hold') {
        await rule.released;
        continue;
      }
      if (--rule.times <= 0) this.rules = this.rules.filter((r) => r !== rule);
      if (rule.kind === 'drop') {
        drop = true;
        continue;
      }
      this.answerError(res, rule.error);
      return;
    }
    if (action === 'DescribeSpotInstanceRequests' && this.emulation.spot) {
      const { status, body: answer } = this.spotRequestsAnswer(params);
      const requestId = randomUUID();
      res.writeHead(status, { 'Content-Type': 'text/xml;charset=UTF-8', 'X-Amzn-Requestid': requestId });
      res.end(answer);
      return;
    }
    let forwarded = body;
    const image = params.get('ImageId');
    if (action === 'RunInstances' && this.emulation.ssmParameters && image?.startsWith('resolve:ssm:')) {
      // The parameter's name, without a trailing :version or :label.
      const name = image.slice('resolve:ssm:'.length).replace(/:[^/:]*$/, '');
      const ami = this.emulation.ssmParameters[name];
      if (ami === undefined) {
        this.answerError(res, {
          status: 400,
          code: 'SsmInvalidParameter',
          message: `The SSM parameter ${name} could not be resolved to an image id.`,
        });
        return;
      }
      const rewritten = new URLSearchParams(text);
      rewritten.set('ImageId', ami);
      forwarded = Buffer.from(rewritten.toString(), 'utf8');
    }
    const ours = this.emulated(action, params, text);
    if (ours !== undefined && !('replay' in ours)) {
      this.answerError(res, ours);
      return;
    }
    const answered = (
      status: number,
      headers: Record<string, string | string[] | undefined>,
      raw: string,
    ) => {
      let answer = 'replay' in (ours ?? {}) ? raw : this.observed(action, params, text, status, raw);
      if (rewrite !== undefined) answer = rewrite(answer);
      if (drop) {
        // moto has acted; the caller hears nothing (as when EC2's answer is lost on the way).
        res.socket?.destroy();
        return;
      }
      const out = Buffer.from(answer, 'utf8');
      const sent: Record<string, string | string[] | undefined> = {
        ...headers,
        'content-length': String(out.length),
      };
      delete sent['transfer-encoding'];
      res.writeHead(status, sent);
      res.end(out);
    };
    if (ours !== undefined && 'replay' in ours) {
      answered(200, { 'content-type': 'text/xml', 'x-amzn-requestid': randomUUID() }, ours.replay);
      return;
    }
    const upstream = request(
      {
        host: this.target.hostname,
        port: this.target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: this.target.host, 'content-length': String(forwarded.length) },
      },
      (answer) => {
        const parts: Buffer[] = [];
        answer.on('data', (d: Buffer) => parts.push(d));
        answer.once('end', () =>
          answered(answer.statusCode ?? 502, answer.headers, Buffer.concat(parts).toString('utf8')),
        );
      },
    );
    upstream.once('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    upstream.end(forwarded);
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    // Held requests go on (and fail on the closed connections) rather than wait forever.
    for (const rule of this.rules) if (rule.kind === 'hold') rule.release();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
