import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WalSync } from '../../src/store/sqlite/wal-sync.js';
import { tempDir } from '../helpers.js';

describe('WalSync: the explicit fsync of the write-ahead log', () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir('receiver-walsync-');
  });
  afterEach(() => tmp.cleanup());

  it('callers arriving while an fsync runs share the next one; a caller after it gets a new one', async () => {
    const path = join(tmp.dir, 'r.db');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec('CREATE TABLE t (x)');
    const wal = new WalSync(path);
    try {
      const first = wal.sync();
      // Committed while the first fsync may already be running: covered by the next one.
      db.prepare('INSERT INTO t VALUES (1)').run();
      const waiting = Array.from({ length: 10 }, () => wal.sync());
      await Promise.all([first, ...waiting]);
      expect(wal.syncs).toBe(2);
      await wal.sync();
      expect(wal.syncs).toBe(3);
    } finally {
      await wal.close();
      db.close();
    }
  });

  it('no WAL file (every connection closed, checkpointed): nothing to sync, no error', async () => {
    const path = join(tmp.dir, 'r.db');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec('CREATE TABLE t (x)');
    db.close();
    const wal = new WalSync(path);
    await wal.sync();
    wal.syncBlocking();
    expect(wal.syncs).toBe(0);
    await wal.close();
  });
});
