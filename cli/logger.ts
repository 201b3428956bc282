import { pino, type Logger, type LevelWithSilent } from 'pino';

/**
 * One logger per process, built from validated config. Secrets never reach
 * it: the redact list is a second line of defence for fields that might
 * carry one by accident.
 */
export function createLogger(level: LevelWithSilent = 'info', name = 'egress-proxies'): Logger {
  return pino({
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
  });
}
