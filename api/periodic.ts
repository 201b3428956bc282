/**
 * A pass run every `everyMs` after the previous one ends (never two at
 * once), its failures logged, not thrown; the api's drain notifier and
 * pool demand reports run on it. The timer never keeps the process alive.
 */
import type { Logger } from 'pino';

export interface Periodic {
  start(): void;
  /** Stops the timer and waits for a pass under way. */
  stop(): Promise<void>;
  /** Passes completed so far (tests wait on these to see that something did not happen). */
  passes(): number;
}

export function createPeriodic(
  pass: () => Promise<void>,
  everyMs: number,
  log: Logger,
  failureMessage: string,
): Periodic {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let passes = 0;
  function schedule(): void {
    timer = setTimeout(() => {
      running = pass()
        .catch((error: unknown) =>
          log.warn({ err: error instanceof Error ? error.message : String(error) }, failureMessage),
        )
        .finally(() => {
          passes++;
          running = undefined;
          if (timer) schedule();
        });
    }, everyMs);
    timer.unref();
  }
  return {
    start() {
      if (!timer) schedule();
    },
    async stop() {
      if (timer) clearTimeout(timer);
      timer = undefined;
      await running;
    },
    passes: () => passes,
  };
}
