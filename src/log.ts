import { write as fsWrite, writeSync } from 'node:fs';
import { pino, type Logger } from 'pino';
import { printable } from './printable.js';
import type { LogFormat } from './vocabulary.js';

export type { Logger };

/** log.bufferBytes by default: about 15,000 lines waiting for a slow reader of stderr. */
export const LOG_BUFFER_BYTES = 4 * 1024 * 1024;

/**
 * Paths pino censors, a second line of defence: our log lines carry ids, outcomes and
 * durations, never headers or bodies, and Secret values print as "[secret]" anyway. A
 * `headers` object is censored whole, whichever headers it holds.
 */
const REDACT_PATHS = ['headers', '*.headers', 'secret', 'secrets', 'token', 'keys', '*.secret', '*.secrets', '*.token', '*.keys'];

/** Where log lines go: a whole line (or several) per write. */
export interface LineSink {
  write(text: string): void;
  /** Writes what is pending now, as far as the destination takes it (see LogWriter.flushSync). */
  flush?(): void;
  /** Lines dropped so far, for a sink that drops (LogWriter). */
  readonly dropped?: number;
}

/** How log lines look: JSON (one object per line) or pretty (one readable line, maybe coloured). */
export interface LogStyle {
  pretty: boolean;
  color: boolean;
}

export const JSON_STYLE: LogStyle = { pretty: false, color: false };

/**
 * The style `log.format` asks for: `json`, `pretty`, or `auto` (pretty when stderr is a
 * terminal, JSON otherwise: journald, a pipe, a file). Colour only on pretty lines: off when
 * $NO_COLOR is set (no-color.org), on when $FORCE_COLOR is (unless 0 or false), otherwise
 * when the terminal says it has colours.
 */
export function logStyle(
  format: LogFormat,
  stream: { isTTY?: boolean; hasColors?: () => boolean } = process.stderr,
  env: NodeJS.ProcessEnv = process.env,
): LogStyle {
  const pretty = format === 'pretty' || (format === 'auto' && stream.isTTY === true);
  if (!pretty) return JSON_STYLE;
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return { pretty, color: false };
  if (env.FORCE_COLOR !== undefined) return { pretty, color: env.FORCE_COLOR !== '0' && env.FORCE_COLOR !== 'false' };
  return { pretty, color: stream.hasColors?.() === true };
}

/**
 * Structured logs on stderr (stdout is kept for command output and --json): one JSON object
 * per line, `level` as a word ("info", "warn", ...), `time` in ISO 8601 (UTC); or, with a
 * pretty style, one readable line each (prettyLine). The level comes from --log-level,
 * $RECEIVER_LOG_LEVEL or the config's log.level. By default the lines go to the process's
 * one stderr writer (stderrWriter), which never blocks the event loop.
 */
