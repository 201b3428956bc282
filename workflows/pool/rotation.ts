/**
 * Rotation as pure functions: when a member falls due by age (with a
 * deterministic per-member jitter, so a pool made at once does not all fall
 * due together), and when its ban reports say it is burnt (K reports from
 * at least D targets within a window). Marked members are replaced as a
 * rollout replaces old ones (state.ts): a new member first, within
 * maxSurge, then the marked one drains and goes.
 */
import type { PoolMember, PoolRotation, RotationReason, RotationState } from './types.js';

/** At most this many ban reports kept per member (the newest). */
const MAX_BANS_PER_MEMBER = 200;
/** Up to this fraction of maxAge is taken off each member's age limit. */
export const ROTATION_JITTER = 0.1;

export function initialRotation(): RotationState {
  return { bans: {}, marked: {}, rotatedTotal: 0 };
}

/** FNV-1a over the UID: a stable fraction in [0, 1) per member. */
function jitterFraction(uid: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < uid.length; i++) {
    h ^= uid.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h / 0x1_0000_0000;
}

/** When this member falls due by age (epoch ms), or undefined without maxAge or a creation time. */
export function ageDueAtMs(
  member: Pick<PoolMember, 'uid' | 'createdAt'>,
  maxAgeMs: number,
): number | undefined {
  const created = Date.parse(member.createdAt);
  if (!Number.isFinite(created)) return undefined;
  return created + Math.round(maxAgeMs * (1 - ROTATION_JITTER * jitterFraction(member.uid)));
}

/**
 * When a member its provider ends by itself (status.expiresAt) falls due:
 * a drain's length before the end, at most half its life (a short session
 * still serves), or undefined for a member without an end.
 */
export function expiryDueAtMs(
  member: Pick<PoolMember, 'createdAt' | 'expiresAt'>,
  drainMs: number,
): number | undefined {
  const ends = member.expiresAt === undefined ? NaN : Date.parse(member.expiresAt);
  if (!Number.isFinite(ends)) return undefined;
  const created = Date.parse(member.createdAt);
  const life = Number.isFinite(created) ? Math.max(0, ends - created) : 0;
  return ends - Math.round(Math.min(drainMs, life / 2));
}

/** Records ban reports; drops reports older than the window. */
export function recordBans(
  state: RotationState,
  bans: ReadonlyArray<{ uid: string; target: string; atMs: number }>,
  nowMs: number,
  windowMs: number,
): void {
  for (const ban of bans) {
    const list = (state.bans[ban.uid] ??= []);
    list.push([ban.target, Math.min(ban.atMs, nowMs)]);
    if (list.length > MAX_BANS_PER_MEMBER) list.splice(0, list.length - MAX_BANS_PER_MEMBER);
  }
  for (const [uid, list] of Object.entries(state.bans)) {
    const kept = list.filter(([, at]) => nowMs - at <= windowMs);
    if (kept.length === 0) delete state.bans[uid];
    else state.bans[uid] = kept;
  }
}

/** The members whose bans within the window reach the rule, not yet marked. */
export function bannedOut(state: RotationState, rule: NonNullable<PoolRotation['afterBans']>): string[] {
  const out: string[] = [];
  for (const [uid, list] of Object.entries(state.bans)) {
    if (state.marked[uid]) continue;
    if (list.length >= rule.reports && new Set(list.map(([target]) => target)).size >= rule.distinctTargets)
      out.push(uid);
  }
  return out;
}

/**
 * Marks members due at `nowMs`: by age (spec.rotation.maxAge), or because
 * their provider ends them soon (status.expiresAt, with or without a
 * rotation spec; `drainMs` is the pool's drain timeout). Forgets marks and
 * tallies of members gone or deleting, and, without a rotation spec, every
 * mark but Expiring. Returns when the next unmarked member falls due.
 */
export function markDue(
  state: RotationState,
  members: readonly PoolMember[],
  rotation: PoolRotation | undefined,
  nowMs: number,
  drainMs: number,
): { nextDueAtMs?: number } {
  const live = new Set(members.filter((m) => !m.deleting).map((m) => m.uid));
  for (const [uid, reason] of Object.entries(state.marked))
    if (!live.has(uid) || (!rotation && reason !== 'Expiring')) delete state.marked[uid];
  for (const uid of Object.keys(state.bans)) if (!live.has(uid)) delete state.bans[uid];
  let nextDueAtMs: number | undefined;
  for (const m of members) {
    if (m.deleting || state.marked[m.uid]) continue;
    const byAge = rotation?.maxAgeMs === undefined ? undefined : ageDueAtMs(m, rotation.maxAgeMs);
    const byEnd = expiryDueAtMs(m, drainMs);
    const [due, reason]: [number | undefined, RotationReason] =
      byEnd !== undefined && (byAge === undefined || byEnd <= byAge)
        ? [byEnd, 'Expiring']
        : [byAge, 'MaxAge'];
    if (due === undefined) continue;
    if (due <= nowMs) state.marked[m.uid] = reason;
    else if (nextDueAtMs === undefined || due < nextDueAtMs) nextDueAtMs = due;
  }
  return nextDueAtMs === undefined ? {} : { nextDueAtMs };
}

export function markBanned(state: RotationState, uids: readonly string[]): void {
  for (const uid of uids) state.marked[uid] = 'Banned' satisfies RotationReason;
}
