import Database from 'better-sqlite3';
import { accessSync, constants, existsSync, mkdirSync } from 'node:fs';
import { userInfo } from 'node:os';
import { basename, dirname } from 'node:path';
import { ReceiverError } from '../../errors.js';
import { LATEST_VERSION, migrations } from './migrations.js';

export type Db = Database.Database;

/** Loads better-sqlite3's addon; the single executable sets it (it has no node_modules to find one in). */
let nativeBinding: (() => object) | undefined;

/** Every later open in this thread uses the addon `load` returns instead of node_modules' own. */
export function useNativeBinding(load: () => object): void {
  nativeBinding = load;
}

export interface OpenOptions {
  /** SQLite's own busy wait, in ms. It blocks the thread: keep it short inside `serve`. */
  busyTimeoutMs: number;
  readonly?: boolean;
}

/**
 * Opens (and creates or migrates) a receiver database file.
 * A file written by a newer receiver is refused before anything writes to it.
 */
export function openSqlite(path: string, options: OpenOptions): Db {
  if (path !== ':memory:') {
    try {
      mkdirSync(dirname(path), { recursive: true });
    } catch (e) {
      throw new ReceiverError('runtime', `cannot create the database directory ${dirname(path)}: ${errnoText(e)}`, {
        hint: `create ${dirname(path)} writable by ${processUser()}, or pass --db with another path`,
        cause: e,
      });
    }
  }
  // Outside the try: a refused addon says why itself (which directory, what to change).
  // The typings say string; better-sqlite3 also takes the loaded addon object.
  const binding = nativeBinding === undefined ? {} : { nativeBinding: nativeBinding() as unknown as string };
  let db: Db;
  try {
    db = new Database(path, { timeout: options.busyTimeoutMs, readonly: options.readonly ?? false, ...binding });
  } catch (e) {
    throw openError(path, e);
  }
  try {
    // Read before any write (journal_mode=WAL writes the header): a newer file stays untouched.
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > LATEST_VERSION) {
      throw new ReceiverError(
        'schema',
        `database ${path} was written by a newer receiver (schema version ${version}; this receiver knows up to ${LATEST_VERSION}). It was not changed.`,
        { hint: 'upgrade receiver to the version that wrote this file' },
      );
    }
    if (!options.readonly) {
      db.pragma('journal_mode = WAL');
      // FULL: a commit is on disk (WAL fsynced) before we answer 202.
      db.pragma('synchronous = FULL');
      migrate(db, version);
    }
    return db;
  } catch (e) {
    db.close();
    throw openError(path, e);
  }
}

/**
 * serve's ingest and drain connections: temporary b-trees (a GROUP BY, an ORDER BY or an IN
 * list the planner materialises) and statement journals in memory. In files, each costs
 * file system calls on every run of the statement, and the drain runs such statements for
 * every claim. Their statements sort a batch of rows at most and journal only the pages
 * one statement changes. (The operator's commands keep the default: a backup or a purge
 * may sort a whole table.)
 */
export function inMemoryTemp(db: Db): void {
  db.pragma('temp_store = MEMORY');
}

