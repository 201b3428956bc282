/**
 * Lease state in Redis (7.x or Valkey), shared by every lease API replica.
 *
 * Each operation is one Lua script, so Redis runs it alone: choosing a
 * proxy, taking its slot and recording the lease happen in one step, and two
 * replicas can never hand out the same last slot. The replica sends its own
 * candidates (healthy, selector-matching proxies from its informer) with
 * each acquire; Redis holds only leases, slot counts and cooldowns, keyed by
 * Proxy UID.
 *
 * Keys, under one prefix (default `egress-proxies:{leases}:`; the braces keep
 * every key in one cluster hash slot):
 *   lease:<id>  hash p (proxy uid), t (target), e (end, epoch ms); expires one
 *               cooldown window (+1 s) after its end, the reporting window
 *   active      hash uid -> slots held
 *   ends        sorted set "<id> <uid>" by end: what expires next. Every
 *               script first gives back the slots of the ended ones (a range
 *               read, never a scan of every lease)
 *   cool        hash "<uid>\t<target>" -> cooldown end ('' target = global)
 *   coolends    sorted set of the same fields by end, to drop elapsed ones
 *   epoch       a random value set when the state is first written; a
 *               different one means Redis lost the state (restart, flush)
 *
 * Semantics are the memory store's, check for check (api/lease-store.ts):
 * a lease ends at `end` (end <= now holds no slot), a cooldown holds while
 * now < its end, an expired lease stays reportable until end + cooldown.
 * Correctness never depends on key TTLs: every read compares with `now`.
 * The TTLs only bound memory.
 *
 * `now` is Redis's own clock (TIME), so replicas with skewed clocks agree;
 * tests inject a Clock, whose time is then sent with each call.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { z } from 'zod';
import {
  DEFAULT_LEASE_COOLDOWN_MS,
  LeaseStoreUnavailableError,
  newLeaseId,
  selectionOrder,
  storeKey,
  type AcquireOutcome,
  type AcquireRequest,
  type Candidate,
  type Clock,
  type Lease,
  type LeaseStore,
  type PoolEvent,
  type TrafficReport,
  type ReportOutcome,
  type ReportReceipt,
  type ReportResult,
} from './lease-store.js';

export const DEFAULT_REDIS_PREFIX = 'egress-proxies:{leases}:';

// Shared by every script. ARGV[1] prefix, ARGV[2] now ('' = Redis TIME),
// ARGV[3] a fresh epoch value to set when none is there.
const PRELUDE = `
local P = ARGV[1]
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ep = redis.call('GET', P .. 'epoch')
if not ep then
  ep = ARGV[3]
  redis.call('SET', P .. 'epoch', ep)
end
local function unhold(member, uid)
  if redis.call('ZREM', P .. 'ends', member) == 1 then
    if redis.call('HINCRBY', P .. 'active', uid, -1) <= 0 then redis.call('HDEL', P .. 'active', uid) end
  end
end
local ended = redis.call('ZRANGEBYSCORE', P .. 'ends', '-inf', now)
for i = 1, #ended do
  local m = ended[i]
  unhold(m, string.sub(m, string.find(m, ' ', 1, true) + 1))
end
local cooled = redis.call('ZRANGEBYSCORE', P .. 'coolends', '-inf', now)
for i = 1, #cooled do
  redis.call('HDEL', P .. 'cool', cooled[i])
  redis.call('ZREM', P .. 'coolends', cooled[i])
end
`;

// ARGV[4] ttlMs, [5] cooldownMs, [6] lease id, [7] target, [8] the digest
// of the caller's candidate list ('' = no candidates). The list itself was
// registered once (REGISTER) under cands:<digest> as (uid, maxLeases) pairs
// sorted by (latency, id); an unknown digest (never registered, expired,
// Redis flushed) answers -2 having written nothing, and the caller
// registers it and asks again. Among equally loaded proxies the first wins,
// so an eligible proxy with no lease ends the search: the list is read in
// growing chunks from the front, and most acquires read only the first.
const ACQUIRE = `${PRELUDE}
local target = ARGV[7]
local digest = ARGV[8]
local ckey = P .. 'cands:' .. digest
local anyCool = redis.call('HLEN', P .. 'cool') > 0
local examined, inCooldown, atCapacity, eligible = 0, 0, 0, 0
local best, bestActive, bestUid = nil, nil, nil
local i, size = 0, 32
while digest ~= '' do
  local list = redis.call('LRANGE', ckey, 2 * i, 2 * (i + size) - 1)
  local got = #list / 2
  if got == 0 then
    if i == 0 then return {ep, -2} end
    break
  end
  local uids, gf, tf = {}, {}, {}
  for k = 1, got do
    local uid = list[2 * k - 1]
    uids[k] = uid
    if anyCool then
      gf[k] = uid .. '\t'
      tf[k] = uid .. '\t' .. target
    end
  end
  local counts = redis.call('HMGET', P .. 'active', unpack(uids))
  local g, t
  if anyCool then
    g = redis.call('HMGET', P .. 'cool', unpack(gf))
    if target ~= '' then t = redis.call('HMGET', P .. 'cool', unpack(tf)) end
  end
  for k = 1, got do
    examined = examined + 1
    if anyCool and ((g[k] and tonumber(g[k]) > now) or (t and t[k] and tonumber(t[k]) > now)) then
      inCooldown = inCooldown + 1
    else
      local active = tonumber(counts[k]) or 0
      if active >= tonumber(list[2 * k]) then
        atCapacity = atCapacity + 1
      else
        eligible = eligible + 1
        if best == nil or active < bestActive then
          best = i + k
          bestActive = active
          bestUid = uids[k]
        end
      end
    end
  end
  if best ~= nil and bestActive == 0 then break end
  if got < size then break end
  i = i + got
  if size < 256 then size = size * 2 end
end
if best == nil then return {ep, 0, examined, inCooldown, atCapacity} end
local id = ARGV[6]
local ends = now + tonumber(ARGV[4])
local key = P .. 'lease:' .. id
redis.call('HSET', key, 'p', bestUid, 't', target, 'e', ends)
redis.call('PEXPIRE', key, ends + tonumber(ARGV[5]) - now + 1000)
redis.call('ZADD', P .. 'ends', ends, id .. ' ' .. bestUid)
redis.call('HINCRBY', P .. 'active', bestUid, 1)
return {ep, 1, examined, inCooldown, atCapacity, eligible - 1, best, bestActive + 1, tostring(ends), bestUid}
`;

// ARGV[4] digest, [5] key lifetime (ms), [6] the digest this replica
// registered before ('' = none), then the (uid, maxLeases) pairs. Writes the
// list only when it is absent (another replica with the same catalog may
// have written it), so a concurrent acquire never reads a half-written list:
// the script runs alone. The previous list is dropped to bound memory; a
// replica still using it re-registers it. The lifetime is the backstop for
// replicas that stop without registering again.
const REGISTER = `${PRELUDE}
local ckey = P .. 'cands:' .. ARGV[4]
if ARGV[6] ~= '' and ARGV[6] ~= ARGV[4] then redis.call('DEL', P .. 'cands:' .. ARGV[6]) end
if redis.call('EXISTS', ckey) == 0 then
  local n = #ARGV
  local i = 7
  while i <= n do
    local last = math.min(n, i + 999)
    redis.call('RPUSH', ckey, unpack(ARGV, i, last))
    i = last + 1
  end
end
redis.call('PEXPIRE', ckey, tonumber(ARGV[5]))
return {ep}
`;

// ARGV[4] lease id.
const RELEASE = `${PRELUDE}
local key = P .. 'lease:' .. ARGV[4]
local uid = redis.call('HGET', key, 'p')
if uid then
  unhold(ARGV[4] .. ' ' .. uid, uid)
  redis.call('DEL', key)
end
return {ep}
`;

// ARGV[4] lease id, [5] ttlMs, [6] cooldownMs. Only a lease still holding
// its slot (end > now) is extended; the prelude has already given back the
// slots of ended ones, so an ended lease is never revived.
const RENEW = `${PRELUDE}
local id = ARGV[4]
local key = P .. 'lease:' .. id
local rec = redis.call('HMGET', key, 'p', 't', 'e')
if not rec[1] or tonumber(rec[3]) <= now then return {ep, 0} end
local ends = now + tonumber(ARGV[5])
redis.call('HSET', key, 'e', ends)
redis.call('PEXPIRE', key, ends + tonumber(ARGV[6]) - now + 1000)
redis.call('ZADD', P .. 'ends', ends, id .. ' ' .. rec[1])
return {ep, 1, rec[1], rec[2], tostring(ends)}
`;

// ARGV[4] lease id, [5] result, [6] target, [7] cooldownMs.
const REPORT = `${PRELUDE}
local id = ARGV[4]
local key = P .. 'lease:' .. id
local rec = redis.call('HMGET', key, 'p', 't', 'e')
if not rec[1] then return {ep, 'unknown_lease'} end
local cooldown = tonumber(ARGV[7])
if now > tonumber(rec[3]) + cooldown then
  unhold(id .. ' ' .. rec[1], rec[1])
  redis.call('DEL', key)
  return {ep, 'unknown_lease'}
end
if ARGV[5] == 'ok' then return {ep, 'acknowledged'} end
local target = ARGV[6]
if target == '' then target = rec[2] end
local field = rec[1] .. '\\t' .. target
redis.call('HSET', P .. 'cool', field, now + cooldown)
redis.call('ZADD', P .. 'coolends', now + cooldown, field)
return {ep, 'cooldown', rec[1], target}
`;

const COUNTS = `${PRELUDE}
return {ep, redis.call('HGETALL', P .. 'active')}
`;

type Reply = [string, ...unknown[]];

/**
 * How long a registered candidate list lives in Redis after its last
 * registration. Only a memory bound: an acquire that finds it gone
 * registers it again.
 */
