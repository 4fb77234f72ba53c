import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type Database from 'better-sqlite3';
import { runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';
import { count, DAY, insertAttempt, insertConflict, insertEffect, insertEvent, seedDb } from '../store/ops-seed.js';

/** `receiver purge`, in-process (refusals also as subprocesses), judged by exit code, output and the rows left. */
describe('receiver purge', () => {
  let tmp: ReturnType<typeof tempDir>;
  let config: string;
  let db: Database.Database;
  const now = Date.now();
  let ids: Record<string, number>;

  beforeEach(() => {
    tmp = tempDir();
    config = writeConfig(tmp.dir, {
      sources: {
        stripe: { provider: 'stripe', secret: 'whsec_test' },
        shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: 'shop-secret', deliveryId: '{body.id}', retryHorizonHours: 240 },
      },
    });
    db = seedDb(join(tmp.dir, 'receiver.db'));
    ids = {
      oldDone1: insertEvent(db, { deliveryId: 'old-done-1', status: 'done', receivedAt: now - 40 * DAY }),
      oldDone2: insertEvent(db, { deliveryId: 'old-done-2', status: 'done', receivedAt: now - 39 * DAY }),
      oldDone3: insertEvent(db, { source: 'shop', deliveryId: 'old-done-3', status: 'done', receivedAt: now - 38 * DAY }),
      oldPending: insertEvent(db, { deliveryId: 'old-pending', status: 'pending', receivedAt: now - 60 * DAY }),
      oldProcessing: insertEvent(db, {
        deliveryId: 'old-processing',
        status: 'processing',
        receivedAt: now - 60 * DAY,
        leaseOwner: 'w',
        leaseExpiresAt: now + 60_000,
      }),
      oldDead: insertEvent(db, { deliveryId: 'old-dead', status: 'dead', receivedAt: now - 60 * DAY, lastError: 'exit 3' }),
      midDone: insertEvent(db, { deliveryId: 'mid-done', status: 'done', receivedAt: now - 20 * DAY }),
      youngDone: insertEvent(db, { deliveryId: 'young-done', status: 'done', receivedAt: now - 2 * DAY }),
    };
    for (const [name, id] of Object.entries(ids)) {
      insertAttempt(db, id, { startedAt: now - 20 * DAY });
      insertEffect(db, { effectKey: `licence:${name}`, eventId: id, at: now - 20 * DAY });
    }
    insertConflict(db, ids.oldDone1!, now - 40 * DAY);
    insertConflict(db, ids.oldDead!, now - 40 * DAY);
    insertConflict(db, ids.midDone!, now - 20 * DAY);
  });
  afterEach(() => {
    db.close();
    tmp.cleanup();
  });

  const left = () => db.prepare(`SELECT delivery_id FROM events ORDER BY id`).pluck().all();

  it('refuses --days shorter than the longest retry horizon, naming the horizon and the source (exit 2), and deletes nothing', async () => {
    const r = await runCli(['purge', '-c', config, '--days', '9']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('--days 9 (216 hours) is shorter than the longest retry horizon of the configured sources: 240 hours (source "shop")');
    expect(r.stderr).toContain('Try: use --days 10 or more, or add --force');
    expect(left()).toHaveLength(8);
  });

  it('--force purges inside the horizon', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '1', '--force', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).purged).toBe(5);
    expect(left()).toEqual(['old-pending', 'old-processing', 'old-dead']);
  });

  it('--dry-run counts without deleting', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '30', '--bodies-days', '10', '--dry-run', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ purged: 3, bodiesDropped: 1, dryRun: true, batches: 0 });
    expect(left()).toHaveLength(8);
    expect(count(db, `SELECT count(*) FROM events WHERE body IS NULL`)).toBe(0);
  });

  it('deletes old done events in batches with their attempts and conflicts; keeps pending, processing, dead, young events and the whole ledger; exact JSON', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '30', '--batch-size', '2', '--json']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out).toEqual({
      purged: 3,
      attemptsPurged: 3,
      conflictsPurged: 1,
      bodiesDropped: 0,
      dryRun: false,
      purgedBefore: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      bodiesDroppedBefore: null,
      batchSize: 2,
      // 2 + 1: the short second batch ends the loop.
      batches: 2,
      batchMs: { median: expect.any(Number), max: expect.any(Number) },
    });
    const cutoff = Date.parse(out.purgedBefore);
    expect(Math.abs(cutoff - (now - 30 * DAY))).toBeLessThan(60_000);
    expect(left()).toEqual(['old-pending', 'old-processing', 'old-dead', 'mid-done', 'young-done']);
    expect(count(db, `SELECT count(*) FROM attempts`)).toBe(5);
    expect(count(db, `SELECT count(*) FROM attempts WHERE event_id IN (?, ?, ?)`, ids.oldDone1, ids.oldDone2, ids.oldDone3)).toBe(0);
    expect(db.prepare(`SELECT event_id FROM conflicts ORDER BY event_id`).pluck().all()).toEqual([ids.oldDead, ids.midDone]);
    expect(count(db, `SELECT count(*) FROM effects`)).toBe(8);

    // Nothing older is left: a second run purges nothing.
    const again = await runInProcess(['purge', '-c', config, '--days', '30', '--json']);
    expect(JSON.parse(again.stdout)).toMatchObject({ purged: 0, batches: 1 });
  });

  it('tiered retention: --bodies-days drops body and headers of finished events but keeps their rows and keys', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '30', '--bodies-days', '10', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ purged: 3, bodiesDropped: 1, bodiesDroppedBefore: expect.any(String) });
    expect(left()).toEqual(['old-pending', 'old-processing', 'old-dead', 'mid-done', 'young-done']);
    const rows = db
      .prepare(`SELECT delivery_id, body IS NULL AS nobody, headers IS NULL AS noheaders, length(body_sha256) AS sha FROM events ORDER BY id`)
      .all();
    expect(rows).toEqual([
      { delivery_id: 'old-pending', nobody: 0, noheaders: 0, sha: 64 },
      { delivery_id: 'old-processing', nobody: 0, noheaders: 0, sha: 64 },
      { delivery_id: 'old-dead', nobody: 0, noheaders: 0, sha: 64 },
      { delivery_id: 'mid-done', nobody: 1, noheaders: 1, sha: 64 },
      { delivery_id: 'young-done', nobody: 0, noheaders: 0, sha: 64 },
    ]);
    expect(db.prepare(`SELECT body IS NULL FROM conflicts WHERE event_id = ?`).pluck().get(ids.midDone)).toBe(1);
    expect(db.prepare(`SELECT body IS NULL FROM conflicts WHERE event_id = ?`).pluck().get(ids.oldDead)).toBe(0);
    // Bodies only: no --days needed, and no horizon guard (keys are kept).
    const bodiesOnly = await runInProcess(['purge', '-c', config, '--bodies-days', '1', '--json']);
    expect(bodiesOnly.code).toBe(0);
    expect(JSON.parse(bodiesOnly.stdout)).toMatchObject({ purged: 0, bodiesDropped: 1, purgedBefore: null });
    expect(left()).toHaveLength(5);
  });

  it('says in its human output what purging costs', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '30']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Purged 3 done event(s) older than 30 day(s)');
    expect(r.stdout).toContain('with 3 attempt(s) and 1 conflict(s)');
    expect(r.stdout).toContain('if its sender delivers it again, it is accepted as a new event');
    expect(r.stdout).toContain('effects are still skipped, because the effect ledger is never purged');
  });

  it('usage errors name the flag and the fix (exit 2)', async () => {
    const none = await runCli(['purge', '-c', config]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('purge needs --days N');
    expect(none.stderr).toContain('Try: receiver purge --days 30');
    const bad = await runInProcess(['purge', '-c', config, '--days', '30', '--batch-size', '0']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--batch-size must be a positive whole number');
    const longer = await runInProcess(['purge', '-c', config, '--days', '30', '--bodies-days', '40']);
    expect(longer.code).toBe(2);
    expect(longer.stderr).toContain('--bodies-days 40 is longer than --days 30');
    expect(left()).toHaveLength(8);
  });
});
