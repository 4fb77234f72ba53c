import Database from 'better-sqlite3';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startDrain, type Drain, type EventOutcome } from '../../src/drain/loop.js';
import { effectEnvironment } from '../../src/effects/exec.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { ingestOne, ingestStatements } from '../../src/store/sqlite/ingest.js';
import { makeConfig, tempDir, waitFor } from '../helpers.js';
import { appendKey, inspect, lines, newEvent, silent } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

describe('the drain loop', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  let drain: Drain | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-loop-');
  });
  afterEach(async () => {
    await drain?.stop(1000);
    drain = undefined;
    await store.close();
    tmp.cleanup();
  });

  const setup = (pollMs: number, effect: Record<string, unknown>) => {
    const config = makeConfig(
      { sources: { shop }, drain: { pollMs, leaseSeconds: 60 }, routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect }] },
      tmp.dir,
    );
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000, blockingBusyMs: 5 });
    const events: EventOutcome[] = [];
    drain = startDrain({ config, store, logger: silent, onEvent: (e) => events.push(e) });
    return { config, events };
  };

  it('wakes at once on wake(), long before its poll interval', async () => {
    const out = join(tmp.dir, 'out.txt');
    const { events } = setup(60_000, { exec: appendKey(out) });
    await new Promise((r) => setTimeout(r, 50)); // the loop has found nothing and sleeps for a minute
    const t0 = Date.now();
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    drain!.wake();
    await waitFor(() => (events.length > 0 ? events : undefined), 'the event');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(events).toMatchObject([{ eventId: 1, status: 'done' }]);
    expect(lines(out)).toEqual(['o1']);
  });

  it('picks up events another process wrote (a replay) by polling, and drains a backlog in id order', async () => {
    const out = join(tmp.dir, 'out.txt');
    const { config, events } = setup(50, { exec: appendKey(out) });
    // Another connection, as `replay` or a second `serve` would write: no wake().
    const other = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    for (let i = 1; i <= 5; i++)
      await other.ingest(newEvent({ source: 'shop', deliveryId: `e${i}`, eventType: 't', body: { order: `o${i}` }, receivedAt: Date.now() }));
    await other.close();
    await waitFor(() => (events.length === 5 ? events : undefined), 'five events');
    expect(lines(out)).toEqual(['o1', 'o2', 'o3', 'o4', 'o5']);
  });

  it('sleeps until a retry is due, when that is sooner than the poll interval', async () => {
    const { config, events } = setup(60_000, { exec: ['true'] });
    await new Promise((r) => setTimeout(r, 50));
    const db = inspect(config.database);
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    db.db.prepare('UPDATE events SET next_attempt_at = ?').run(Date.now() + 300);
    drain!.wake(); // finds nothing due, then sleeps about 300 ms rather than a minute
    await waitFor(() => (events.length > 0 ? events : undefined), 'the retry', 3000);
    db.close();
  });

  it('two drain loops on one file, many deliveries about few business keys: each key runs once', async () => {
    const out = join(tmp.dir, 'out.txt');
    const config = makeConfig(
      {
        sources: { shop },
        // One lane at a time per drain, two lanes: the drains share the work.
        drain: { pollMs: 10, leaseSeconds: 60, maxConcurrent: 1 },
        retry: { maxAttempts: 50, baseSeconds: 0.05, maxSeconds: 0.2 },
        routes: ['licence', 'mail'].map((name) => ({
          name,
          source: 'shop',
          key: '{body.order}',
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_RUN_KEY" >> "$1"; sleep 0.01', 'sh', out] },
        })),
      },
      tmp.dir,
    );
    store = new SqliteStore(config.database, { busyTimeoutMs: 5000, blockingBusyMs: 5 });
    const second = new SqliteStore(config.database, { busyTimeoutMs: 5000, blockingBusyMs: 5 });
    const done = new Set<string>();
    const byDrain = { one: 0, two: 0 };
    const onEvent = (which: 'one' | 'two') => (e: EventOutcome) => {
      byDrain[which]++;
      if (e.status === 'done') done.add(`${e.eventId}:${e.route}`);
    };
    for (let i = 0; i < 60; i++) {
      await store.ingest(newEvent({ source: 'shop', deliveryId: `e${i}`, eventType: 't', body: { order: `o${i % 20}` }, receivedAt: Date.now() }));
    }
    drain = startDrain({ config, store, logger: silent, onEvent: onEvent('one'), id: 'one' });
    const other = startDrain({ config, store: second, logger: silent, onEvent: onEvent('two'), id: 'two' });
    try {
      await waitFor(() => (done.size === 120 ? true : undefined), 'both routes of all 60 events', 20_000);
    } finally {
      await other.stop(1000);
      await second.close();
    }
    // Both drains did real work (they raced for the same events and keys).
    expect(byDrain.one).toBeGreaterThan(5);
    expect(byDrain.two).toBeGreaterThan(5);
    const got = lines(out).sort();
    expect(got).toHaveLength(40);
    expect(new Set(got).size).toBe(40);
    const db = inspect(config.database);
    expect(db.db.prepare(`SELECT count(*) AS n, sum(runs) AS runs FROM effects WHERE status = 'done'`).get()).toEqual({ n: 40, runs: 40 });
    expect(db.db.prepare(`SELECT count(*) AS n FROM events WHERE status <> 'done' OR lease_owner IS NOT NULL`).get()).toEqual({ n: 0 });
    db.close();
  });

  it('reconfigure resolves once the loop took the configuration in: an event stored after that is planned under it, even by a look already waiting', async () => {
    const go = join(tmp.dir, 'go');
    const started = join(tmp.dir, 'started');
    const licence = {
      name: 'licence',
      source: 'shop',
      key: '{body.order}',
      effect: { exec: ['/bin/sh', '-c', `touch ${started}; while [ ! -e ${go} ]; do sleep 0.02; done`] },
    };
    const mail = { name: 'mail', source: 'shop', key: '{body.order}', effect: { exec: ['true'] } };
    const json = { sources: { shop }, drain: { pollMs: 60_000, leaseSeconds: 60 }, routes: [licence] };
    const config = makeConfig(json, tmp.dir);
    store = new SqliteStore(config.database, { busyTimeoutMs: 400, blockingBusyMs: 5 });
    drain = startDrain({ config, store, logger: silent });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    drain.wake();
    await waitFor(() => existsSync(started) || undefined, 'the licence to start');
    // Another process takes the write lock: the licence's result, written when it ends, waits
    // for it on the drain's connection, and the loop's next look waits for that connection.
    const other = new Database(config.database);
    other.pragma('busy_timeout = 5000');
    other.exec('BEGIN IMMEDIATE');
    writeFileSync(go, '');
    await sleep(150);
    drain.wake();
    await sleep(50);
    const next = makeConfig({ ...json, routes: [licence, mail] }, tmp.dir);
    await drain.reconfigure(next, effectEnvironment(next));
    // Stored once reconfigure resolved, by the other process, which then lets go of the lock.
    ingestOne(ingestStatements(other), newEvent({ source: 'shop', deliveryId: 'e2', eventType: 't', body: { order: 'o2' }, receivedAt: Date.now() }));
    other.exec('COMMIT');
    other.close();
    drain.wake();
    const db = inspect(config.database);
    const units = await waitFor(() => {
      const rows = db.db.prepare('SELECT route FROM units WHERE event_id = 2 ORDER BY route').all() as { route: string }[];
      return rows.length > 0 ? rows.map((r) => r.route) : undefined;
    }, 'the second event to be planned');
    db.close();
    expect(units).toEqual(['licence', 'mail']);
  });

  it('stop(grace): a running effect that outlives the grace is killed and left to its lease', async () => {
    const pidFile = join(tmp.dir, 'pid');
    const { config } = setup(50, { exec: ['/bin/sh', '-c', 'echo $$ > "$1"; exec sleep 30', 'sh', pidFile], timeoutSeconds: 40 });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    drain!.wake();
    const pid = await waitFor(() => {
      try {
        return Number(readFileSync(pidFile, 'utf8')) || undefined;
      } catch {
        return undefined;
      }
    }, 'the effect to start');
    const t0 = Date.now();
    await drain!.stop(200);
    drain = undefined;
    expect(Date.now() - t0).toBeLessThan(1000);
    await waitFor(() => {
      try {
        process.kill(pid, 0);
        return undefined;
      } catch {
        return true;
      }
    }, 'the effect to be killed');
    const db = inspect(config.database);
    // Nothing claims to be finished: the claim stays until its lease expires, the ledger shows the run.
    expect(db.event(1)).toMatchObject({ status: 'processing' });
    expect(db.effect('licence:o1')).toMatchObject({ status: 'running', runs: 1 });
    db.close();
  });

  it('stop(grace): an effect that finishes within the grace is recorded and the event done', async () => {
    const { config } = setup(50, { exec: ['sleep', '0.2'] });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 't', body: { order: 'o1' }, receivedAt: Date.now() }));
    drain!.wake();
    const db = inspect(config.database);
    await waitFor(() => (db.effect('licence:o1')?.status === 'running' ? true : undefined), 'the effect to start');
    await drain!.stop(5000);
    drain = undefined;
    expect(db.event(1)).toMatchObject({ status: 'done' });
    expect(db.effect('licence:o1')).toMatchObject({ status: 'done', runs: 1 });
    db.close();
  });
});
