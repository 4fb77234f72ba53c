import { ReceiverError, unavailableError } from '../../errors.js';

/** SQLite result codes that mean "try again later", answered 503 with Retry-After. */
const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|CANTOPEN|READONLY|PROTOCOL)/;

export function isBusy(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** Maps a SQLite error to a ReceiverError kind; anything unexpected stays a runtime error. */
export function sqliteError(e: unknown, what: string): ReceiverError {
  if (e instanceof ReceiverError) return e;
  const code = String((e as { code?: unknown }).code ?? '');
  if (UNAVAILABLE.test(code) || (e instanceof TypeError && /not open/.test(e.message))) {
    return unavailableError(`${what}: database unavailable (${code || (e as Error).message})`, e);
  }
  return new ReceiverError('runtime', `${what}: ${(e as Error).message}`, { cause: e });
}