/** The user this process runs as, for messages about file permissions. */
export function processUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? '?'}`;
  }
}

function errnoText(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  if (err.code === 'EEXIST' || err.code === 'ENOTDIR') return `a part of the path is a file, not a directory (${err.code})`;
  if (err.code === undefined) return String(err.message);
  // "EACCES: permission denied, mkdir '/x'" -> "permission denied (EACCES)"
  return `${err.message.replace(/^\w+: /, '').split(',')[0] ?? ''} (${err.code})`;
}

/** Opening failed: one message that says what the file is and what to do, never a stack. */
function openError(path: string, e: unknown): ReceiverError {
  if (e instanceof ReceiverError) return e;
  const code = String((e as { code?: unknown }).code ?? '');
  const message = (e as Error).message;
  if (code === 'SQLITE_NOTADB') {
    return new ReceiverError('runtime', `${path} is not a SQLite database (${message})`, {
      hint: 'pass --db (or set "database") to the receiver database; a path that does not exist yet creates a new one',
      cause: e,
    });
  }
  if (code.startsWith('SQLITE_READONLY')) return readOnlyError(path, message, e);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) {
    return new ReceiverError('runtime', `cannot open database ${path}: another process holds its write lock (${code})`, {
      hint: 'try again in a moment; if it persists, look for a long-running command on the same file',
      cause: e,
    });
  }
  return new ReceiverError('runtime', `cannot open database ${path}: ${message}${code === '' ? '' : ` (${code})`}`, {
    hint: `check that ${path} is a database file (not a directory) and that ${processUser()} can read and write it and its directory`,
    cause: e,
  });
}

function readOnlyError(path: string, why: string, cause?: unknown): ReceiverError {
  const user = processUser();
  return new ReceiverError('runtime', `database ${path} cannot be written by ${user}: ${why}`, {
    hint: `give ${user} write access to ${dirname(path)} and to ${basename(path)}, ${basename(path)}-wal and ${basename(path)}-shm in it (after a restore done as root: chown ${user} ${dirname(path)} ${path}*)`,
    ...(cause === undefined ? {} : { cause }),
  });
}

/**
 * `serve` only, before opening: the database file, its -wal and -shm files and its
 * directory must be writable by this process. SQLite opens a file it cannot write
 * read-only without a word (then every delivery is answered 503 and every claim fails),
 * and creates <file>-wal and <file>-shm next to the file. A directory that does not exist
 * yet is created by openSqlite, which reports its own failure.
 */
export function assertWritableFiles(path: string): void {
  if (path === ':memory:') return;
  const dir = dirname(path);
  const checks: [string, string][] = [
    [dir, `its directory ${dir} is not writable (SQLite creates ${basename(path)}-wal and ${basename(path)}-shm there)`],
    [path, 'the file is not writable'],
    [`${path}-wal`, `its WAL file ${basename(path)}-wal is not writable`],
    [`${path}-shm`, `its shared-memory file ${basename(path)}-shm is not writable`],
  ];
  for (const [file, what] of checks) {
    if (!existsSync(file)) continue;
    try {
      accessSync(file, constants.W_OK);
    } catch (e) {
      throw readOnlyError(path, `${what}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`, e);
    }
  }
}

/**
 * `serve` only, after opening: writes inside a transaction and rolls it back, for what the
 * permission bits do not show (a read-only mount, a file SQLite opened read-only anyway).
 * BEGIN IMMEDIATE alone succeeds on a read-only connection: only a write is refused.
 */
export function assertWritable(db: Db, path: string): void {
  if (path === ':memory:') return;
  try {
    db.exec('BEGIN IMMEDIATE');
    try {
      // Rewrites the header field with its own value: a real page write, never committed.
      const version = db.pragma('user_version', { simple: true }) as number;
      db.pragma(`user_version = ${version}`);
    } finally {
      if (db.inTransaction) db.exec('ROLLBACK');
    }
  } catch (e) {
    const code = String((e as { code?: unknown }).code ?? '');
    // Another process writing right now: the file is writable, the lock is just taken.
    if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return;
    throw readOnlyError(path, `${(e as Error).message} (${code})`, e);
  }
}

function migrate(db: Db, from: number): void {
  for (const m of migrations) {
    if (m.version <= from) continue;
    // One transaction per migration, version bump included: a crash leaves the old version.
    db.transaction(() => {
      db.exec(m.sql);
      m.apply?.(db);
      db.pragma(`user_version = ${m.version}`);
    }).immediate();
  }
}

/** The schema as SQLite stores it, for schema.sql and its drift test. */
export function dumpSchema(db: Db): string {
  const rows = db.prepare(`SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type DESC, name`).all() as {
    sql: string;
  }[];
  return `-- Generated by \`npm run schema\` from src/store/sqlite/migrations.ts; do not edit by hand.\n-- PRAGMA user_version = ${LATEST_VERSION};\n\n${rows.map((r) => `${r.sql};`).join('\n\n')}\n`;
}
