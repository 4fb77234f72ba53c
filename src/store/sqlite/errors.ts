import { isMainThread } from 'node:worker_threads';
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
  // Off the main thread (serve's drain thread), the first few tries wait in steps of 50 us
  // to 1.6 ms without leaving the thread: the other writer (the ingest thread) holds the
  // lock for well under a millisecond, and a timer cannot wait less than one. The main
  // thread (HTTP) never blocks: it sleeps on a timer from the first try.
  let shortWaits = isMainThread ? 0 : SHORT_WAITS;
  for (let waitMs = 0.05; ; waitMs *= 2) {
    try {
      return attempt();
    } catch (e) {
      if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, what);
      if (shortWaits-- > 0) Atomics.wait(pause, 0, 0, waitMs);
      else await sleep(Math.min(10, Math.max(1, deadline - Date.now())));
    }
  }
}

/** Blocking waits before the first timer: 50 us doubling, about 3 ms in all. */
const SHORT_WAITS = 6;
const pause = new Int32Array(new SharedArrayBuffer(4));
