import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { migrations as pgMigrations } from '../../src/store/postgres/migrations.js';
import { migrations as sqliteMigrations } from '../../src/store/sqlite/migrations.js';
import { runCli, startServe, tempDir, writeConfig } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * An upgrade across version 9 (units and lanes) on a database written by version 8, where
 * the event was the unit of work: pending events, claimed ones (one under an expired lease,
 * one under a lease still live), dead ones and done ones, with the effect ledger such a
 * drain leaves. A real `receiver serve` migrates it and drains it through two routes, each
 * an exec effect that appends its effect key, event id and time to a file; `receiver
 * replay` brings the dead ones back. Every event ends done, every effect the ledger has
 * done is skipped, every other one runs once, nothing runs before a live lease ends.
 */

const VERSION = 8;
const SECRET = 'upgrade-secret';
const ROUTES = ['licence', 'deploy'] as const;
const WAIT_MS = 30_000;

/** A database at version 8, with `?` placeholders on both stores. */
interface OldDb {
  /** `sql` ends with RETURNING id. */
  insert(sql: string, params: unknown[]): Promise<number>;
  run(sql: string, params?: unknown[]): Promise<void>;
  all<T>(sql: string, params?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

function sqliteAtVersion8(file: string): OldDb {
  const raw = new Database(file);
  raw.transaction(() => {
    for (const m of sqliteMigrations.filter((x) => x.version <= VERSION)) {
      raw.exec(m.sql);
      m.apply?.(raw);
    }
    raw.pragma(`user_version = ${VERSION}`);
  })();
  return sqliteDb(raw);
}

function sqliteDb(raw: Database.Database): OldDb {
  return {
    insert: async (sql, params) => (raw.prepare(sql).get(...params) as { id: number }).id,
    run: async (sql, params = []) => void raw.prepare(sql).run(...params),
    all: async <T>(sql: string, params: unknown[] = []) => raw.prepare(sql).all(...params) as T[],
    close: async () => void raw.close(),
  };
}

async function postgresAtVersion8(db: TestDatabase): Promise<OldDb> {
  await db.query('CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
  for (const m of pgMigrations.filter((x) => x.version <= VERSION)) {
    await db.query(m.sql);
    await db.query('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [m.version, m.name]);
  }
  return postgresDb(db);
}

function postgresDb(db: TestDatabase): OldDb {
  const numbered = (sql: string) => {
    let n = 0;
    return sql.replace(/\?/g, () => `$${++n}`);
  };
  return {
    insert: async (sql, params) => (await db.query<{ id: number }>(numbered(sql), params))[0]!.id,
    run: async (sql, params = []) => void (await db.query(numbered(sql), params)),
    all: async <T>(sql: string, params: unknown[] = []) => (await db.query(numbered(sql), params)) as T[],
    close: async () => {},
  };
}

interface OldEvent {
  order: string;
  status: 'pending' | 'processing' | 'done' | 'dead';
  attempts: number;
  nextAttemptAt: number;
  leaseExpiresAt?: number;
  lastError?: string;
  /** Ledger rows (and the attempt rows that wrote them), by route. */
  ledger?: Partial<Record<(typeof ROUTES)[number], 'done' | 'failed' | 'running'>>;
}

/** Writes the rows a version 8 receiver wrote for the event; returns its id. */
async function seed(db: OldDb, e: OldEvent, now: number): Promise<number> {
  const body = Buffer.from(JSON.stringify({ id: e.order, type: 'order.paid', order: e.order }));
  const finished = e.status === 'done' || e.status === 'dead';
  const id = await db.insert(
    `INSERT INTO events (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body,
       attempts, next_attempt_at, lease_owner, lease_expires_at, last_error, finished_at, route_decisions)
     VALUES ('shop', ?, 'order.paid', ?, ?, ?, ?, ?, 202, NULL, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
    [
      e.order,
      e.status,
      now - 60_000,
      JSON.stringify({ 'content-type': 'application/json' }),
      body,
      createHash('sha256').update(body).digest('hex'),
      e.attempts,
      e.nextAttemptAt,
      e.status === 'processing' ? 'old-host:4242:drain' : null,
      e.leaseExpiresAt ?? null,
      e.lastError ?? null,
      finished ? now - 30_000 : null,
      e.attempts > 0 ? ROUTES.map((r) => `${r}: applies (key "${e.order}")`).join('\n') : null,
    ],
  );
  for (const [route, status] of Object.entries(e.ledger ?? {})) {
    const key = `${route}:${e.order}`;
    await db.run(
      `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at, last_error) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)`,
      [key, route, e.order, status, id, now - 50_000, status === 'running' ? null : now - 49_000, status === 'failed' ? 'exit 1' : null],
    );
    await db.run(
      `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, run_key) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)`,
      [id, route, key, now - 50_000, status === 'running' ? null : now - 49_000, status === 'done' ? 'ok' : status, status === 'failed' ? 'exit 1' : null, key],
    );
  }
  return id;
}

/** The effect runs the exec effects logged: `<effect key> <event id> <ms>`. */
function runs(file: string): { key: string; eventId: number; at: number }[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const [key, eventId, at] = l.split(' ');
      return { key: key!, eventId: Number(eventId), at: Number(at) };
    });
}

async function upgradeAndDrain(database: string, dir: string, old: OldDb, reopen: () => OldDb): Promise<void> {
  const now = Date.now();
  const leaseEnd = now + 4000;
  const ids = {
    fresh: await seed(old, { order: 'p1', status: 'pending', attempts: 0, nextAttemptAt: now - 60_000 }, now),
    // Retried: its licence ran, its deploy failed; the event waited for its next attempt.
    retried: await seed(
      old,
      { order: 'p2', status: 'pending', attempts: 2, nextAttemptAt: now - 1000, lastError: 'deploy: exit 1', ledger: { licence: 'done', deploy: 'failed' } },
      now,
    ),
    // A drain that crashed mid-deploy: its licence done, its deploy marked running, its lease over.
    crashed: await seed(
      old,
      {
        order: 'p3',
        status: 'processing',
        attempts: 1,
        nextAttemptAt: now - 60_000,
        leaseExpiresAt: now - 30_000,
        ledger: { licence: 'done', deploy: 'running' },
      },
      now,
    ),
    // Claimed by a receiver that may still be running it: nothing runs before its lease ends.
    leased: await seed(old, { order: 'p4', status: 'processing', attempts: 1, nextAttemptAt: now - 60_000, leaseExpiresAt: leaseEnd }, now),
    dead: await seed(
      old,
      { order: 'd1', status: 'dead', attempts: 3, nextAttemptAt: now - 40_000, lastError: 'deploy: exit 1', ledger: { licence: 'done', deploy: 'failed' } },
      now,
    ),
    deadBare: await seed(
      old,
      { order: 'd2', status: 'dead', attempts: 3, nextAttemptAt: now - 40_000, lastError: 'licence: exit 1', ledger: { licence: 'failed' } },
      now,
    ),
    done: await seed(old, { order: 'o1', status: 'done', attempts: 1, nextAttemptAt: now - 60_000, ledger: { licence: 'done', deploy: 'done' } }, now),
  };
  const attemptsBefore = (await old.all<{ n: number }>('SELECT count(*) AS n FROM attempts'))[0]!.n;
  await old.close();

  const effectsLog = join(dir, 'effects.log');
  const config = writeConfig(dir, {
    database,
    sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
    routes: ROUTES.map((name) => ({
      name,
      source: 'shop',
      events: ['order.*'],
      key: '{body.order}',
      effect: {
        exec: ['/bin/sh', '-c', 'printf "%s %s %s\\n" "$RECEIVER_EFFECT_KEY" "$RECEIVER_EVENT_ID" "$(date +%s%3N)" >> "$1"', 'sh', effectsLog],
        timeoutSeconds: 10,
      },
    })),
    retry: { maxAttempts: 5, baseSeconds: 1, maxSeconds: 2 },
  });

  const serve = await startServe(config);
  const db = reopen();
  try {
    const statuses = async () =>
      new Map((await db.all<{ id: number; status: string }>('SELECT id, status FROM events ORDER BY id')).map((r) => [Number(r.id), r.status]));
    const settled = async (want: readonly number[], what: string) => {
      const until = Date.now() + WAIT_MS;
      for (;;) {
        const s = await statuses();
        if (want.every((id) => s.get(id) === 'done')) return s;
        if (Date.now() > until) throw new Error(`timed out waiting for ${what}: ${JSON.stringify([...s])}\n${serve.output().stderr}`);
        await sleep(50);
      }
    };
    const ranKeys = () =>
      runs(effectsLog)
        .map((r) => `${r.key} ${r.eventId}`)
        .sort();

    const first = await settled([ids.fresh, ids.retried, ids.crashed, ids.leased], 'the pending and claimed events');
    // The drain found each dead event unplanned and left it dead; the done one stays done.
    expect(first.get(ids.dead)).toBe('dead');
    expect(first.get(ids.deadBare)).toBe('dead');
    expect(first.get(ids.done)).toBe('done');
    // Each effect the ledger did not hold as done ran once; the retried and crashed events' licences were skipped.
    const beforeReplays = [
      `licence:p1 ${ids.fresh}`,
      `deploy:p1 ${ids.fresh}`,
      `deploy:p2 ${ids.retried}`,
      `deploy:p3 ${ids.crashed}`,
      `licence:p4 ${ids.leased}`,
      `deploy:p4 ${ids.leased}`,
    ];
    expect(ranKeys()).toEqual([...beforeReplays].sort());
    for (const r of runs(effectsLog).filter((x) => x.eventId === ids.leased)) expect(r.at).toBeGreaterThanOrEqual(leaseEnd);
    // The retried event's units kept its retry count: the deploy's was its third attempt.
    expect(
      await db
        .all('SELECT route, status, attempts FROM units WHERE event_id = ? ORDER BY route', [ids.retried])
        .then((r) => r.map((u) => ({ ...(u as object), attempts: Number((u as { attempts: number }).attempts) }))),
    ).toEqual([
      { route: 'deploy', status: 'done', attempts: 3 },
      { route: 'licence', status: 'done', attempts: 3 },
    ]);

    // A dead event from before the upgrade is replayed by id: its deploy runs, its licence (done) does not.
    const replayed = await runCli(['replay', '-c', config, String(ids.dead)]);
    expect(replayed.stderr).toBe('');
    expect(replayed.code).toBe(0);
    await settled([ids.dead], 'the replayed dead event');
    expect(ranKeys().filter((k) => k.startsWith('licence:d1') || k.startsWith('deploy:d1'))).toEqual([`deploy:d1 ${ids.dead}`]);
    expect((await statuses()).get(ids.deadBare)).toBe('dead');

    const rest = await runCli(['replay', '-c', config, '--dead']);
    expect(rest.code).toBe(0);
    const last = await settled([ids.deadBare], 'the dead events replayed with --dead');
    expect([...last.values()].every((s) => s === 'done')).toBe(true);
    expect(last.size).toBe(7);

    // Each effect the ledger did not hold as done ran exactly once; nothing else ran.
    expect(ranKeys()).toEqual([...beforeReplays, `deploy:d1 ${ids.dead}`, `licence:d2 ${ids.deadBare}`, `deploy:d2 ${ids.deadBare}`].sort());
    const ledger = await db.all<{ effect_key: string; status: string; runs: number }>('SELECT effect_key, status, runs FROM effects ORDER BY effect_key');
    expect(ledger.map((f) => [f.effect_key, f.status, Number(f.runs)])).toEqual([
      ['deploy:d1', 'done', 2],
      ['deploy:d2', 'done', 1],
      ['deploy:o1', 'done', 1],
      ['deploy:p1', 'done', 1],
      ['deploy:p2', 'done', 2],
      ['deploy:p3', 'done', 2],
      ['deploy:p4', 'done', 1],
      ['licence:d1', 'done', 1],
      ['licence:d2', 'done', 2],
      ['licence:o1', 'done', 1],
      ['licence:p1', 'done', 1],
      ['licence:p2', 'done', 1],
      ['licence:p3', 'done', 1],
      ['licence:p4', 'done', 1],
    ]);
    // The attempt history from before the upgrade is kept; the done event was never planned again.
    expect(Number((await db.all<{ n: number }>('SELECT count(*) AS n FROM attempts WHERE started_at < ?', [now]))[0]!.n)).toBe(attemptsBefore);
    expect(await db.all('SELECT id FROM units WHERE event_id = ?', [ids.done])).toEqual([]);
    expect(await serve.stop()).toBe(0);
  } finally {
    await serve.stop('SIGKILL');
    await db.close();
  }
}

describe('upgrade from version 8 (events as the unit of work) to units and lanes', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('SQLite: pending and claimed events run once, done effects are skipped, dead ones stay dead until replayed, nothing is lost', async () => {
    const file = join(tmp.dir, 'receiver.db');
    await upgradeAndDrain(file, tmp.dir, sqliteAtVersion8(file), () => {
      const raw = new Database(file, { readonly: true });
      raw.pragma('busy_timeout = 5000');
      return sqliteDb(raw);
    });
  }, 90_000);
});

const pgOk = await postgresAvailable();

describe.runIf(pgOk)('upgrade from version 8 to units and lanes on PostgreSQL', () => {
  const tmp = tempDir();
  let db: TestDatabase | undefined;
  afterAll(async () => {
    await db?.drop();
    tmp.cleanup();
  });

  it('pending and claimed events run once, done effects are skipped, dead ones stay dead until replayed, nothing is lost', async () => {
    db = await createTestDatabase();
    const pgdb = db;
    await upgradeAndDrain(pgdb.url, tmp.dir, await postgresAtVersion8(pgdb), () => postgresDb(pgdb));
  }, 90_000);
});
