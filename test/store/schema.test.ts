import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { dumpSchema, openSqlite } from '../../src/store/sqlite/open.js';
import { LATEST_VERSION } from '../../src/store/sqlite/migrations.js';
import { REPO, tempDir } from '../helpers.js';

describe('SQLite schema and migrations', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('schema.sql is exactly what the migrations produce (run `npm run schema` after changing them)', () => {
    const db = openSqlite(':memory:', { busyTimeoutMs: 0 });
    expect(readFileSync(join(REPO, 'schema.sql'), 'utf8')).toBe(dumpSchema(db));
    db.close();
  });

  it('is in WAL mode with synchronous=FULL and the contract columns', () => {
    const db = openSqlite(join(tmp.dir, 'a.db'), { busyTimeoutMs: 100 });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('synchronous', { simple: true })).toBe(2);
    const cols = (db.prepare('PRAGMA table_info(events)').all() as { name: string }[]).map((c) => c.name);
    for (const c of ['id', 'source', 'delivery_id', 'event_type', 'status', 'received_at']) expect(cols).toContain(c);
    db.close();
  });

  it('refuses a file written by a newer receiver and leaves it byte for byte untouched', () => {
    const file = join(tmp.dir, 'newer.db');
    const raw = new Database(file);
    raw.exec('CREATE TABLE future (x)');
    raw.pragma(`user_version = ${LATEST_VERSION + 1}`);
    raw.close();
    const before = readFileSync(file);
    expect(() => openSqlite(file, { busyTimeoutMs: 100 })).toThrow(/written by a newer receiver \(schema version \d+; this receiver knows up to \d+\)/);
    expect(readFileSync(file).equals(before)).toBe(true);
  });

  it('migrates an empty file to the latest version once, and reopening changes nothing', () => {
    const file = join(tmp.dir, 'm.db');
    openSqlite(file, { busyTimeoutMs: 100 }).close();
    const db = openSqlite(file, { busyTimeoutMs: 100 });
    expect(db.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
    db.close();
  });
});
