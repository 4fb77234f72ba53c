import { setTimeout as sleep } from 'node:timers/promises';
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

/**
 * Calls `attempt` (which takes the write lock) until it is not refused with SQLITE_BUSY,
 * sleeping between tries so the thread (HTTP ingress) never blocks; past `deadline` (or
 * on any other error) fails as a ReceiverError naming `what`.
 */
export async function whenUnlocked<T>(what: string, deadline: number, attempt: () => T): Promise<T> {
  for (;;) {
    try {
      return attempt();
    } catch (e) {
      if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, what);
      await sleep(Math.min(10, Math.max(1, deadline - Date.now())));
    }
  }
}
