import Database from 'better-sqlite3';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { WalSync } from '../../src/store/sqlite/wal-sync.js';
import { claimOne, tempDir } from '../helpers.js';
import { newEvent } from '../drain/helpers.js';

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

  it("serve's drain: an external effect's running mark is committed and synced to disk before beginEffect lets it act", async () => {
    const path = join(tmp.dir, 'r.db');
    // As serve's drain thread opens it: synchronous=NORMAL, durability by WalSync.
    const store = new SqliteStore(path, { busyTimeoutMs: 2000, explicitSync: true });
    const seen = new Database(path, { readonly: true });
    const order: string[] = [];
    const realSync = WalSync.prototype.sync;
    const spy = vi.spyOn(WalSync.prototype, 'sync').mockImplementation(function (this: WalSync) {
      // What another connection sees when the fsync starts: the running mark, committed.
      const mark = seen.prepare(`SELECT status FROM effects WHERE effect_key = 'licence:o1'`).get() as { status: string } | undefined;
      order.push(`sync starts (ledger: ${mark?.status ?? 'none'})`);
      return realSync.call(this).then(() => void order.push('sync done'));
    });
    try {
      await store.ingest(newEvent({ source: 's', deliveryId: 'd1', eventType: 't', body: {}, receivedAt: 1000 }));
      const start = { route: 'licence', businessKey: 'o1', effectKey: 'licence:o1', runToken: randomUUID(), force: false };
      // As the drain runs a claim batch: its steps share the group's transaction.
      await store.inGroup(async () => {
        const event = (await claimOne(store, 'A#1', 1000, 60_000))!;
        const d = await store.beginEffect(event.lease, event.attempt, start, 1000, 60_000);
        order.push(`effect may act (${d.action})`);
      });
      expect(order.slice(0, 3)).toEqual(['sync starts (ledger: running)', 'sync done', 'effect may act (run)']);
    } finally {
      spy.mockRestore();
      seen.close();
      await store.close();
    }
  });
});