export function createLogger(level: string, options: { redact?: boolean; style?: LogStyle; sink?: LineSink } = {}): Logger {
  const sink = options.sink ?? stderrWriter();
  const style = options.style ?? JSON_STYLE;
  const destination = {
    write: style.pretty ? (line: string) => sink.write(prettyLine(line, style.color)) : (line: string) => sink.write(line),
    // logger.flush(): what is pending goes out now (serve calls it on a fatal error).
    flush: (done?: () => void) => {
      sink.flush?.();
      done?.();
    },
  };
  return pino(
    {
      level,
      base: { pid: process.pid },
      // Off only for loggers whose every field is listed by hand (the per-delivery line, the
      // drain's per-attempt lines): the redaction pass costs time on every line it checks.
      ...(options.redact === false ? {} : { redact: { paths: REDACT_PATHS, censor: '[redacted]' } }),
      timestamp: pino.stdTimeFunctions.isoTime,
      // Words, not pino's numbers: `jq 'select(.level == "error")'` reads as it means.
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}

const ESC = '\u001b[';
const RESET = `${ESC}0m`;
const DIM = `${ESC}2m`;
const LEVEL_COLOUR: Record<string, string> = { fatal: `${ESC}35m`, error: `${ESC}31m`, warn: `${ESC}33m`, info: `${ESC}32m`, debug: DIM, trace: DIM };

/** The fields a person looks for first on a delivery or effect attempt line, in this order; the others follow. */
const FIRST_FIELDS = ['source', 'route', 'outcome', 'status', 'deliveryId', 'eventId', 'eventType', 'attempt', 'effectKey'];
const NOT_FIELDS = new Set(['time', 'level', 'msg', 'pid', 'err', 'durationMs']);

/** A value on a pretty line: bare when it is one plain word, else quoted; never a raw control character. */
function prettyValue(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? printable(v) : printable(JSON.stringify(v));
  if (typeof v === 'object' && v !== null) return printable(JSON.stringify(v));
  return String(v);
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/**
 * One JSON log line as a person reads it on a terminal:
 *   `14:03:07.412 INFO  delivery source=shop outcome=accepted status=202 deliveryId=e1 eventId=7 1.8ms`
 * local time of day, level, message, then the fields (ids and outcome first, the duration
 * last); an error's stack on the lines below. Text a sender chose (ids, event types) is
 * shown with its control characters escaped, as the CLI's text output does.
 */
export function prettyLine(json: string, color: boolean): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const paint = (code: string, text: string) => (color && code !== '' ? `${code}${text}${RESET}` : text);
  const at = new Date(typeof o.time === 'string' ? o.time : Date.now());
  const time = `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}.${pad(at.getMilliseconds(), 3)}`;
  const level = typeof o.level === 'string' ? o.level : 'info';
  const parts = [paint(DIM, time), paint(LEVEL_COLOUR[level] ?? '', level.toUpperCase().padEnd(5)), printable(String(o.msg ?? ''))];
  const keys = [...FIRST_FIELDS.filter((k) => k in o), ...Object.keys(o).filter((k) => !NOT_FIELDS.has(k) && !FIRST_FIELDS.includes(k))];
  for (const k of keys) if (o[k] !== undefined) parts.push(`${paint(DIM, `${k}=`)}${prettyValue(o[k])}`);
  const err = o.err as { message?: unknown; stack?: unknown } | string | undefined;
  if (typeof err === 'string') parts.push(`${paint(DIM, 'err=')}${prettyValue(err)}`);
  else if (err !== undefined && err !== null) parts.push(`${paint(DIM, 'err=')}${prettyValue(String(err.message ?? ''))}`);
  if (typeof o.durationMs === 'number') parts.push(`${o.durationMs}ms`);
  let text = parts.join(' ');
  if (typeof err === 'object' && err !== null && typeof err.stack === 'string' && (level === 'error' || level === 'fatal'))
    text += `\n${printable(err.stack, { keepLines: true })
      .split('\n')
      .slice(1)
      .map((l) => `    ${l.trim()}`)
      .join('\n')}`;
  return `${text}\n`;
}

/** How long to wait before trying again a write the reader is not ready for (EAGAIN). */
const RETRY_MS = 20;
/** How long the flush on exit may wait for a slow reader before it gives up on the rest. */
const EXIT_FLUSH_MS = 1000;

/**
 * Log lines in front of a file descriptor, in a bounded buffer, written without blocking
 * the event loop, so a slow reader of stderr (journald behind, a paused terminal, a full
 * pipe) never makes ingest wait. A line is queued and the queue is written at the end of
 * the event-loop turn (one system call for the lines of one turn) with an asynchronous
 * write; a reader that is not ready gets the rest a little later. While more than `maxBytes` wait, new lines are
 * dropped and counted (`dropped`, receiver_log_lines_dropped_total), and when a line fits
 * again a line "N log lines dropped" goes first. On exit, what waits is written
 * synchronously, waiting up to a second for a slow reader.
 *
 * Why not pino's own SonicBoom (pino.destination): its flushSync retries EAGAIN without
 * end, so a process whose stderr nobody reads never exits; it raises an 'error' event on
 * EPIPE instead of counting what is lost; and the bound, the count and the "dropped" line
 * would still be written here, around it.
 */
export class LogWriter implements LineSink {
  readonly #fd: number;
  #maxBytes: number;
  #style: LogStyle = JSON_STYLE;
  #queue: string[] = [];
  /** Characters queued or being written: what the bound counts. */
  #pending = 0;
  /** Bytes handed to fs.write and not yet confirmed, with the characters they came from. */
  #inFlight: { bytes: Buffer; chars: number } | undefined;
  /** An fs.write is running in libuv's thread pool (its bytes may be going out). */
  #writing = false;
  #retry: NodeJS.Timeout | undefined;
  #scheduled = false;
  /** Since the last "dropped" line. */
  #dropped = 0;
  #droppedTotal = 0;
  /** The descriptor is gone (EPIPE, EBADF): nothing more can be written. */
  #broken = false;

  constructor(fd: number, maxBytes: number = LOG_BUFFER_BYTES) {
    this.#fd = fd;
    this.#maxBytes = maxBytes;
  }

  /** log.bufferBytes and the style of the "dropped" line, once the configuration is known. */
  configure(options: { maxBytes?: number; style?: LogStyle }): void {
    if (options.maxBytes !== undefined) this.#maxBytes = options.maxBytes;
    if (options.style !== undefined) this.#style = options.style;
  }

  /** Lines dropped since the process started (the buffer was full, or stderr is gone). */
  get dropped(): number {
    return this.#droppedTotal;
  }

  write(text: string): void {
    if (this.#broken || this.#pending + text.length > this.#maxBytes) {
      this.#dropped++;
      this.#droppedTotal++;
      return;
    }
    if (this.#dropped > 0) {
      const n = this.#dropped;
      this.#dropped = 0;
      this.#push(this.#droppedLine(n));
    }
    this.#push(text);
    if (!this.#scheduled && this.#inFlight === undefined) {
      this.#scheduled = true;
      setImmediate(this.#next);
    }
  }

  /** Everything waiting, now, synchronously (a fatal error, process exit); gives up on a reader that takes no more for a second. */
  flushSync(): void {
    clearTimeout(this.#retry);
    this.#retry = undefined;
    // An fs.write running in the thread pool owns its bytes; the rest goes after them.
    const parts = [...(this.#inFlight !== undefined && !this.#writing ? [this.#inFlight.bytes] : []), Buffer.from(this.#queue.join(''))];
    if (!this.#writing) this.#inFlight = undefined;
    this.#queue = [];
    this.#pending = this.#inFlight?.chars ?? 0;
    let bytes = Buffer.concat(parts);
    const until = Date.now() + EXIT_FLUSH_MS;
    while (bytes.length > 0 && !this.#broken) {
      try {
        bytes = bytes.subarray(writeSync(this.#fd, bytes));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN' || Date.now() > until) return;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
      }
    }
  }

  flush(): void {
    this.flushSync();
  }

  #push(text: string): void {
    this.#queue.push(text);
    this.#pending += text.length;
  }

  #droppedLine(n: number): string {
    const line = JSON.stringify({ level: 'warn', time: new Date().toISOString(), pid: process.pid, dropped: n, msg: `${n} log lines dropped` });
    return this.#style.pretty ? prettyLine(line, this.#style.color) : `${line}\n`;
  }

  /** Starts writing what is queued, unless a write is under way (it calls this when done). */
  readonly #next = (): void => {
    this.#scheduled = false;
    if (this.#inFlight !== undefined || this.#queue.length === 0 || this.#broken) return;
    const text = this.#queue.length === 1 ? (this.#queue[0] as string) : this.#queue.join('');
    this.#queue = [];
    this.#inFlight = { bytes: Buffer.from(text), chars: text.length };
    this.#send();
  };

  readonly #send = (): void => {
    this.#retry = undefined;
    const inFlight = this.#inFlight;
    if (inFlight === undefined) return;
    this.#writing = true;
    fsWrite(this.#fd, inFlight.bytes, 0, inFlight.bytes.length, null, (e, written) => {
      this.#writing = false;
      // flushSync wrote or replaced it meanwhile (only on the way out).
      if (this.#inFlight !== inFlight) return;
      if (e !== null) {
        if (e.code === 'EAGAIN') {
          // The reader is behind: try again shortly; new lines queue up to the bound. The
          // timer keeps no process alive: one that is done exits, and its exit handler
          // gives the reader its last second (flushSync).
          this.#retry = setTimeout(this.#send, RETRY_MS);
          this.#retry.unref();
          return;
        }
        // stderr is closed: what waits and what comes is dropped, and counted.
        this.#broken = true;
        this.#droppedTotal += this.#queue.length + 1;
        this.#queue = [];
        this.#inFlight = undefined;
        this.#pending = 0;
        return;
      }
      if (written < inFlight.bytes.length) {
        inFlight.bytes = inFlight.bytes.subarray(written);
        this.#send();
        return;
      }
      this.#inFlight = undefined;
      this.#pending -= inFlight.chars;
      this.#next();
    });
  };
}

let stderr: LogWriter | undefined;

/**
 * The process's one writer to stderr. Every logger of the main thread writes through it,
 * and so do the drain thread's lines (it posts them here), so lines come out in the order
 * they were logged and share one bound. What waits is written when the process exits.
 */
export function stderrWriter(): LogWriter {
  if (stderr === undefined) {
    // Node opens stderr on first use; on a pipe it then writes without blocking (EAGAIN
    // when the reader is behind), which is how the writer wants it.
    void process.stderr;
    const writer = new LogWriter(2);
    process.on('exit', () => writer.flushSync());
    stderr = writer;
  }
  return stderr;
}

/**
 * A thread's log lines, handed on in batches (one per event-loop turn) to `post`: the drain
 * thread sends its lines to the main thread's stderr writer this way, so its effect lines
 * follow the delivery lines they belong to and share the writer's bound.
 */
export function batchedLines(post: (lines: string[]) => void): LineSink & { flush(): void } {
  let pending: string[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const lines = pending;
    pending = [];
    post(lines);
  };
  return {
    write(text: string) {
      pending.push(text);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    flush,
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
