import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { makeConfig, tempDir } from '../helpers.js';
import { clock, drainDue, harness, inspect, newEvent } from '../drain/helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/** A licence table the module writes to, in the receiver's own database. */
const HANDLER = `
import { writeFileSync } from 'node:fs';
const note = (name, value) => writeFileSync(new URL('./' + name + '.json', import.meta.url), JSON.stringify(value));
export default async function (event, ctx) {
  await ctx.db.run('CREATE TABLE IF NOT EXISTS licences (order_id TEXT PRIMARY KEY, event_id INTEGER, attempt INTEGER)');
  await ctx.db.run('INSERT INTO licences (order_id, event_id, attempt) VALUES (?, ?, ?)', [ctx.key, event.id, ctx.attempt]);
  const rows = await ctx.db.query('SELECT count(*) AS n FROM licences WHERE order_id = ?', [ctx.key]);
  note('seen', { rows, json: event.json, effectKey: ctx.effectKey, body: event.body.toString(), deliveryId: event.deliveryId });
  if (event.json.fail === true && ctx.attempt === 1) throw new Error('payment provider said no');
  if (event.json.hang === true) {
    await new Promise((r) => setTimeout(r, 400));
    try { await ctx.db.run('INSERT INTO licences (order_id) VALUES (?)', ['late']); note('late', 'written'); }
    catch (e) { note('late', e.message); }
  }
}`;

describe('module effect', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  beforeEach(() => {
    tmp = tempDir('receiver-module-');
    mkdirSync(join(tmp.dir, 'handlers'));
    writeFileSync(join(tmp.dir, 'handlers', 'licence.mjs'), HANDLER);
  });
  afterEach(async () => {
    await store.close();
    tmp.cleanup();
  });

  const setup = async (body: Record<string, unknown>, effect: Record<string, unknown> = { module: './handlers/licence.mjs' }) => {
    const config = makeConfig({ sources: { shop }, routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect }] }, tmp.dir);
    const c = clock();
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 'order.paid', body: { order: 'o1', ...body }, receivedAt: c.now() }));
    return { h: harness(config, store, c.now), c, db: inspect(config.database) };
  };

  it('loads relative to the config file; its writes commit with the ledger row, and a second event for the key skips it', async () => {
    const { h, c, db } = await setup({});
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(db.db.prepare('SELECT order_id, event_id, attempt FROM licences').all()).toEqual([{ order_id: 'o1', event_id: 1, attempt: 1 }]);
    expect(db.effect('licence:o1')).toMatchObject({ status: 'done', runs: 1, event_id: 1 });
    expect(db.attempts(1).map((a) => a.outcome)).toEqual(['ok']);
    const seen = JSON.parse(readFileSync(join(tmp.dir, 'handlers', 'seen.json'), 'utf8')) as Record<string, unknown>;
    expect(seen).toMatchObject({ rows: [{ n: 1 }], json: { order: 'o1' }, effectKey: 'licence:o1', body: '{"order":"o1"}', deliveryId: 'e1' });

    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e2', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(db.attempts(2).map((a) => a.outcome)).toEqual(['skipped']);
    expect(db.db.prepare('SELECT count(*) AS n FROM licences').get()).toEqual({ n: 1 });
    db.close();
  });

  it('a throwing handler rolls its writes back with the ledger; the retry commits them once', async () => {
    const { h, c, db } = await setup({ fail: true });
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    // The handler inserted, then threw: the insert (and the table it created) are gone.
    expect(db.db.prepare(`SELECT name FROM sqlite_master WHERE name = 'licences'`).all()).toEqual([]);
    expect(db.effect('licence:o1')).toMatchObject({ status: 'failed', runs: 0, last_error: 'payment provider said no' });
    expect(db.event(1).last_error).toBe('licence: payment provider said no');
    c.set(db.event(1).next_attempt_at);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(db.db.prepare('SELECT order_id, attempt FROM licences').all()).toEqual([{ order_id: 'o1', attempt: 2 }]);
    expect(db.effect('licence:o1')).toMatchObject({ status: 'done', runs: 1, last_error: null });
    expect(db.attempts(1).map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [2, 'ok'],
    ]);
    db.close();
  });

  it('a handler past timeoutSeconds is rolled back, and cannot write afterwards', async () => {
    const { h, db } = await setup({ hang: true }, { module: './handlers/licence.mjs', timeoutSeconds: 0.1 });
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    expect(db.event(1).last_error).toBe('licence: module timed out after 0.1s; its writes were rolled back');
    // Reported (logs, metrics) as a timeout; recorded in attempts as failed, its error saying so.
    expect(h.attempts.map((a) => a.outcome)).toEqual(['timeout']);
    expect(db.attempts(1).map((a) => a.outcome)).toEqual(['failed']);
    // The handler's process was killed at its timeout: it never gets to try its late write.
    await new Promise((r) => setTimeout(r, 500));
    expect(existsSync(join(tmp.dir, 'handlers', 'late.json'))).toBe(false);
    expect(db.db.prepare(`SELECT name FROM sqlite_master WHERE name = 'licences'`).all()).toEqual([]);
    db.close();
  });

  it('a module that cannot load, or has no default function, is a visible failed attempt', async () => {
    writeFileSync(join(tmp.dir, 'handlers', 'nodefault.mjs'), 'export const x = 1;');
    const { h, c, db } = await setup({}, { module: './handlers/missing.mjs' });
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    expect(db.attempts(1)[0]).toMatchObject({ outcome: 'failed', effect_key: 'licence:o1' });
    expect(db.attempts(1)[0]!.error).toMatch(/^cannot load module \.\/handlers\/missing\.mjs: /);
    // Fixed by the operator: the same path now exists, and the retry loads it.
    writeFileSync(join(tmp.dir, 'handlers', 'missing.mjs'), HANDLER);
    c.set(db.event(1).next_attempt_at);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    db.close();
  });

  it("a handler cannot end the receiver's transaction", async () => {
    writeFileSync(join(tmp.dir, 'handlers', 'commit.mjs'), `export default async (e, ctx) => { await ctx.db.run('COMMIT'); }`);
    const { h, db } = await setup({}, { module: './handlers/commit.mjs' });
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    expect(db.event(1).last_error).toMatch(/do not BEGIN, COMMIT or ROLLBACK/);
    db.close();
  });
});
