/**
 * Errors are values with a kind. The HTTP layer maps a kind to a status in one place
 * (src/http/app.ts); the CLI maps it to an exit code (src/cli/main.ts).
 */
export type ErrorKind =
  | 'not_found' // unknown source or event (404 / exit 1)
  | 'too_large' // body over maxBodyBytes (413)
  | 'verification' // missing or wrong signature, stale timestamp (401)
  | 'payload' // no delivery id, unparsable body where the id lives (400)
  | 'timeout' // the request did not arrive within requestTimeoutSeconds (408)
  | 'conflict' // same delivery id, different body (409)
  | 'unavailable' // database busy past its timeout, disk full, closed (503)
  | 'config' // bad configuration (exit 2)
  | 'usage' // bad CLI flags (exit 2)
  | 'schema' // database written by a newer receiver (exit 1)
  | 'runtime'; // anything else an operator must see (exit 1)

const HTTP_STATUS: Record<ErrorKind, number> = {
  not_found: 404,
  too_large: 413,
  verification: 401,
  payload: 400,
  timeout: 408,
  conflict: 409,
  unavailable: 503,
  config: 500,
  usage: 400,
  schema: 503,
  runtime: 500,
};

export class ReceiverError extends Error {
  readonly kind: ErrorKind;
  /** For config and usage errors: how to fix it ("Try: ..."). */
  readonly hint: string | undefined;

  constructor(kind: ErrorKind, message: string, options: { hint?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ReceiverError';
    this.kind = kind;
    this.hint = options.hint;
  }

  get httpStatus(): number {
    return HTTP_STATUS[this.kind];
  }
}

export const verificationError = (message: string) => new ReceiverError('verification', message);
export const payloadError = (message: string) => new ReceiverError('payload', message);
export const configError = (message: string, hint?: string) => new ReceiverError('config', message, hint === undefined ? {} : { hint });
export const unavailableError = (message: string, cause?: unknown) => new ReceiverError('unavailable', message, { cause });

export function isReceiverError(e: unknown, kind?: ErrorKind): e is ReceiverError {
  return e instanceof ReceiverError && (kind === undefined || e.kind === kind);
}
