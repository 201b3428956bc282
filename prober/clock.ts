/** Time and timers, injected so the scheduler and the prober run on a manual clock in unit tests. */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds, monotonic enough for scheduling (Date.now() in production). */
  now(): number;
  setTimer(fn: () => void, delayMs: number): TimerHandle;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(fn, delayMs) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    return { cancel: () => clearTimeout(t) };
  },
};

/** A uniform random number in [0, 1). */
export type Random = () => number;
