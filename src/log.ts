import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * Structured JSON logs on stderr (stdout is kept for command output and --json).
 * Secrets never reach here as values: the Secret class prints as "[secret]", and
 * signature headers are redacted before an event is stored or logged.
 */
export function createLogger(level: string, destination: number = 2): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: ['headers.authorization', 'headers["stripe-signature"]', 'secret', 'secrets', 'token'], censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    pino.destination({ fd: destination, sync: true }),
  );
}
