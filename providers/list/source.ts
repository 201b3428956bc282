/**
 * Where a `list` provider's entries come from: its static config, or a URL
 * fetched when the list is older than `refreshSeconds` (on the next call
 * that needs it; one fetch at a time), with `If-None-Match` /
 * `If-Modified-Since` so an unchanged list costs a 304. A fetch that fails,
 * or answers something that is not a list, keeps the last good list and is
 * remembered for `check` (ProviderHealth says why). No timers: nothing runs
 * while nobody asks.
 */
import { untilAborted } from '../shared/bounded-call.js';
import { parseList, type ListConfig, type ListEntry } from './config.js';

export interface ListSnapshot {
  entries: ListEntry[];
  /** When this list was fetched (or last confirmed by a 304); 0 for a static list. */
  fetchedAtMs: number;
}

export interface SourceStatus {
  /** The last good list, if any. */
  snapshot?: ListSnapshot;
  /** Why the last refresh failed; undefined when it did not. */
  problem?: string;
  /** When it was last tried (ms). */
  triedAtMs?: number;
}

export class ListSource {
  private snapshot: ListSnapshot | undefined;
  private etag: string | undefined;
  private lastModified: string | undefined;
  private problem: string | undefined;
  private triedAtMs: number | undefined;
  private inflight: Promise<void> | undefined;

  constructor(
    private readonly config: ListConfig,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {
    if (config.entries) {
      const parsed = parseList(config.entries.join('\n'), 'lines');
      // The schema already refused a bad static entry.
      if (!('problem' in parsed)) this.snapshot = { entries: parsed, fetchedAtMs: 0 };
    }
  }

  /** A description of where the list comes from, for messages (never with credentials: a URL's userinfo is dropped). */
  get where(): string {
    if (!this.config.url) return 'the static list';
    const u = new URL(this.config.url);
    u.username = '';
    u.password = '';
    return u.toString();
  }

  status(): SourceStatus {
    return {
      ...(this.snapshot ? { snapshot: this.snapshot } : {}),
      ...(this.problem ? { problem: this.problem } : {}),
      ...(this.triedAtMs ? { triedAtMs: this.triedAtMs } : {}),
    };
  }

  /**
   * The current list, refreshed first when it is due. undefined only when
   * no list was ever read (the first fetch failed: see `status().problem`).
   */
  async current(signal: AbortSignal): Promise<ListSnapshot | undefined> {
    if (this.config.url && this.due()) {
      this.inflight ??= this.refresh().finally(() => (this.inflight = undefined));
      const inflight = this.inflight;
      await untilAborted(signal, () => inflight);
    }
    return this.snapshot;
  }

  private due(): boolean {
    const last = this.triedAtMs;
    return last === undefined || Date.now() - last >= this.config.refreshSeconds * 1000;
  }

  private async refresh(): Promise<void> {
    this.triedAtMs = Date.now();
    const headers: Record<string, string> = { accept: 'application/json, text/plain;q=0.9, */*;q=0.1' };
    if (this.snapshot && this.etag) headers['if-none-match'] = this.etag;
    if (this.snapshot && this.lastModified) headers['if-modified-since'] = this.lastModified;
    let response: Response;
    try {
      response = await this.fetchImpl(this.config.url!, {
        headers,
        signal: AbortSignal.timeout(this.config.requestTimeoutSeconds * 1000),
        redirect: 'follow',
      });
    } catch (error) {
      const code = (error as { cause?: { code?: unknown } }).cause?.code;
      this.problem = `fetching ${this.where} failed (${typeof code === 'string' ? code : error instanceof Error ? error.name : 'error'})`;
      return;
    }
    if (response.status === 304 && this.snapshot) {
      await response.body?.cancel();
      this.snapshot = { ...this.snapshot, fetchedAtMs: Date.now() };
      this.problem = undefined;
      return;
    }
    if (response.status !== 200) {
      await response.body?.cancel();
      this.problem = `${this.where} answered HTTP ${response.status}`;
      return;
    }
    let text: string;
    try {
      text = await response.text();
    } catch {
      this.problem = `reading ${this.where} failed`;
      return;
    }
    const parsed = parseList(text, this.config.format);
    if ('problem' in parsed) {
      this.problem = `${this.where} is not a usable ${this.config.format} list: ${parsed.problem}`;
      return;
    }
    this.snapshot = { entries: parsed, fetchedAtMs: Date.now() };
    this.etag = response.headers.get('etag') ?? undefined;
    this.lastModified = response.headers.get('last-modified') ?? undefined;
    this.problem = undefined;
  }
}