const CANDIDATES_TTL_MS = 60 * 60_000;

interface Order {
  sorted: Candidate[];
  /** (uid, maxLeases) pairs in `sorted` order: the registered list. */
  args: string[];
  /** SHA-256 of `args` (hex); '' for an empty list. */
  digest: string;
}

interface LeaseCommands {
  leaseAcquire(...args: string[]): Promise<Reply>;
  leaseRegister(...args: string[]): Promise<Reply>;
  leaseRelease(...args: string[]): Promise<Reply>;
  leaseReport(...args: string[]): Promise<Reply>;
  leaseRenew(...args: string[]): Promise<Reply>;
  leaseCounts(...args: string[]): Promise<Reply>;
}

export interface RedisLeaseStoreOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://` for TLS. */
  url: string;
  /** Overrides a password in the URL (a mounted Secret). */
  password?: string;
  /** PEM CA bundle for `rediss://` servers signed by a private CA. */
  caFile?: string;
  cooldownMs?: number;
  prefix?: string;
  logger: Logger;
  /** Injected time (tests); by default Redis's TIME decides. */
  clock?: Clock;
  newId?: () => string;
  /** Longest wait for one reply before answering `unavailable` (default 2 s). */
  commandTimeoutMs?: number;
}

/**
 * The URL without its password, for logs and errors. Only what the URL
 * parser recognises is kept; a URL it cannot parse is not echoed at all.
 */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

