import type { Statement } from 'better-sqlite3';
import type { Dialect, Steps, StmtResult } from '../sql.js';
import type { Db } from './open.js';

/** SQLite's answers to the shared SQL's questions (see ../sql.ts). */
export const dialect: Dialect = {
  placeholder: () => '?',
  indexedBy: (index) => ` INDEXED BY ${index}`,
  // BEGIN IMMEDIATE holds the one write lock: the rows read cannot change under us.
  lockRows: '',
  takeUnlocked: '',
  oneWriter: true,
  leasePairs: (p) => `SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS owner FROM json_each(${p})`,
  skipLocked: '',
  // Every page of the table's b-trees (the table and its indexes), summed by dbstat
  // (better-sqlite3 is built with it). Aggregate mode: one row per b-tree.
  tableBytes: (table) =>
    `SELECT coalesce(sum(pgsize), 0) AS bytes FROM dbstat('main', 1) WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = '${table}')`,
  unindexed: (column) => `+${column}`,
  idList: (p) => `SELECT value FROM json_each(${p})`,
  textList: (p) => `SELECT value FROM json_each(${p})`,
  ids: (ids) => JSON.stringify(ids),
  globMatch: (column, p) => `${column} GLOB ${p}`,
  // GLOB's own classes: a `[` in the text is matched literally as the class `[[]`.
  globPattern: (glob) => glob.replaceAll('[', '[[]'),
  // Both a BLOB: instr compares bytes.
  bytesContain: (column, p) => `instr(${column}, ${p}) > 0`,
};

const cache = new WeakMap<Db, Map<string, Statement>>();

/** Prepared once per connection and SQL text. */
export function stmt(db: Db, sql: string): Statement {
  let m = cache.get(db);
  if (m === undefined) cache.set(db, (m = new Map()));
  let s = m.get(sql);
  if (s === undefined) m.set(sql, (s = db.prepare(sql)));
  return s;
}

/**
 * Runs shared steps synchronously on `db`: inside a better-sqlite3 transaction when the
 * caller opened one, so nothing else runs on the connection between two of its statements.
 */
export function runSteps<T>(db: Db, steps: Steps<T>): T {
  for (let next = steps.next(); ;) {
    if (next.done === true) return next.value;
    const s = stmt(db, next.value.sql);
    let result: StmtResult;
    if (s.reader) {
      const rows = s.all(...next.value.params);
      result = { rows, changes: rows.length };
    } else {
      result = { rows: [], changes: s.run(...next.value.params).changes };
    }
    next = steps.next(result);
  }
}
