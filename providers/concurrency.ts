/**
 * Small concurrency helpers shared by the providers and the activities:
 * per-key serialisation, a counting semaphore and a bounded parallel map.
 */

/** Serialises async work per key (two calls for the same instance never interleave). */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

/** At most `size` runs at once (clones per node, uploads per storage); a waiter leaves when its signal aborts. */
export class Semaphore {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(size: number) {
    this.free = size;
  }

  async run<T>(signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else
      await new Promise<void>((resolve, reject) => {
        const wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          const i = this.waiting.indexOf(wake);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(signal.reason as Error);
        };
        if (signal.aborted) {
          onAbort();
          return;
        }
        this.waiting.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.free++;
    }
  }
}

/** `fn` over `items` with at most `limit` running at once; results in input order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
