import { createHmac } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, startServe, tempDir, writeConfig } from '../helpers.js';
import { count, DAY, insertAttempt, insertConflict, insertEffect, insertEvent, seedDb } from '../store/ops-seed.js';

/**
 * The operator's commands beside a running server, on one SQLite file: `receiver serve`
 * drains deliveries through an exec effect that appends to a file, while `purge` and
 * `replay` run as separate processes and senders keep delivering.
 */

const SECRET = 'shop-ops-secret-7c2e';
const OLD_EVENTS = 5000;

function sign(body: string): Record<string, string> {
  return { 'content-type': 'application/json', 'x-signature': createHmac('sha256', SECRET).update(body).digest('hex') };
}

describe('purge and replay while serve runs', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('no errors, no 503 to a sender, the expected rows left, replayed events done again (forced ones re-run their effect)', async () => {
    const effectsLog = join(tmp.dir, 'effects.log');
    const config = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
      routes: [
        {
          name: 'fulfil',
          source: 'shop',
          events: ['*'],
          key: '{body.order}',
          effect: { exec: ['/bin/sh', '-c', 'printf "%s %s\\n" "$RECEIVER_EFFECT_KEY" "$RECEIVER_EVENT_ID" >> "$1"', 'sh', effectsLog], timeoutSeconds: 10 },
        },
      ],
      retry: { maxAttempts: 3, baseSeconds: 1, maxSeconds: 2 },
    });
    const db = seedDb(join(tmp.dir, 'receiver.db'));
    const now = Date.now();
    // Old finished events, as months of traffic leave them: attempts, a few conflicts, ledger rows.
    db.transaction(() => {
      for (let i = 0; i < OLD_EVENTS; i++) {
        const id = insertEvent(db, {
          source: 'shop',
          deliveryId: `old-${i}`,
          status: 'done',
          receivedAt: now - 40 * DAY + i,
          body: JSON.stringify({ id: `old-${i}`, order: `old-${i}` }),
        });
        insertAttempt(db, id, { route: 'fulfil', effectKey: `fulfil:old-${i}`, startedAt: now - 40 * DAY + i });
        insertEffect(db, { effectKey: `fulfil:old-${i}`, eventId: id, at: now - 40 * DAY + i });
        if (i % 1000 === 0) insertConflict(db, id, now - 40 * DAY + i);
      }
    })();
    // Young dead events whose effect never ran (`replay --dead` brings them back).
    const deadIds = [1, 2].map((i) =>
      insertEvent(db, {
        source: 'shop',
        deliveryId: `dead-${i}`,
        eventType: 'order.paid',
        status: 'dead',
        receivedAt: now - DAY,
        attempts: 3,
        lastError: 'exit 1',
        body: JSON.stringify({ id: `dead-${i}`, type: 'order.paid', order: `dead-${i}` }),
      }),
    );

    const serve = await startServe(config);
    try {
      const post = async (id: string, order: string) => {
        const body = JSON.stringify({ id, type: 'order.paid', order });
        const res = await fetch(`${serve.url}/webhooks/shop`, { method: 'POST', headers: sign(body), body });
        const text = await res.text();
        return { status: res.status, id: res.status === 202 ? (JSON.parse(text) as { id: number }).id : undefined };
      };
      const settled = async () => {
        for (let i = 0; i < 300; i++) {
          if (count(db, `SELECT count(*) FROM events WHERE status IN ('pending', 'processing')`) === 0) return;
          await sleep(100);
        }
        throw new Error('the drain did not settle within 30 s');
      };

      // Two deliveries whose effects run once before the operator steps in.
      const a = await post('evt-a', 'order-a');
      const b = await post('evt-b', 'order-b');
      expect([a.status, b.status]).toEqual([202, 202]);
      await settled();

      // Now, all at once: senders, purge, and three replays, each its own process.
      const statuses = new Map<number | string, number>();
      const accepted: number[] = [];
      let operatorDone = false;
      let sent = 0;
      const sender = async (w: number) => {
        // Until the operator's commands are done, and at least 25 each; at most 150 each.
        for (let i = 0; i < 150 && (i < 25 || !operatorDone); i++) {
          sent += 1;
          try {
            const r = await post(`new-${w}-${i}`, `order-${w}-${i}`);
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
            if (r.id !== undefined) accepted.push(r.id);
          } catch (e) {
            statuses.set(String(e), (statuses.get(String(e)) ?? 0) + 1);
          }
        }
      };
      const senders = [0, 1, 2, 3].map(sender);
      const [purge, replayA, replayB, replayDead] = await Promise.all([
        runCli(['purge', '-c', config, '--days', '30', '--batch-size', '200', '--json']),
        runCli(['replay', '-c', config, String(a.id), '--json']),
        runCli(['replay', '-c', config, String(b.id), '--force', '--json']),
        runCli(['replay', '-c', config, '--dead', '--json']),
      ]);
      operatorDone = true;
      await Promise.all(senders);
      await settled();

      // The operator's commands.
      expect(purge.code, purge.stderr).toBe(0);
      expect(JSON.parse(purge.stdout)).toMatchObject({ purged: OLD_EVENTS, attemptsPurged: OLD_EVENTS, conflictsPurged: OLD_EVENTS / 1000 });
      for (const r of [replayA, replayB, replayDead]) expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(replayA.stdout).replayed).toEqual([{ id: a.id, source: 'shop', deliveryId: 'evt-a', previousStatus: 'done', force: false }]);
      expect(JSON.parse(replayB.stdout).replayed).toEqual([{ id: b.id, source: 'shop', deliveryId: 'evt-b', previousStatus: 'done', force: true }]);
      expect(JSON.parse(replayDead.stdout).replayed.map((e: { id: number }) => e.id)).toEqual(deadIds);

      // Every sender got a 202: no busy failure (503) surfaced.
      expect(Object.fromEntries(statuses)).toEqual({ 202: sent });
      expect(accepted).toHaveLength(sent);

      // Rows left: no old event; every new, replayed and dead-replayed event, all done.
      expect(count(db, `SELECT count(*) FROM events WHERE delivery_id LIKE 'old-%'`)).toBe(0);
      expect(count(db, `SELECT count(*) FROM attempts WHERE effect_key LIKE 'fulfil:old-%'`)).toBe(0);
      expect(count(db, `SELECT count(*) FROM conflicts`)).toBe(0);
      expect(count(db, `SELECT count(*) FROM effects WHERE effect_key LIKE 'fulfil:old-%'`)).toBe(OLD_EVENTS);
      expect(count(db, `SELECT count(*) FROM events`)).toBe(2 + 2 + sent);
      expect(db.prepare(`SELECT status, count(*) AS n FROM events GROUP BY status`).all()).toEqual([{ status: 'done', n: 2 + 2 + sent }]);

      // Effects: each once; the forced replay ran B's again, the plain replay skipped A's.
      expect(existsSync(effectsLog)).toBe(true);
      const lines = readFileSync(effectsLog, 'utf8').trim().split('\n');
      const runs = new Map<string, number>();
      for (const l of lines) runs.set(l.split(' ')[0]!, (runs.get(l.split(' ')[0]!) ?? 0) + 1);
      expect(runs.get('fulfil:order-a')).toBe(1);
      expect(runs.get('fulfil:order-b')).toBe(2);
      expect(runs.get('fulfil:dead-1')).toBe(1);
      expect(runs.get('fulfil:dead-2')).toBe(1);
      expect(lines).toHaveLength(2 + 1 + 2 + sent);
      expect([...runs.values()].every((n) => n <= 2)).toBe(true);
      expect(db.prepare(`SELECT forced FROM attempts WHERE event_id = ? ORDER BY id`).pluck().all(b.id)).toEqual([0, 1]);
      expect(db.prepare(`SELECT outcome FROM attempts WHERE event_id = ? ORDER BY id`).pluck().all(a.id)).toEqual(['ok', 'skipped']);
      expect(db.prepare(`SELECT force_effects FROM events WHERE id = ?`).pluck().get(b.id)).toBe(0);

      // The server logged no error: every line is JSON, and none is at level error or fatal
      // (the logger writes levels as words).
      const logged = serve
        .output()
        .stderr.split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { level: string });
      expect(logged.length).toBeGreaterThan(0);
      expect(logged.filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
    } finally {
      expect(await serve.stop()).toBe(0);
      db.close();
    }
  }, 90_000);
});
