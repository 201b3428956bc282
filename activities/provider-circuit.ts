/**
 * One circuit per provider, shared by every workflow whose activities run in
 * this worker: when a provider's calls keep failing Transient, calls are
 * paused (they fail fast, Transient, without reaching the backend) and one
 * trial call goes through per pause. A fleet then backs off together: a
 * thousand Proxies provisioning through an outage make about one backend
 * call per pause, not one each. The drift sweep's list is the other trial:
 * it always calls, and its success closes the circuit, so recovery is seen
 * within one sweep period at the latest.
 *
 * Only Transient counts as failure: NotFound, Permanent and QuotaExceeded are
 * answers from a backend that works.
 */
import { classOf, ProviderError } from '../providers/errors.js';
import type { ProviderOperation } from '../providers/types.js';

/**
 * A call the circuit did not let through. Transient, but not worth an
 * activity retry a second later: the activity layer makes it non-retryable
 * so the workflow's own wait (a minute when steady) paces the next try, and
 * a paused provider costs one Temporal action per wait, not five.
 */
export class ProviderPausedError extends ProviderError {}

export interface CircuitOptions {
  /** Consecutive Transient failures that pause calls. */
  failuresToOpen: number;
  /** The first pause; doubled per further failure, up to maxOpenMs. */
  initialOpenMs: number;
  maxOpenMs: number;
  now: () => number;
}

export const DEFAULT_CIRCUIT_OPTIONS: Omit<CircuitOptions, 'now'> = {
  failuresToOpen: 5,
  initialOpenMs: 1_000,
  maxOpenMs: 30_000,
};

interface CircuitState {
  consecutiveFailures: number;
  /** 0 when closed. */
  openUntil: number;
  /** A trial call is out (half-open): others still fail fast. */
  trialInFlight: boolean;
  /**
   * What the last failure said (a ProviderError's own message, composed from
   * identifiers), so a paused call still shows why: without it a Proxy's
   * status read only "calls paused" while its provider had no credentials.
   */
  lastFailure?: string;
}

export interface CircuitView {
  open: boolean;
  consecutiveFailures: number;
  /** ms until the next trial call, when open. */
  retryInMs?: number;
}

export interface ProviderCircuits {
  /** Runs `call` unless `provider`'s calls are paused; records its outcome. */
  run<T>(
    provider: string,
    operation: ProviderOperation,
    instance: string,
    call: () => Promise<T>,
  ): Promise<T>;
  /** Records the outcome of a call made outside run() (the drift sweep's list): 'ok' or the error. */
  record(provider: string, outcome: unknown): void;
  view(provider: string): CircuitView;
}

export function createProviderCircuits(
  options: Partial<CircuitOptions> & { onChange?: (provider: string, view: CircuitView) => void } = {},
): ProviderCircuits {
  const opts: CircuitOptions = { ...DEFAULT_CIRCUIT_OPTIONS, now: Date.now, ...options };
  const circuits = new Map<string, CircuitState>();
  const stateOf = (provider: string): CircuitState => {
    let c = circuits.get(provider);
    if (!c) {
      c = { consecutiveFailures: 0, openUntil: 0, trialInFlight: false };
      circuits.set(provider, c);
    }
    return c;
  };
  const view = (provider: string): CircuitView => {
    const c = stateOf(provider);
    const open = c.openUntil !== 0;
    return {
      open,
      consecutiveFailures: c.consecutiveFailures,
      ...(open ? { retryInMs: Math.max(0, c.openUntil - opts.now()) } : {}),
    };
  };
  const succeeded = (provider: string): void => {
    const c = stateOf(provider);
    const wasOpen = c.openUntil !== 0;
    c.consecutiveFailures = 0;
    c.openUntil = 0;
    c.lastFailure = undefined;
    if (wasOpen) options.onChange?.(provider, view(provider));
  };
  const failed = (provider: string, outcome: unknown): void => {
    const c = stateOf(provider);
    c.consecutiveFailures += 1;
    if (outcome instanceof ProviderError && !(outcome instanceof ProviderPausedError)) {
      c.lastFailure = outcome.message.slice(0, 500);
    }
    const beyond = c.consecutiveFailures - opts.failuresToOpen;
    if (beyond < 0) return;
    const wasOpen = c.openUntil !== 0;
    const pause = Math.min(opts.initialOpenMs * 2 ** Math.min(beyond, 30), opts.maxOpenMs);
    c.openUntil = opts.now() + pause;
    if (!wasOpen) options.onChange?.(provider, view(provider));
  };
  const record = (provider: string, outcome: unknown): void => {
    if (outcome === 'ok' || classOf(outcome) !== 'Transient') succeeded(provider);
    else failed(provider, outcome);
  };

  return {
    async run(provider, operation, instance, call) {
      const c = stateOf(provider);
      let trial = false;
      if (c.openUntil !== 0) {
        const waitMs = c.openUntil - opts.now();
        if (waitMs > 0 || c.trialInFlight) {
          throw new ProviderPausedError({
            errorClass: 'Transient',
            operation,
            provider,
            instance,
            message:
              `calls paused after ${c.consecutiveFailures} consecutive transient failures; next trial in ${Math.max(0, waitMs)} ms` +
              (c.lastFailure === undefined ? '' : `; last: ${c.lastFailure}`),
          });
        }
        c.trialInFlight = true;
        trial = true;
      }
      try {
        const result = await call();
        record(provider, 'ok');
        return result;
      } catch (error) {
        record(provider, error);
        throw error;
      } finally {
        if (trial) c.trialInFlight = false;
      }
    },
    record,
    view,
  };
}
