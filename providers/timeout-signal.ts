/**
 * A caller's signal with a deadline of its own: what
 * `AbortSignal.any([signal, AbortSignal.timeout(ms)])` promises, kept.
 *
 * Node holds an `AbortSignal.timeout()` signal only weakly (its timer must
 * not keep it alive), and a composite from `AbortSignal.any()` holds its
 * sources weakly too. Once a garbage collection takes the timeout signal
 * inside a composite, its timer is cleared and the composite never aborts
 * (nodejs/node#57736; Node 20.20 here: 0 of 20 such signals fired after one
 * `gc()`). A call bounded that way hangs as long as its backend does, which
 * is exactly when the bound is needed. Here a timer of our own holds the
 * controller strongly until `clear()`. (AbortSignal.any() also grows a
 * long-lived source's dependants with every call on several Node versions,
 * nodejs/node#55351 and #64476; a listener removed by `clear()` does not.)
 */
import { getMaxListeners, setMaxListeners } from 'node:events';

/**
 * Calls in a fan-out (a listing across hypervisors, a check round across
 * providers) share their caller's signal, one listener each, each removed
 * when its call ends: Node's leak warning at 11 listeners would cry wolf.
 */
const SHARED_SIGNAL_LISTENERS = 256;

export interface TimeoutSignal {
  /** Aborts when the caller's signal does or when the deadline passes, whichever is first. */
  readonly signal: AbortSignal;
  /** True once the deadline, not the caller, ended it. */
  timedOut(): boolean;
  /** Stops the timer and forgets the caller's signal; call it when the bounded work is over. */
  clear(): void;
}

export function timeoutSignal(caller: AbortSignal, timeoutMs: number): TimeoutSignal {
  const controller = new AbortController();
  let expired = false;
  const onCaller = () => controller.abort(caller.reason);
  let timer: NodeJS.Timeout | undefined;
  if (caller.aborted) {
    controller.abort(caller.reason);
  } else {
    const limit = getMaxListeners(caller);
    if (limit !== 0 && limit < SHARED_SIGNAL_LISTENERS) setMaxListeners(SHARED_SIGNAL_LISTENERS, caller);
    caller.addEventListener('abort', onCaller, { once: true });
    timer = setTimeout(() => {
      expired = true;
      caller.removeEventListener('abort', onCaller);
      controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError'));
    }, timeoutMs);
    // Like AbortSignal.timeout: a pending deadline alone does not keep the process running.
    timer.unref();
  }
  return {
    signal: controller.signal,
    timedOut: () => expired,
    clear: () => {
      clearTimeout(timer);
      caller.removeEventListener('abort', onCaller);
    },
  };
}
