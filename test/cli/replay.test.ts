import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type Database from 'better-sqlite3';
import { runCli, runInProcess, startServe, tempDir, waitFor, writeConfig } from '../helpers.js';
import { DAY, insertAttempt, insertEvent, seedDb } from '../store/ops-seed.js';

/** `receiver replay`, in-process (an unknown id also as a subprocess), judged by exit code, output and the rows it changed. */
describe('receiver replay', () => {
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
        gh: { provider: 'github', secret: 'gh-secret' },
        mg: { provider: 'mailgun', secret: 'mg-key' },
      },
    });
    db = seedDb(join(tmp.dir, 'receiver.db'));
    ids = {
      dead1: insertEvent(db, { deliveryId: 'evt_dead_1', status: 'dead', receivedAt: now - DAY, attempts: 12, lastError: 'exit 1', nextAttemptAt: now - DAY }),
      dead2: insertEvent(db, { deliveryId: 'evt_dead_2', status: 'dead', receivedAt: now - DAY, attempts: 12, lastError: 'timeout' }),
      done: insertEvent(db, { deliveryId: 'evt_done', status: 'done', receivedAt: now - DAY }),
      live: insertEvent(db, { deliveryId: 'evt_live', status: 'processing', receivedAt: now - 1000, leaseOwner: 'drain-a', leaseExpiresAt: now + 10 * 60_000 }),
    };
    insertAttempt(db, ids.dead1!, { startedAt: now - DAY, outcome: 'failed', error: 'exit 1' });
  });
  afterEach(() => {
    db.close();
    tmp.cleanup();
  });

  const row = (id: number | undefined) =>
    db.prepare(`SELECT status, attempts, next_attempt_at, last_error, lease_owner, force_effects FROM events WHERE id = ?`).get(id) as {
      status: string;
      attempts: number;
      next_attempt_at: number;
      last_error: string | null;
      lease_owner: string | null;
      force_effects: number;
    };

  it('by id: back to pending now with a fresh retry count, last_error and attempt history kept', async () => {
    const r = await runInProcess(['replay', '-c', config, String(ids.dead1), '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      replayed: [{ id: ids.dead1, source: 'stripe', deliveryId: 'evt_dead_1', previousStatus: 'dead', force: false }],
      refused: [],
    });
    const after = row(ids.dead1);
    expect(after).toMatchObject({ status: 'pending', attempts: 0, last_error: 'exit 1', lease_owner: null, force_effects: 0 });
    expect(after.next_attempt_at).toBeGreaterThanOrEqual(now);
    expect(after.next_attempt_at).toBeLessThan(Date.now() + 1000);
    expect(db.prepare(`SELECT count(*) FROM attempts WHERE event_id = ?`).pluck().get(ids.dead1)).toBe(1);
    expect(row(ids.dead2).status).toBe('dead');
  });

  it('human output says what happens next', async () => {
    const r = await runInProcess(['replay', '-c', config, String(ids.done), String(ids.dead2)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Replayed 2 event(s)');
    expect(r.stdout).toContain(`${ids.done}  stripe/evt_done (was done)`);
    expect(r.stdout).toContain('Effects already done stay skipped (add --force');
    expect(row(ids.done).status).toBe('pending');
  });

  it('by --source and --delivery', async () => {
    const r = await runInProcess(['replay', '-c', config, '--source', 'stripe', '--delivery', 'evt_done', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).replayed).toEqual([{ id: ids.done, source: 'stripe', deliveryId: 'evt_done', previousStatus: 'done', force: false }]);
    expect(row(ids.done).status).toBe('pending');
    const unknown = await runInProcess(['replay', '-c', config, '--source', 'stripe', '--delivery', 'evt_nope']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no event from source "stripe" with delivery id "evt_nope"');
  });

  it("by --delivery as the sender shows it: GitHub's GUID alone, Mailgun's Message-Id; an id in two hooks is exit 2 naming both", async () => {
    const guid = '0f9b8a76-5432-4c1d-9e8f-123456789abc';
    const push = insertEvent(db, { source: 'gh', deliveryId: `48213001:${guid}`, status: 'done', receivedAt: now - DAY });
    const mail = insertEvent(db, { source: 'mg', deliveryId: 'message:<20261130.abc@mg.example.com>', status: 'done', receivedAt: now - DAY });
    const r = await runInProcess(['replay', '-c', config, '--source', 'gh', '--delivery', guid, '--json']);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout).replayed.map((e: { id: number }) => e.id)).toEqual([push]);
    // The stored form still works, and so does the Message-Id with or without its brackets.
    expect(
      JSON.parse((await runInProcess(['replay', '-c', config, '--source', 'gh', '--delivery', `48213001:${guid}`, '--json'])).stdout).replayed,
    ).toHaveLength(1);
    for (const id of ['20261130.abc@mg.example.com', '<20261130.abc@mg.example.com>']) {
      const m = await runInProcess(['replay', '-c', config, '--source', 'mg', '--delivery', id, '--json']);
      expect(JSON.parse(m.stdout).replayed.map((e: { id: number }) => e.id)).toEqual([mail]);
    }
    // The same GUID reached two hooks: each is its own delivery, and the GUID alone names neither.
    const second = insertEvent(db, { source: 'gh', deliveryId: `48213002:${guid}`, status: 'done', receivedAt: now - DAY });
    const two = await runInProcess(['replay', '-c', config, '--source', 'gh', '--delivery', guid]);
    expect(two.code).toBe(2);
    expect(two.stderr).toBe(
      `Error: 2 events from source "gh" with delivery id "${guid}": gh/48213002:${guid} (event ${second}), gh/48213001:${guid} (event ${push})\n` +
        `Try: give the whole delivery id, or the event id: receiver replay ${second}\n`,
    );
  });

  it('a delivery id never received: exit 1, and the stored ids near it (in any source) in the message', async () => {
    insertEvent(db, { source: 'gh', deliveryId: '48213001:0f9b8a76-5432-4c1d-9e8f-123456789abc', status: 'done', receivedAt: now - DAY });
    // Cut short, in the wrong source.
    const r = await runCli(['replay', '-c', config, '--source', 'stripe', '--delivery', '0f9b8a76-5432-4c1d'], { env: {} });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `Error: no event from source "stripe" with delivery id "0f9b8a76-5432-4c1d" (never received, or purged); near matches: gh/48213001:0f9b8a76-5432-4c1d-9e8f-123456789abc (event 5)\n` +
        'Try: check the names with `receiver events list --source stripe`\n',
    );
    const none = await runInProcess(['replay', '-c', config, '--source', 'stripe', '--delivery', 'zzz_nothing']);
    expect(none.stderr).toContain('(never received, or purged); no stored delivery id near it among the 100000 newest events');
  });

  it('--dead replays every dead event and nothing else', async () => {
    const r = await runInProcess(['replay', '-c', config, '--dead', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).replayed.map((e: { id: number }) => e.id)).toEqual([ids.dead1, ids.dead2]);
    expect([row(ids.dead1).status, row(ids.dead2).status, row(ids.done).status, row(ids.live).status]).toEqual(['pending', 'pending', 'done', 'processing']);
    const none = await runInProcess(['replay', '-c', config, '--dead']);
    expect(none.code).toBe(0);
    expect(none.stdout).toBe('No dead events to replay.\n');
  });

  it('--force sets force_effects so the drain re-runs effects already done', async () => {
    const r = await runInProcess(['replay', '-c', config, String(ids.done), '--force']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Forced: effects whose key is already done run again');
    expect(row(ids.done)).toMatchObject({ status: 'pending', force_effects: 1 });
  });

  it('an unknown id: clear message, exit 1, and nothing replayed (not even the valid ids beside it)', async () => {
    const r = await runCli(['replay', '-c', config, String(ids.dead1), '424242']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('nothing was replayed: event 424242 does not exist');
    expect(row(ids.dead1).status).toBe('dead');
  });

  it('an event being processed right now: clear message naming the lease, exit 1; once its lease expired it can be replayed', async () => {
    const r = await runInProcess(['replay', '-c', config, String(ids.live), '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`event ${ids.live} is being processed right now (lease held by drain-a until`);
    expect(r.stderr).toContain('Try: wait until it finishes');
    expect(JSON.parse(r.stdout)).toEqual({
      replayed: [],
      refused: [{ id: ids.live, reason: 'processing', leaseOwner: 'drain-a', leaseExpiresAt: expect.any(String) }],
    });
    expect(row(ids.live).status).toBe('processing');

    db.prepare(`UPDATE units SET lease_expires_at = ? WHERE event_id = ?`).run(now - 1000, ids.live);
    const later = await runInProcess(['replay', '-c', config, String(ids.live)]);
    expect(later.code).toBe(0);
    expect(row(ids.live)).toMatchObject({ status: 'pending', lease_owner: null });
  });

  it('usage errors (exit 2): no target, two targets, a bad id, --source without --delivery', async () => {
    for (const args of [[], [String(ids.done), '--dead'], ['abc'], ['--source', 'stripe']]) {
      const r = await runInProcess(['replay', '-c', config, ...args]);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/Error: .*(exactly one of|not an event id|--delivery is missing)/);
    }
    expect(row(ids.done).status).toBe('done');
  });
});

/** `replay --route` against a running serve: the support ticket "re-send the licence, not the deploy". */
describe('receiver replay --route', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('runs only that route again (forced: its key is done), the other route stays done; a route the event lacks is exit 1 naming its routes', async () => {
    const append = (file: string) => ({ exec: ['/bin/sh', '-c', 'printf "%s\\n" "$RECEIVER_KEY" >> "$1"', 'sh', join(tmp.dir, file)] });
    const file = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'none', deliveryId: '{body.id}' } },
      routes: [
        { name: 'licence', source: 'shop', key: '{body.order}', effect: append('licence.txt') },
        { name: 'deploy', source: 'shop', key: '{body.order}', effect: append('deploy.txt') },
      ],
      drain: { pollMs: 50 },
    });
    const lines = (name: string) => (existsSync(join(tmp.dir, name)) ? readFileSync(join(tmp.dir, name), 'utf8').split('\n').filter(Boolean) : []);
    const serve = await startServe(file);
    try {
      const res = await fetch(`${serve.url}/webhooks/shop`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"id":"d1","order":"o1"}',
      });
      const { id } = (await res.json()) as { id: number };
      await waitFor(() => (lines('licence.txt').length === 1 && lines('deploy.txt').length === 1 ? true : undefined), 'both effects', 10_000);

      const none = await runCli(['replay', String(id), '--route', 'refund', '-c', file]);
      expect(none.code).toBe(1);
      expect(none.stderr).toContain(`event ${id} has no route "refund" (its routes: "deploy", "licence")`);
      expect((await runInProcess(['replay', '--dead', '--route', 'licence', '-c', file])).code).toBe(2);

      const r = await runCli(['replay', String(id), '--route', 'licence', '--force', '--json', '-c', file]);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ replayed: [{ id, route: 'licence', force: true, previousStatus: 'done' }], refused: [] });
      await waitFor(() => (lines('licence.txt').length === 2 ? true : undefined), 'the licence again', 10_000);
      await new Promise((w) => setTimeout(w, 300));
      expect(lines('licence.txt')).toEqual(['o1', 'o1']);
      expect(lines('deploy.txt')).toEqual(['o1']);
      const shown = JSON.parse((await runInProcess(['events', 'show', String(id), '--json', '-c', file])).stdout) as { status: string };
      expect(shown.status).toBe('done');
    } finally {
      await serve.stop();
    }
  });
});
