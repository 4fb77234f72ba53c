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

  it('accepts --days exactly the longest retry horizon (the keys a sender may still retry are kept that long)', async () => {
    const r = await runInProcess(['purge', '-c', config, '--days', '10', '--dry-run', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
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
      ledgerPurged: 0,
      dryRun: false,
      purgedBefore: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      bodiesDroppedBefore: null,
      ledgerPurgedBefore: null,
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

  it('says in its human output what purging costs, only when it purged something', async () => {
    const dry = await runInProcess(['purge', '-c', config, '--days', '30', '--dry-run']);
    expect(dry.stdout).toContain('Would purge 3 done event(s)');
    expect(dry.stdout).toContain('Note: A purged delivery id is forgotten');
    const r = await runInProcess(['purge', '-c', config, '--days', '30']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Purged 3 done event(s) older than 30 day(s)');
    expect(r.stdout).toContain('with 3 attempt(s) and 1 conflict(s)');
    expect(r.stdout).toContain('if its sender delivers it again, it is accepted as a new event');
    expect(r.stdout).toContain('effects are still skipped while their keys are in the effect ledger');
    // Nothing left to forget: no note.
    const again = await runInProcess(['purge', '-c', config, '--days', '30']);
    expect(again.stdout).toContain('Purged 0 done event(s)');
    expect(again.stdout).not.toContain('Note:');
    const bodies = await runInProcess(['purge', '-c', config, '--bodies-days', '10']);
    expect(bodies.stdout).toContain('Dropped body and headers of 1 done event(s)');
    expect(bodies.stdout).not.toContain('Note:');
  });

  describe('--ledger-days', () => {
    const ledger = () => db.prepare(`SELECT effect_key FROM effects ORDER BY effect_key`).pluck().all();
    beforeEach(() => {
      // No event refers to it (its event was purged long ago): goes.
      insertEffect(db, { effectKey: 'licence:orphan', eventId: 9_999, at: now - 60 * DAY });
      // Its event is still stored: stays, however old.
      insertEffect(db, { effectKey: 'licence:of-mid-done', eventId: ids.midDone!, at: now - 60 * DAY });
      // Running: a run in progress, or a crashed one that must repeat: stays.
      insertEffect(db, { effectKey: 'licence:running', eventId: 9_998, status: 'running', at: now - 60 * DAY });
      // Only old-done-1 refers to it: goes once --days has purged that event, in the same run.
      insertEffect(db, { effectKey: 'licence:freed', eventId: ids.oldDone1!, at: now - 50 * DAY });
    });

    it('deletes old finished entries no stored event refers to, after the events --days purged; says what it costs', async () => {
      const dry = await runInProcess(['purge', '-c', config, '--days', '30', '--ledger-days', '30', '--dry-run', '--json']);
      // licence:freed still has its event until --days runs.
      expect(JSON.parse(dry.stdout)).toMatchObject({ purged: 3, ledgerPurged: 1, dryRun: true });
      expect(ledger()).toHaveLength(12);

      const r = await runInProcess(['purge', '-c', config, '--days', '30', '--ledger-days', '30', '--batch-size', '1']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('Purged 2 effect ledger entries finished more than 30 day(s) ago');
      expect(r.stdout).toContain('that no stored event refers to.');
      expect(r.stdout).toContain('Note: A purged effect key is forgotten: the next event that brings it');
      expect(ledger()).not.toContain('licence:orphan');
      expect(ledger()).not.toContain('licence:freed');
      expect(ledger()).toEqual(expect.arrayContaining(['licence:of-mid-done', 'licence:running']));
      // The entries of the events just purged finished 20 days ago: too young to go.
      expect(ledger()).toHaveLength(10);

      const again = await runInProcess(['purge', '-c', config, '--ledger-days', '30', '--json']);
      expect(JSON.parse(again.stdout)).toMatchObject({ purged: 0, ledgerPurged: 0, ledgerPurgedBefore: expect.any(String), purgedBefore: null });
      const text = await runInProcess(['purge', '-c', config, '--ledger-days', '30']);
      expect(text.stdout).toContain('Purged 0 effect ledger entries');
      expect(text.stdout).not.toContain('Note:');
    });

    it('refuses N below the floor: 30 days, or twice the longest retry horizon; --force does not lower it (exit 2)', async () => {
      const short = await runCli(['purge', '-c', config, '--ledger-days', '29', '--force']);
      expect(short.code).toBe(2);
      expect(short.stdout).toBe('');
      expect(short.stderr).toContain('--ledger-days 29 is shorter than the floor of 30 days.');
      expect(short.stderr).toContain('Try: use --ledger-days 30 or more (--force does not lower this floor)');

      const long = writeConfig(tmp.dir, {
        sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: 's', deliveryId: '{body.id}', retryHorizonHours: 720 } },
      });
      const r = await runInProcess(['purge', '-c', long, '--days', '30', '--ledger-days', '45']);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('--ledger-days 45 is shorter than twice the longest retry horizon of the configured sources (720 hours, source "shop")');
      expect(r.stderr).toContain('Try: use --ledger-days 60 or more');
      expect(ledger()).toHaveLength(12);
      expect(left()).toHaveLength(8);
    });
  });

  describe('progress line', () => {
    /** A clock that moves 600 ms at every reading: the run looks slow. */
    const slowClock = () => {
      let t = now;
      return () => (t += 600);
    };

    it('on a terminal, a run longer than a second rewrites one line on stderr, then clears it', async () => {
      const r = await runInProcess(['purge', '-c', config, '--days', '30', '--batch-size', '1', '--json'], { tty: true, now: slowClock() });
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ purged: 3 });
      // Not before a second had passed (the first batch), then after each batch.
      expect(r.stderr).not.toContain('purged 1 event(s)');
      expect(r.stderr).toContain('\r\x1b[Kpurged 2 event(s)…');
      expect(r.stderr).toContain('\r\x1b[Kpurged 3 event(s)…');
      expect(r.stderr.endsWith('\r\x1b[K')).toBe(true);
    });

    it('nothing on a terminal for a quick run, and nothing at all when stderr is not a terminal', async () => {
      const quick = await runInProcess(['purge', '-c', config, '--days', '30', '--batch-size', '1'], { tty: true, now: () => now });
      expect(quick.stderr).toBe('');
      const piped = await runInProcess(['purge', '-c', config, '--days', '1', '--force', '--batch-size', '1'], { now: slowClock() });
      expect(piped.code).toBe(0);
      expect(piped.stdout).toContain('Purged 2 done event(s)');
      expect(piped.stderr).toBe('');
    });
  });

  it('usage errors name the flag and the fix (exit 2)', async () => {
    const none = await runCli(['purge', '-c', config]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('purge needs --days N');
    expect(none.stderr).toContain('--ledger-days N');
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
