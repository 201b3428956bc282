import { Writable } from 'node:stream';
import { pino } from 'pino';

/** A debug-level logger whose lines a test reads back (what a provider logged, and that no secret is among it). */
export function capturedLogger(): { logger: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(
        ...chunk
          .toString('utf8')
          .split('\n')
          .filter((l) => l !== ''),
      );
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}
