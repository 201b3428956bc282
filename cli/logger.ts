import { pino, type Logger, type LevelWithSilent } from 'pino';
import { PinoPretty } from 'pino-pretty';
import { activeTraceIds } from '../tracing/seam.js';

/**
 * One logger per process, built from validated config. Secrets never reach
 * it: the redact list is a second line of defence for fields that might
 * carry one by accident.
 */
export function createLogger(
  level: LevelWithSilent = 'info',
  name = 'egress-proxies',
  /** Human-readable lines (`dev` on a terminal); JSON, one object a line, otherwise. */
  opts: { pretty?: boolean } = {},
): Logger {
  const options = {
    name,
    level,
    redact: {
      paths: [
        'token',
        '*.token',
        'cloudInit',
        '*.cloudInit',
        'authorization',
        '*.authorization',
        'req.headers.authorization',
      ],
      censor: '[redacted]',
    },
    // trace_id/span_id of the active span; nothing when tracing is off or no span is active.
    mixin: activeTraceIds,
  };
  // In-process and synchronous (not a transport worker): a line is written
  // before the process can exit, and redaction applies before formatting.
  if (opts.pretty) return pino(options, PinoPretty({ sync: true, ignore: 'pid,hostname' }));
  return pino(options);
}
