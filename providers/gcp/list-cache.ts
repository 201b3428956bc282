/**
 * The last complete listByTag, kept while nothing has made it stale: no
 * Compute call failed since, this provider inserted or deleted nothing
 * since, and no get saw one of its VMs otherwise. check(), and the drift
 * sweep and GC (`reuse`), may answer from it, by the entry's read budget
 * (`listCallsPerVmHour`).
 */
import type { Instance } from '../types.js';
import type { GcpConfig } from './config.js';

/**
 * A periodic reader fires on a schedule's grid: a list made at one fire is
 * due again at the fire its budget names, not one later because that fire's
 * activity started a few milliseconds earlier than the last one's.
 */
const LIST_DUE_SLACK_MS = 2_000;

export interface KeptListing {
  /** When it started (Date.now()): what it shows is at most this old. */
  at: number;
  latencyMillis: number;
  instances: Instance[];
  /** The aggregated-list pages it took (at least one per project listed). */
  pages: number;
}

export class ListCache {
  private kept: KeptListing | undefined;
  /** Bumped whenever the kept listing goes stale: a listing started before the bump is not kept. */
  private epoch = 0;

  constructor(private readonly config: Pick<GcpConfig, 'listCallsPerVmHour' | 'listMaxAgeSeconds'>) {}

  /** The kept listing is no longer what Compute would answer (or a call failed): list again next time. */
  forget(): void {
    this.kept = undefined;
    this.epoch += 1;
  }

  /** A listing starts now: the token `keep` wants back. */
  begin(): number {
    return this.epoch;
  }

  /** Keeps a listing unless something made listings stale while it ran (an insert, a delete, a failure). */
  keep(begun: number, listing: KeptListing): void {
    if (begun === this.epoch) this.kept = { ...listing, instances: listing.instances.map((i) => ({ ...i })) };
  }

  /**
   * The kept listing for a periodic reader that accepts one `withinMs`
   * older than the budget: the budget says when the list is due again (the
   * sweep, withinMs 0, lists then); a caller with a window of its own (GC)
   * takes it that much longer, by when the sweep has listed, so it never
   * lists just before the sweep would.
   */
  reusable(withinMs: number): { instances: Instance[]; ageMs: number } | undefined {
    const kept = this.kept;
    if (kept === undefined) return undefined;
    const ageMs = Date.now() - kept.at;
    if (ageMs + LIST_DUE_SLACK_MS >= this.reuseMs(kept) + withinMs) return undefined;
    return { instances: kept.instances.map((i) => ({ ...i })), ageMs };
  }

  /** The kept listing while it may stand for check()'s own call: `windowMs` past its budget. */
  recent(windowMs: number): KeptListing | undefined {
    const kept = this.kept;
    if (kept !== undefined && Date.now() - kept.at < this.reuseMs(kept) + windowMs) return kept;
    return undefined;
  }

  /**
   * How long the kept listing is fresh for a periodic reader, by the entry's
   * read budget: the listing's pages may be spent `listCallsPerVmHour`
   * times per listed VM per hour, so a small fleet lists less often (5 VMs
   * at 0.75: every 16 min) and a large one on every drift sweep; never
   * longer than `listMaxAgeSeconds`. 0 when the budget is off.
   */
  private reuseMs(kept: KeptListing): number {
    const budget = this.config.listCallsPerVmHour;
    if (budget <= 0) return 0;
    const perListMs = (kept.pages * 3_600_000) / (budget * Math.max(1, kept.instances.length));
    return Math.min(perListMs, this.config.listMaxAgeSeconds * 1000);
  }

  /**
   * A get saw this VM (or its absence): when the kept listing says
   * otherwise, it is stale (a VM that started, stopped, moved or went away
   * since), and the next periodic reader lists again rather than report
   * drift the Proxy's own poll has already seen.
   */
  noteSeen(id: string, seen: Instance | undefined): void {
    const kept = this.kept;
    if (kept === undefined) return;
    const listed = kept.instances.find((i) => i.id === id);
    if (listed === undefined && seen === undefined) return;
    if (
      listed === undefined ||
      seen === undefined ||
      listed.state !== seen.state ||
      (listed.ip ?? '') !== (seen.ip ?? '')
    )
      this.forget();
  }
}
