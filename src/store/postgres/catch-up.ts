import { catchUpOn as on } from '../catch-up-steps.js';
import type { CatchUpLock, CatchUpStore } from '../catch-up-types.js';
import { postgresError } from './errors.js';
import type { Conn } from './conn.js';
import { stepRunner } from './ops.js';
import { dialect } from './steps.js';

/** A constant first key for pg_try_advisory_lock(int, int): the catch-up lock space. */
const CATCH_UP_LOCK = 0x72636375; // "rccu"

/** Catch-up's reads and writes on PostgreSQL (../catch-up-steps.ts). */
export function catchUpOn(c: Conn): CatchUpStore {
  return { ...on(dialect, stepRunner(c)), lockCatchUp: (source) => lockCatchUp(c, source) };
}

/**
 * Several receivers share the database: one runs a source's catch-up at a time, under a
 * session advisory lock held on a connection of its own for the whole run (the sender's
 * API is asked once, not by every receiver). A receiver that dies drops its connection,
 * and with it the lock.
 */
async function lockCatchUp(c: Conn, source: string): Promise<CatchUpLock | undefined> {
  const client = await c.connect('catch-up lock');
  let locked = false;
  try {
    const r = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1, hashtext($2)) AS locked', [CATCH_UP_LOCK, source]);
    locked = r.rows[0]?.locked === true;
  } catch (e) {
    client.release(true);
    throw postgresError(e, 'catch-up lock');
  }
  if (!locked) {
    client.release();
    return undefined;
  }
  return {
    async release() {
      try {
        await client.query('SELECT pg_advisory_unlock($1, hashtext($2))', [CATCH_UP_LOCK, source]);
        client.release();
      } catch {
        // The connection is gone, and the lock with it.
        client.release(true);
      }
    },
  };
}