export class RedisLeaseStore implements LeaseStore {
  readonly cooldownMs: number;
  private readonly redis: Redis & LeaseCommands;
  private readonly prefix: string;
  private readonly logger: Logger;
  private readonly clock: Clock | undefined;
  private readonly newId: () => string;
  private readonly where: string;
  /** The epoch seen last; undefined before the first reply. */
  private epoch: string | undefined;
  private readonly epochSeed = randomBytes(8).toString('hex');
  private epochCounter = 0;
  /**
   * Candidates sorted by (latency, id) and their script arguments, by the
   * caller's array identity: the API hands the same array until its catalog
   * changes, so the sort runs once per change, not per acquire.
   */
  private readonly orderFor = new WeakMap<readonly Candidate[], Order>();
  /** The digest of the candidate list this replica registered last. */
  private registered: string | undefined;
  /**
   * Acquires of this replica in flight, by their list's digest: a list one
   * of them still uses is not dropped when another registers a newer one
   * (concurrent acquires with different candidate lists would otherwise
   * delete each other's list until one gave up as "unavailable").
   */
  private readonly inFlight = new Map<string, number>();
  private downSince: number | undefined;
  /** The connection's last error: a refused password shows here, while the command only sees "Connection is closed". */
  private lastError: Error | undefined;

