import { closeSync, fsyncSync, openSync } from 'node:fs';
import { ReceiverError } from '../../errors.js';
import { openSqlite } from './open.js';

/** The tables a copy's rows are counted in, for the operator's "it has my events" check. */
export const BACKUP_TABLES = ['events', 'effects', 'attempts', 'conflicts'] as const;

export interface BackupResult {
  /** `PRAGMA user_version` of the database and of the copy (they are checked equal). */
  schemaVersion: number;
  rows: Record<(typeof BACKUP_TABLES)[number], number>;
}

/**
 * Copies the receiver database at `database` into `into`, a new empty file, and checks the
 * copy. `VACUUM INTO` reads one consistent snapshot in a single read transaction: in WAL
 * mode it never blocks `serve`'s writers, and a commit made meanwhile is simply not in the
 * copy. (The online backup API, better-sqlite3's `db.backup()`, copies pages in steps and
 * starts over whenever another connection writes between two steps, so a steadily busy
 * receiver can keep it from finishing.) The copy is compact, in rollback-journal mode,
 * and a plain file: no -wal or -shm beside it.
 *
 * The database is opened read-only: a backup never migrates or otherwise writes to it (a
 * backup taken before an upgrade by the new version leaves the old schema alone).
 */
export function backupSqlite(database: string, into: string, options: { busyTimeoutMs: number; onChecking?: () => void }): BackupResult {
  const source = openSqlite(database, { busyTimeoutMs: options.busyTimeoutMs, readonly: true });
  let schemaVersion: number;
  try {
    schemaVersion = source.pragma('user_version', { simple: true }) as number;
    source.prepare('VACUUM INTO ?').run(into);
  } catch (e) {
    if (e instanceof ReceiverError) throw e;
    throw new ReceiverError('runtime', `cannot copy ${database}: ${(e as Error).message}`, {
      hint: 'check the free space where the copy goes and that this user can read the database',
      cause: e,
    });
  } finally {
    source.close();
  }
  options.onChecking?.();
  const rows = verifyBackup(into, schemaVersion);
  // VACUUM INTO writes without syncing: the copy is on disk before anyone relies on it.
  const fd = openSync(into, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return { schemaVersion, rows };
}

/** The copy passes `PRAGMA integrity_check`, is at `schemaVersion`, and its rows are counted. */
export function verifyBackup(copy: string, schemaVersion: number): BackupResult['rows'] {
  const db = openSqlite(copy, { busyTimeoutMs: 0, readonly: true });
  try {
    return checkCopy(db, copy, schemaVersion);
  } catch (e) {
    if (e instanceof ReceiverError) throw e;
    // SQLite refusing to read the copy at all (SQLITE_CORRUPT) is a failed check too.
    throw new ReceiverError('runtime', `the copy ${copy} failed its integrity check: ${(e as Error).message}`, { hint: INTEGRITY_HINT, cause: e });
  } finally {
    db.close();
  }
}

const INTEGRITY_HINT = 'run the backup again; if it fails again, check the disk (dmesg) and run `receiver stats` on the database';

function checkCopy(db: ReturnType<typeof openSqlite>, copy: string, schemaVersion: number): BackupResult['rows'] {
  const problems = (db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check);
  if (problems.length !== 1 || problems[0] !== 'ok') {
    throw new ReceiverError('runtime', `the copy ${copy} failed its integrity check: ${problems.slice(0, 5).join('; ')}`, { hint: INTEGRITY_HINT });
  }
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version !== schemaVersion) {
    throw new ReceiverError('runtime', `the copy ${copy} is at schema version ${version}, the database at ${schemaVersion}`, {
      hint: 'a receiver of another version migrated the database during the backup; run the backup again',
    });
  }
  const rows = {} as BackupResult['rows'];
  for (const table of BACKUP_TABLES) {
    const exists = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(table) !== undefined;
    rows[table] = exists ? (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n : 0;
  }
  return rows;
}
