import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { dumpSchema, openSqlite } from '../../src/store/sqlite/open.js';
import { LATEST_VERSION, migrations } from '../../src/store/sqlite/migrations.js';
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

  it('version 2 folds the conflict rows a version 1 file kept per repeat into one per differing body, counting the rest', () => {
    const file = join(tmp.dir, 'v1.db');
    const raw = new Database(file);
    raw.exec(migrations.find((m) => m.version === 1)!.sql);
    raw.pragma('user_version = 1');
    raw
      .prepare(
        `INSERT INTO events (source, delivery_id, event_type, received_at, body_sha256, response_status, next_attempt_at) VALUES ('s', 'd', 't', 1, 'a', 202, 1)`,
      )
      .run();
    const conflict = raw.prepare(`INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, body) VALUES (1, 's', 'd', ?, ?, ?)`);
    for (const [at, sha] of [
      [10, 'b'],
      [11, 'c'],
      [12, 'b'],
      [13, 'b'],
    ] as const)
      conflict.run(at, sha, Buffer.from(sha));
    raw.close();
    const db = openSqlite(file, { busyTimeoutMs: 100 });
    expect(db.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
    expect(db.prepare(`SELECT received_at, body_sha256, repeats FROM conflicts ORDER BY id`).all()).toEqual([
      { received_at: 10, body_sha256: 'b', repeats: 2 },
      { received_at: 11, body_sha256: 'c', repeats: 0 },
    ]);
    db.close();
  });

  it('version 6 lets origin be test without rewriting a row: the CHECK widens in place, a connection opened before sees it, nothing else is allowed', () => {
    const file = join(tmp.dir, 'v5.db');
    const raw = new Database(file);
    for (const m of migrations.filter((x) => x.version <= 5)) raw.exec(m.sql);
    raw.pragma('user_version = 5');
    const insert = (db: Database.Database, id: string, origin: string) =>
      db
        .prepare(
          `INSERT INTO events (source, delivery_id, event_type, received_at, body_sha256, response_status, next_attempt_at, origin) VALUES ('s', ?, 't', 1, 'a', 202, 1, ?)`,
        )
        .run(id, origin);
    insert(raw, 'fetched', 'catch-up');
    expect(() => insert(raw, 'early', 'test')).toThrow(/CHECK constraint failed/);
    const root = () => raw.prepare(`SELECT rootpage FROM sqlite_schema WHERE name = 'events'`).pluck().get();
    const before = root();
    const db = openSqlite(file, { busyTimeoutMs: 100 });
    expect(db.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
    insert(raw, 'sent-test', 'test');
    expect(() => insert(db, 'other', 'email')).toThrow(/CHECK constraint failed: origin IN \('webhook', 'catch-up', 'test'\)/);
    expect(db.prepare('SELECT delivery_id, origin FROM events ORDER BY id').all()).toEqual([
      { delivery_id: 'fetched', origin: 'catch-up' },
      { delivery_id: 'sent-test', origin: 'test' },
    ]);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    // The table was not copied into a new one: its b-tree is where it was.
    expect(root()).toBe(before);
    raw.close();
    db.close();
  });
});