  constructor(options: RedisLeaseStoreOptions) {
    this.cooldownMs = options.cooldownMs ?? DEFAULT_LEASE_COOLDOWN_MS;
    if (!(this.cooldownMs > 0)) throw new RangeError(`cooldownMs must be positive, got ${this.cooldownMs}`);
    this.prefix = options.prefix ?? DEFAULT_REDIS_PREFIX;
    this.logger = options.logger.child({ component: 'lease-store' });
    this.clock = options.clock;
    this.newId = options.newId ?? newLeaseId;
    this.where = redactRedisUrl(options.url);
    const url = new URL(options.url);
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
      throw new RangeError(`lease store URL must be redis:// or rediss://, got ${url.protocol}//`);
    }
    const redisOptions: RedisOptions = {
      lazyConnect: true,
      // Fail fast while disconnected: a request answers 503 at once rather
      // than waiting in a queue whose commands would run after the client
      // gave up (granting slots nobody receives).
      enableOfflineQueue: false,
      // A reply lost with the connection is never re-sent: the script may
      // have run, and running it twice would take a second slot.
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.commandTimeoutMs ?? 2_000,
      connectTimeout: 2_000,
      // Commands issued in one tick go out in one write (and are read by
      // Redis in one read): with many concurrent requests the syscalls per
      // command were the largest cost left in the api process.
      enableAutoPipelining: true,
      retryStrategy: (attempt) => Math.min(100 * 2 ** Math.min(attempt, 5), 2_000),
      ...(options.password !== undefined ? { password: options.password } : {}),
      ...(url.protocol === 'rediss:' && options.caFile
        ? {
            tls: {
              ca: readFileSync(options.caFile),
              // SNI carries host names only (RFC 6066); an IP is checked against the certificate's IP SANs.
              ...(isIP(url.hostname.replace(/^\[|\]$/g, '')) ? {} : { servername: url.hostname }),
            },
          }
        : {}),
    };
    this.redis = new Redis(options.url, redisOptions) as Redis & LeaseCommands;
    this.redis.defineCommand('leaseAcquire', { numberOfKeys: 0, lua: ACQUIRE });
    this.redis.defineCommand('leaseRegister', { numberOfKeys: 0, lua: REGISTER });
    this.redis.defineCommand('leaseRelease', { numberOfKeys: 0, lua: RELEASE });
    this.redis.defineCommand('leaseReport', { numberOfKeys: 0, lua: REPORT });
    this.redis.defineCommand('leaseRenew', { numberOfKeys: 0, lua: RENEW });
    this.redis.defineCommand('leaseCounts', { numberOfKeys: 0, lua: COUNTS });
    // ioredis reports every failed reconnect; one line per outage is enough.
    this.redis.on('error', (err: Error) => {
      this.lastError = err;
      if (this.downSince === undefined) {
        this.downSince = Date.now();
        this.logger.error(
          { err: { message: err.message }, redis: this.where },
          'lease store: Redis unreachable; lease requests answer 503 until it is back',
        );
      }
    });
    this.redis.on('ready', () => {
      if (this.downSince !== undefined) {
        this.logger.info(
          { redis: this.where, downMs: Date.now() - this.downSince },
          'lease store: Redis reachable again',
        );
        this.downSince = undefined;
      }
    });
  }

  /** Connects and runs one command; throws a clear error when Redis cannot be reached or refuses us. */
  async connect(): Promise<void> {
    try {
      await this.redis.connect();
      await this.run(() => this.redis.leaseCounts(...this.head()));
    } catch (err) {
      this.redis.disconnect();
      const message = (err as Error).message;
      const cause =
        this.lastError && this.lastError.message !== message
          ? `${message} (${this.lastError.message})`
          : message;
      throw new Error(`lease store: cannot use Redis at ${this.where}: ${cause}`);
    }
    this.logger.info({ redis: this.where }, 'lease store: using Redis');
  }

  async close(): Promise<void> {
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }

  async acquire<C extends Candidate>(req: AcquireRequest<C>): Promise<AcquireOutcome<C>> {
    if (!Number.isFinite(req.ttlMs) || req.ttlMs <= 0)
      throw new RangeError(`ttlMs must be positive, got ${req.ttlMs}`);
    const { candidates, target } = req;
    const order = this.sorted(candidates);
    const id = this.newId();
    const attempt = () =>
      this.run(() =>
        this.redis.leaseAcquire(
          ...this.head(),
          String(req.ttlMs),
          String(this.cooldownMs),
          id,
          target,
          order.digest,
        ),
      );
    // The candidate list travels once per catalog change (REGISTER), not
    // with every acquire: an argument list of hundreds of strings was most
    // of an acquire's cost on both sides.
    this.inFlight.set(order.digest, (this.inFlight.get(order.digest) ?? 0) + 1);
    try {
      return await this.acquireWith(order, attempt, id, target);
    } finally {
      const left = (this.inFlight.get(order.digest) ?? 1) - 1;
      if (left > 0) this.inFlight.set(order.digest, left);
      else this.inFlight.delete(order.digest);
    }
  }

  private async acquireWith<C extends Candidate>(
    order: Order,
    attempt: () => Promise<Reply>,
    id: string,
    target: string,
  ): Promise<AcquireOutcome<C>> {
    let reply = await attempt();
    for (let tries = 0; reply[1] === -2; tries++) {
      // Two tries cover a flush between registering and acquiring; more
      // means Redis is dropping keys as fast as we write them.
      if (tries === 2)
        throw new LeaseStoreUnavailableError(
          'the lease store (Redis) is unavailable: it keeps losing the registered candidate list (maxmemory eviction?)',
        );
      await this.register(order);
      reply = await attempt();
    }
    const [, granted, examined, inCooldown, atCapacity] = reply as [string, number, number, number, number];
    if (granted === 0) {
      return { granted: null, stats: { considered: examined, inCooldown, atCapacity, outranked: 0 } };
    }
    const [, , , , , outranked, index, activeLeases, ends, uid] = reply as [
      string,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      string,
      string,
    ];
    const candidate = order.sorted[index - 1] as C;
    // The slot is taken under `uid`; a list that disagreed with ours would be a bug.
    if (!candidate || storeKey(candidate) !== uid) {
      throw new Error(`lease store: Redis granted ${uid} at ${index}, which is not our candidate there`);
    }
    return {
      granted: { id, proxy: storeKey(candidate), target, expiresAt: Number(ends) },
      candidate,
      activeLeases,
      stats: { considered: examined, inCooldown, atCapacity, outranked },
    };
  }

  async release(id: string): Promise<void> {
    await this.run(() => this.redis.leaseRelease(...this.head(), id));
  }

  async renew(id: string, ttlMs: number): Promise<Lease | null> {
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new RangeError(`ttlMs must be positive, got ${ttlMs}`);
    const reply = await this.run(() =>
      this.redis.leaseRenew(...this.head(), id, String(ttlMs), String(this.cooldownMs)),
    );
    if (reply[1] !== 1) return null;
    const [, , proxy, target, ends] = reply as [string, number, string, string, string];
    return { id, proxy, target, expiresAt: Number(ends) };
  }

  async report(id: string, result: ReportResult, target: string): Promise<ReportOutcome> {
    return (await this.reportWithReceipt(id, result, target)).outcome;
  }

  async reportWithReceipt(id: string, result: ReportResult, target: string): Promise<ReportReceipt> {
    const reply = await this.run(() =>
      this.redis.leaseReport(...this.head(), id, result, target, String(this.cooldownMs)),
    );
    const outcome = reply[1] as ReportOutcome;
    if (outcome !== 'cooldown' || typeof reply[2] !== 'string') return { outcome };
    return { outcome, proxy: reply[2], target: typeof reply[3] === 'string' ? reply[3] : '' };
  }

  async postPoolEvent(event: PoolEvent): Promise<void> {
    const key = `${this.prefix}pool-events`;
    try {
      await this.redis.multi().rpush(key, JSON.stringify(event)).ltrim(key, -MAX_POOL_EVENTS, -1).exec();
    } catch (err) {
      throw new LeaseStoreUnavailableError(
        `the lease store (Redis) is unavailable: ${(err as Error).message}`,
      );
    }
  }

  async takePoolEvents(max: number): Promise<PoolEvent[]> {
    let items: string[] | null;
    try {
      items = await this.redis.lpop(`${this.prefix}pool-events`, max);
    } catch (err) {
      throw new LeaseStoreUnavailableError(
        `the lease store (Redis) is unavailable: ${(err as Error).message}`,
      );
    }
    const events: PoolEvent[] = [];
    for (const item of items ?? []) {
      const event = parsePoolEvent(item);
      if (event) events.push(event);
      else this.logger.warn('dropped a malformed pool event from the lease store');
    }
    return events;
  }

  async postTraffic(reports: readonly TrafficReport[]): Promise<void> {
    if (reports.length === 0) return;
    const key = `${this.prefix}traffic`;
    try {
      await this.redis
        .multi()
        .rpush(key, ...reports.map((r) => JSON.stringify(r)))
        .ltrim(key, -MAX_TRAFFIC_REPORTS, -1)
        .exec();
    } catch (err) {
      throw new LeaseStoreUnavailableError(
        `the lease store (Redis) is unavailable: ${(err as Error).message}`,
      );
    }
  }

  async takeTraffic(max: number): Promise<TrafficReport[]> {
    let items: string[] | null;
    try {
      items = await this.redis.lpop(`${this.prefix}traffic`, max);
    } catch (err) {
      throw new LeaseStoreUnavailableError(
        `the lease store (Redis) is unavailable: ${(err as Error).message}`,
      );
    }
    const reports: TrafficReport[] = [];
    for (const item of items ?? []) {
      const report = parseQueued(trafficReportSchema, item);
      if (report) reports.push(report);
      else this.logger.warn('dropped a malformed traffic report from the lease store');
    }
    return reports;
  }

  async activeCounts(): Promise<ReadonlyMap<string, number>> {
    const reply = await this.run(() => this.redis.leaseCounts(...this.head()));
    const flat = reply[1] as string[];
    const counts = new Map<string, number>();
    for (let i = 0; i < flat.length; i += 2) {
      const n = Number(flat[i + 1]);
      if (n > 0) counts.set(flat[i]!, n);
    }
    return counts;
  }

  /** The arguments every script starts with. */
  private head(): [string, string, string] {
    return [
      this.prefix,
      this.clock ? String(this.clock.now()) : '',
      `${this.epochSeed}-${++this.epochCounter}`,
    ];
  }

  private sorted(candidates: readonly Candidate[]): Order {
    let order = this.orderFor.get(candidates);
    if (!order) {
      const sorted = [...candidates].sort(selectionOrder);
      const args: string[] = [];
      for (const c of sorted) args.push(storeKey(c), String(Math.max(0, Math.floor(c.maxLeases))));
      // Store keys are UIDs or namespace/name ids: neither holds a newline.
      const digest = args.length === 0 ? '' : createHash('sha256').update(args.join('\n')).digest('hex');
      order = { sorted, args, digest };
      this.orderFor.set(candidates, order);
    }
    return order;
  }

  /** Writes the order's candidate list under its digest (a no-op when another replica already did). */
  private async register(order: Order): Promise<void> {
    await this.run(() =>
      this.redis.leaseRegister(
        ...this.head(),
        order.digest,
        String(CANDIDATES_TTL_MS),
        // The previous list goes only when no acquire of this replica still uses it.
        this.registered && !this.inFlight.has(this.registered) ? this.registered : '',
        ...order.args,
      ),
    );
    this.registered = order.digest;
  }

  /** Runs one script; any failure to get its reply is `unavailable`; notes a lost state. */
  private async run(call: () => Promise<Reply>): Promise<Reply> {
    let reply: Reply;
    try {
      reply = await call();
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      // A script error is a bug here, not an outage: let it be a 500.
      if (/^(ERR|WRONGTYPE)\b/.test(message) && !/NOSCRIPT|timed out/i.test(message)) throw err;
      throw new LeaseStoreUnavailableError(`the lease store (Redis) is unavailable: ${message}`);
    }
    this.noteEpoch(reply[0]);
    return reply;
  }

  private noteEpoch(epoch: string): void {
    if (epoch === this.epoch) return;
    const ours = epoch.startsWith(`${this.epochSeed}-`);
    if (this.epoch === undefined) {
      this.logger.info(
        { redis: this.where },
        ours
          ? 'lease store: Redis held no lease state; starting empty'
          : 'lease store: joined the lease state in Redis',
      );
    } else {
      this.logger.warn(
        { redis: this.where },
        'lease store: lease state was lost (Redis came back empty: restarted without persistence, or flushed); leases and cooldowns granted before are forgotten, and their holders get unknown_lease',
      );
    }
    this.epoch = epoch;
  }
}

/** Pool events kept in Redis for the api replicas: the newest this many (a burst with no api to take them). */
const MAX_POOL_EVENTS = 10_000;

const poolEventSchema = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('banned'), proxy: z.string(), target: z.string() }),
  z.strictObject({
    kind: z.literal('denied'),
    selector: z.array(z.tuple([z.string(), z.string()])),
    pool: z.string().optional(),
  }),
]);

/** A queued event as written by postPoolEvent, or undefined for anything else. */
function parsePoolEvent(text: string): PoolEvent | undefined {
  return parseQueued(poolEventSchema, text);
}

/** Traffic reports kept in Redis for the prober: the newest this many (a prober down for a while). */
const MAX_TRAFFIC_REPORTS = 10_000;

const trafficReportSchema = z.strictObject({
  proxy: z.string(),
  uid: z.string(),
  host: z.string(),
  port: z.number().int(),
  ok: z.number().int().nonnegative(),
  failures: z.number().int().nonnegative(),
  reason: z.string().optional(),
  message: z.string().optional(),
});

/** A queued item as its writer wrote it, or undefined for anything else. */
function parseQueued<S extends z.ZodType>(schema: S, text: string): z.output<S> | undefined {
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
