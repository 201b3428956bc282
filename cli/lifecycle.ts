/**
 * How every long-running part and every local server stops: what a start
 * brings up is deferred, one stop each, to the scope it starts in; close()
 * stops them newest first. A start that fails closes its scope before the
 * error goes on, so nothing it brought up (an informer's watch, a listening
 * port, a child process) keeps the process alive or a port taken.
 *
 * AsyncDisposableStack's `defer` and `disposeAsync`, which Node 20 lacks,
 * plus what a process's stop needs on top: each stop is bounded (one that
 * hangs is logged and left behind, the others still run), each is logged,
 * and one that throws does not keep the rest from running.
 */
import type { Logger } from 'pino';

/** The bound on one stop when its defer names none: a backstop above every stop's own timeout. */
export const DEFAULT_STOP_TIMEOUT_MS = 30_000;

export interface LifecycleOptions {
  /** Names the scope in its log lines (`api`, `dev`, `kube-apiserver`...). */
  name: string;
  /** The bound on each stop that sets none; default DEFAULT_STOP_TIMEOUT_MS. */
  stopTimeoutMs?: number;
}

export interface DeferOptions {
  /** How long this stop may take before close() logs it and goes on to the next. */
  timeoutMs?: number;
}

interface Deferred {
  name: string;
  stop: () => unknown;
  timeoutMs: number;
}

export class Lifecycle {
  private readonly deferred: Deferred[] = [];
  private closing: Promise<void> | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly options: LifecycleOptions,
  ) {}

  /**
   * Registers how to stop something just brought up; close() runs it before
   * anything deferred earlier. Returns a function that stops it now instead
   * (logged and bounded the same way), for what is needed only during a start.
   */
  defer(name: string, stop: () => unknown, options: DeferOptions = {}): () => Promise<void> {
    if (this.closing) throw new Error(`${this.options.name}: ${name} started after the scope was closed`);
    const part: Deferred = {
      name,
      stop,
      timeoutMs: options.timeoutMs ?? this.options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS,
    };
    this.deferred.push(part);
    return async () => {
      const at = this.deferred.indexOf(part);
      if (at < 0) return;
      this.deferred.splice(at, 1);
      await this.stopOne(part);
    };
  }

  /**
   * Runs a start in this scope: when it throws, everything deferred so far
   * is stopped (newest first) and then the error goes on.
   */
  async start<T>(start: () => Promise<T>): Promise<T> {
    try {
      return await start();
    } catch (error) {
      await this.close();
      throw error;
    }
  }

  /** True once close() has been called. */
  get closed(): boolean {
    return this.closing !== undefined;
  }

  /**
   * Stops everything deferred, newest first, each within its bound; never
   * rejects (a failed or hung stop is logged). A second call waits for the
   * first one's stops and runs none again.
   */
  close(): Promise<void> {
    this.closing ??= this.stopAll();
    return this.closing;
  }

  private async stopAll(): Promise<void> {
    for (let part = this.deferred.pop(); part !== undefined; part = this.deferred.pop()) {
      await this.stopOne(part);
    }
  }

  private async stopOne(part: Deferred): Promise<void> {
    const fields = { scope: this.options.name, part: part.name };
    const started = Date.now();
    // Settles either way, so a stop left behind after its bound can fail later without an unhandled rejection.
    const stopping = Promise.resolve()
      .then(part.stop)
      .then(
        () => ({ failed: false as const }),
        (error: unknown) => ({ failed: true as const, error }),
      );
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), part.timeoutMs);
    });
    const outcome = await Promise.race([stopping, timedOut]);
    clearTimeout(timer);
    if (outcome === 'timeout') {
      this.logger.warn(
        { ...fields, timeoutMs: part.timeoutMs },
        'did not stop in time; going on with the rest',
      );
    } else if (outcome.failed) {
      this.logger.warn({ ...fields, err: describe(outcome.error) }, 'stop failed; going on with the rest');
    } else {
      this.logger.info({ ...fields, ms: Date.now() - started }, 'stopped');
    }
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
