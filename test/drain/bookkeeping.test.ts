import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { makeConfig, tempDir, waitFor } from '../helpers.js';
import { drainDue, harness, inspect, lines, newEvent } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/**
 * What happens around an effect when things other than the effect go wrong: an effect that
 * cannot even be started, and a database that refuses the bookkeeping write for a while.
 */
describe('drain: failures around the effect', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  beforeEach(() => {
    tmp = tempDir('receiver-bookkeeping-');
  });
  afterEach(async () => {
    await store?.close();
    tmp.cleanup();
  });

  it('an exec effect that cannot start (NUL byte in the key, E2BIG) is a failed attempt: the event is dead at once, nothing left running', async () => {
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', events: ['*'], key: '{body.order}', effect: { exec: ['/bin/true'] } }] },
      tmp.dir,
    );
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    const now = Date.now();
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'nul', eventType: 't', body: { order: 'a\u0000b' }, receivedAt: now }));
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'big', eventType: 't', body: { order: 'x'.repeat(3_000_000) }, receivedAt: now }));
    const h = harness(config, store, Date.now);
    const outcomes = await drainDue(h);
    expect(outcomes.map((o) => o.status)).toEqual(['dead', 'dead']);
    expect(outcomes[0]?.error).toMatch(/cannot start \/bin\/true: ERR_INVALID_ARG_VALUE/);
    expect(outcomes[1]?.error).toMatch(/cannot start \/bin\/true: E2BIG/);
    const db = inspect(config.database);
    try {
      expect(db.attempts().map((a) => a.outcome)).toEqual(['failed', 'failed']);
      expect(db.attempts().every((a) => a.finished_at !== null)).toBe(true);
      const ledger = db.db.prepare('SELECT status, runs FROM effects ORDER BY effect_key').all();
      expect(ledger).toEqual([
        { status: 'failed', runs: 1 },
        { status: 'failed', runs: 1 },
      ]);
      expect(db.event(1)).toMatchObject({ status: 'dead', lease_owner: null });
    } finally {
      db.close();
    }
  });

  it('a settle write refused by a lock held past busyTimeoutMs is tried again until it lands: the effect ran once and is recorded once', async () => {
    const out = join(tmp.dir, 'licences.txt');
    const started = join(tmp.dir, 'started');
    const script = `touch "${started}"; sleep 0.2; echo "$RECEIVER_KEY" >> "${out}"`;
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', events: ['*'], key: '{body.order}', effect: { exec: ['/bin/sh', '-c', script] } }] },
      tmp.dir,
    );
    store = new SqliteStore(config.database, { busyTimeoutMs: 100, blockingBusyMs: 5 });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'd1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    const h = harness(config, store, Date.now);
    const holder = inspect(config.database);
    let released = false;
    try {
      const draining = drainDue(h);
      // Another process takes the write lock while the effect runs and keeps it for a second,
      // ten times the store's busy timeout: the finish, then the completion, are refused.
      await waitFor(() => (existsSync(started) ? true : undefined), 'the effect to start');
      holder.db.exec('BEGIN IMMEDIATE');
      setTimeout(() => {
        holder.db.exec('COMMIT');
        released = true;
      }, 1000);
      const outcomes = await draining;
      expect(released).toBe(true);
      expect(outcomes.map((o) => o.status)).toEqual(['done']);
      expect(lines(out)).toEqual(['o1']);
      expect(holder.effect('licence:o1')).toMatchObject({ status: 'done', runs: 1 });
      expect(holder.attempts(1).map((a) => a.outcome)).toEqual(['ok']);
      expect(holder.event(1)).toMatchObject({ status: 'done', attempts: 1 });
    } finally {
      if (holder.db.inTransaction) holder.db.exec('ROLLBACK');
      holder.close();
    }
  });
});
