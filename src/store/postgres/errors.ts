import { ReceiverError, unavailableError } from '../../errors.js';

/**
 * SQLSTATEs that mean "try again later", answered 503 with Retry-After:
 * 08 connection exceptions, 53 insufficient resources (53100 disk_full, 53300 too many
 * connections), 57P01/57P02/57P03 shutdown or not yet accepting connections, 57014
 * statement_timeout, 55P03 lock_timeout, 40001/40P01 serialization failure and deadlock
 * (retried first, see RETRYABLE), 58 I/O errors, 25P03 idle-in-transaction timeout.
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|58|57P0[123]$|57014$|55P03$|40001$|40P01$|25P03$)/;

/** Node socket errors and the pg client's own messages for a lost or absent server. */
const UNAVAILABLE_NODE = /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|ENOTFOUND)$/;
const UNAVAILABLE_MESSAGE =
  /Connection terminated|timeout exceeded when trying to connect|Query read timeout|not queryable|Cannot use a pool after calling end|the store is closed/i;

/** A transaction that lost a deadlock or serialization race may simply run again. */
const RETRYABLE = new Set(['40001', '40P01']);

function codeOf(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

export function isRetryable(e: unknown): boolean {
  return RETRYABLE.has(codeOf(e));
}

export function isUnavailable(e: unknown): boolean {
  if (e instanceof ReceiverError) return e.kind === 'unavailable';
  const code = codeOf(e);
  if (code !== '' && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_NODE.test(code))) return true;
  // AggregateError (several addresses refused) carries the code on its members.
  const inner = (e as { errors?: unknown[] } | null)?.errors;
  if (Array.isArray(inner) && inner.length > 0 && inner.every(isUnavailable)) return true;
  return e instanceof Error && UNAVAILABLE_MESSAGE.test(e.message);
}

/** Maps a pg error to a ReceiverError kind; anything unexpected stays a runtime error. */
export function postgresError(e: unknown, what: string): ReceiverError {
  if (e instanceof ReceiverError) return e;
  const code = codeOf(e);
  const message = e instanceof Error ? e.message || code : String(e);
  if (isUnavailable(e)) return unavailableError(`${what}: database unavailable (${code === '' ? message : `${code} ${message}`})`, e);
  return new ReceiverError('runtime', `${what}: ${message}${code === '' ? '' : ` (${code})`}`, { cause: e });
}

export const closedError = (what: string) => unavailableError(`${what}: database unavailable (the store is closed)`);
