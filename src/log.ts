import { pino, type Logger } from 'pino';
import { SENSITIVE_HEADERS } from './providers/registry.js';

export type { Logger };

/**
 * Paths pino censors, a second line of defence: our log lines carry ids, outcomes and
 * durations, never headers or bodies, and Secret values print as "[secret]" anyway.
 */
export const REDACT_PATHS = [
  ...['headers', 'req.headers', 'request.headers', '*.headers'].flatMap((base) => SENSITIVE_HEADERS.map((h) => `${base}["${h}"]`)),
  'secret',
  'secrets',
  'token',
  'keys',
  '*.secret',
  '*.secrets',
  '*.token',
  '*.keys',
];

/**
 * Structured JSON logs on stderr (stdout is kept for command output and --json): one
 * object per line, `level` as a word ("info", "warn", ...), `time` in ISO 8601.
 * The level comes from --log-level, $RECEIVER_LOG_LEVEL or the config's log.level.
 */
export function createLogger(level: string, destination: number = 2, options: { redact?: boolean; perTurn?: boolean } = {}): Logger {
  // Synchronous writes: a line logged just before process.exit() is not lost.
  const sink = pino.destination({ fd: destination, sync: true });
  return pino(
    {
      level,
      base: { pid: process.pid },
      // Off only for loggers whose every field is listed by hand (the per-delivery line):
      // checking ~70 paths on each line cost 7% of the ingest thread under load.
      ...(options.redact === false ? {} : { redact: { paths: REDACT_PATHS, censor: '[redacted]' } }),
      timestamp: pino.stdTimeFunctions.isoTime,
      // Words, not pino's numbers: `jq 'select(.level == "error")'` reads as it means.
      formatters: { level: (label) => ({ level: label }) },
    },
    options.perTurn === true ? perTurn(sink) : sink,
  );
}

/**
 * The lines logged during one event-loop turn, written together at the end of it with one
 * synchronous write: under load, `serve` logs a line per delivery, and the group commit
 * answers a whole batch of deliveries in one turn. One write per turn instead of one per
 * line (each a system call, and a wake-up of journald under systemd). Lines still go out
 * within the turn that logged them, and whatever is pending when the process exits is
 * written by the exit handler.
 */
export function perTurn(sink: { write(text: string): unknown }): { write(line: string): void; flush(done?: () => void): void } {
  let pending: string[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const text = pending.length === 1 ? (pending[0] as string) : pending.join('');
    pending = [];
    sink.write(text);
  };
  process.on('exit', flush);
  return {
    write(line: string) {
      pending.push(line);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    // logger.flush(): now, synchronously (serve calls it before its last line).
    flush(done?: () => void) {
      flush();
      done?.();
    },
  };
}

/**
 * A URL (postgres://, an http effect's) may carry a credential: the password in its
 * user info, or a query parameter named like one. Logs and check-config show it without.
 */
export function redactUrl(url: string): string {
  return url
    .replace(/^([a-z][a-z0-9+.-]*:\/\/)([^/?#@]*)@/i, (_m, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      return `${scheme}${colon === -1 ? '***' : `${userinfo.slice(0, colon)}:***`}@`;
    })
    .replace(/([?&][^=&#]*(?:pass|secret|token|key|sig|auth)[^=&#]*=)[^&#]*/gi, '$1***');
}
