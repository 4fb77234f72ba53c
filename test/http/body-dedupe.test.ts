import { createHash, createHmac, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sign as octokitSign } from '@octokit/webhooks-methods';
import Database from 'better-sqlite3';
import pg from 'pg';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations as sqliteMigrations } from '../../src/store/sqlite/migrations.js';
import { migrations as postgresMigrations } from '../../src/store/postgres/migrations.js';
import { runCli, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * Senders whose delivery id is outside the signature (GitHub, Shopify): a captured delivery
 * sent again under a fresh id is answered with the first one's stored answer and runs
 * nothing, on both stores, through `receiver serve` with deliveries signed as the senders
 * sign them (GitHub by @octokit/webhooks-methods, Stripe by its SDK, Shopify's documented
 * base64 HMAC of the body).
 */

const GH_SECRET = 'gh-dedupe-secret';
const SHOP_SECRET = 'shop-dedupe-secret';
const STRIPE_SECRET = 'whsec_dedupe_secret';
const HOUR = 3_600_000;

const pgOk = await postgresAvailable();

interface Db {
  /** Runs SQL written for both databases (no parameters); returns rows. */
  all<R = Record<string, unknown>>(sql: string): Promise<R[]>;
  close(): Promise<void>;
}

function sqliteDb(file: string): Db {
  const db = new Database(file);
  db.pragma('busy_timeout = 5000');
  return {
    all: async <R>(sql: string) => (sql.trimStart().toUpperCase().startsWith('SELECT') ? (db.prepare(sql).all() as R[]) : (db.prepare(sql).run(), [])),
    close: async () => void db.close(),
  };
}

function postgresDb(t: TestDatabase): Db {
  return {
    all: <R>(sql: string) => t.query(sql) as Promise<R[]>,
    close: async () => {},
  };
}

const pushBody = (ref = 'refs/heads/main') =>
  Buffer.from(
    JSON.stringify({
      ref,
      before: '0000000000000000000000000000000000000000',
      after: randomUUID().replaceAll('-', '').padEnd(40, '0'),
      repository: { id: 1, full_name: 'shop/site' },
      pusher: { name: 'octocat' },
    }),
  );

async function githubHeaders(body: Buffer, guid = randomUUID()): Promise<Record<string, string>> {
  return {
    'content-type': 'application/json',
    'x-github-event': 'push',
    'x-github-delivery': guid,
    'x-github-hook-id': '101',
    'x-hub-signature-256': await octokitSign(GH_SECRET, body.toString('utf8')),
  };
}

const orderBody = () => Buffer.from(JSON.stringify({ id: Math.floor(Math.random() * 1e12), name: '#1001', total_price: '19.00', currency: 'EUR' }));

function shopifyHeaders(body: Buffer, webhookId = randomUUID()): Record<string, string> {
  return {
    'content-type': 'application/json',
    'x-shopify-topic': 'orders/create',
    'x-shopify-webhook-id': webhookId,
    'x-shopify-event-id': randomUUID(),
    'x-shopify-shop-domain': 'dedupe.myshopify.com',
    'x-shopify-hmac-sha256': createHmac('sha256', SHOP_SECRET).update(body).digest('base64'),
  };
}

const stripeBody = (id: string) => Buffer.from(JSON.stringify({ id, object: 'event', type: 'invoice.paid', created: 1, data: { object: { id: `in_${id}` } } }));
const stripeHeaders = (body: Buffer, atMs: number) => ({
  'content-type': 'application/json',
  'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload: body.toString('utf8'), secret: STRIPE_SECRET, timestamp: Math.floor(atMs / 1000) }),
});

async function send(serve: ServeProcess, source: string, body: Buffer, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${serve.url}/webhooks/${source}`, { method: 'POST', headers, body: new Uint8Array(body) });
  return { status: res.status, text: await res.text() };
}

const lines = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
    : [];

function config(dir: string, database: string) {
  const deployLog = join(dir, 'deploys.log');
  const shopLog = join(dir, 'orders.log');
  const append = (file: string) => ['/bin/sh', '-c', 'printf "%s\\n" "$RECEIVER_KEY" >> "$1"', 'sh', file];
  const file = writeConfig(dir, {
    database,
    sources: {
      github: { provider: 'github', secret: GH_SECRET },
      shop: { provider: 'shopify', secret: SHOP_SECRET },
      stripe: { provider: 'stripe', secret: STRIPE_SECRET },
      // A shop whose sender sends one body as two events turns it off.
      ghoff: { provider: 'github', secret: GH_SECRET, dedupeByBody: false },
    },
    routes: [
      // The README's deploy route, keyed on the delivery id.
      {
        name: 'deploy',
        source: 'github',
        events: ['push'],
        filter: { 'body.ref': 'refs/heads/main' },
        key: '{header.x-github-delivery}',
        effect: { exec: append(deployLog), timeoutSeconds: 10 },
      },
      { name: 'fulfil', source: 'shop', events: ['*'], key: '{header.x-shopify-webhook-id}', effect: { exec: append(shopLog), timeoutSeconds: 10 } },
    ],
    drain: { pollMs: 100 },
  });
  return { file, deployLog, shopLog };
}

async function metric(serve: ServeProcess, source: string, outcome: string): Promise<number> {
  const text = await (await fetch(`${serve.url}/metrics`)).text();
  const m = new RegExp(`^receiver_deliveries_total\\{source="${source}",outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]);
}

/** The same scenario on each store. */
function scenario(name: string, open: () => Promise<{ dir: string; database: string; db: Db; done: () => Promise<void> }>) {
  describe(`body dedupe through serve on ${name}`, () => {
    let env: Awaited<ReturnType<typeof open>>;
    let serve: ServeProcess;
    let files: ReturnType<typeof config>;

    beforeAll(async () => {
      env = await open();
      files = config(env.dir, env.database);
      serve = await startServe(files.file);
    });
    afterAll(async () => {
      await serve?.stop('SIGKILL');
      await env?.done();
    });

    const settled = async () => {
      for (let until = Date.now() + 10_000; Date.now() < until; await sleep(50)) {
        if (Number((await env.db.all<{ n: number }>(`SELECT count(*) AS n FROM events WHERE status <> 'done'`))[0]!.n) === 0) return;
      }
      throw new Error('timed out waiting for every event to be done');
    };

    it('a GitHub push replayed 5 times under fresh X-GitHub-Delivery ids deploys once; each replay gets the stored answer; a redelivery is a duplicate; another body is a new event', async () => {
      const body = pushBody();
      const first = await send(serve, 'github', body, await githubHeaders(body, 'aaaaaaaa-0000-4000-8000-000000000001'));
      expect(first.status).toBe(202);
      expect(JSON.parse(first.text)).toMatchObject({ status: 'accepted' });
      for (let i = 0; i < 5; i++) {
        const replay = await send(serve, 'github', body, await githubHeaders(body));
        expect(replay).toEqual(first);
      }
      // Five replays at once (one batch): the same.
      const burst = await Promise.all([1, 2, 3, 4, 5].map(async () => send(serve, 'github', body, await githubHeaders(body))));
      expect(burst).toEqual(Array(5).fill(first));
      // GitHub's own Redeliver keeps the GUID: a duplicate, as ever.
      const again = await send(serve, 'github', body, await githubHeaders(body, 'aaaaaaaa-0000-4000-8000-000000000001'));
      expect(again).toEqual(first);
      // A different push is a different event.
      const other = pushBody();
      const second = await send(serve, 'github', other, await githubHeaders(other));
      expect(second.status).toBe(202);
      expect(JSON.parse(second.text).id).not.toBe(JSON.parse(first.text).id);

      await settled();
      await sleep(300);
      expect(lines(files.deployLog)).toHaveLength(2);
      expect(lines(files.deployLog)[0]).toBe('aaaaaaaa-0000-4000-8000-000000000001');
      expect(await env.db.all(`SELECT count(*) AS n FROM events WHERE source = 'github'`)).toEqual([{ n: 2 }]);
      expect(await metric(serve, 'github', 'replayed')).toBe(10);
      expect(await metric(serve, 'github', 'duplicate')).toBe(1);
      expect(await metric(serve, 'github', 'accepted')).toBe(2);
    });

    it('Shopify the same: 5 fresh X-Shopify-Webhook-Id replays fulfil once; a retry keeps working; another body is new', async () => {
      const body = orderBody();
      const id = randomUUID();
      const first = await send(serve, 'shop', body, shopifyHeaders(body, id));
      expect(first.status).toBe(202);
      for (let i = 0; i < 5; i++) expect(await send(serve, 'shop', body, shopifyHeaders(body))).toEqual(first);
      expect(await send(serve, 'shop', body, shopifyHeaders(body, id))).toEqual(first);
      const other = orderBody();
      expect(JSON.parse((await send(serve, 'shop', other, shopifyHeaders(other))).text).id).not.toBe(JSON.parse(first.text).id);
      await settled();
      await sleep(300);
      expect(lines(files.shopLog)).toHaveLength(2);
      expect(await metric(serve, 'shop', 'replayed')).toBe(5);
    });

    it('Stripe (its id is in the signed body) takes no body key; dedupeByBody false stores a replay as a new event', async () => {
      const body = stripeBody(`evt_${randomUUID()}`);
      const now = Date.now();
      const first = await send(serve, 'stripe', body, stripeHeaders(body, now));
      expect(first.status).toBe(202);
      expect(await send(serve, 'stripe', body, stripeHeaders(body, now + 1000))).toEqual(first);
      expect(await env.db.all(`SELECT count(*) AS n FROM body_keys WHERE source = 'stripe'`)).toEqual([{ n: 0 }]);

      const push = pushBody();
      const a = await send(serve, 'ghoff', push, await githubHeaders(push));
      const b = await send(serve, 'ghoff', push, await githubHeaders(push));
      expect(JSON.parse(b.text).id).not.toBe(JSON.parse(a.text).id);
      expect(await env.db.all(`SELECT count(*) AS n FROM body_keys WHERE source = 'ghoff'`)).toEqual([{ n: 0 }]);
    });

    it('a key past its retry horizon is taken by the next delivery of its body; purge removes expired keys, and keys with their events', async () => {
      const body = pushBody();
      const first = await send(serve, 'github', body, await githubHeaders(body));
      await env.db.all(`UPDATE body_keys SET expires_at = 1 WHERE source = 'github'`);
      const late = await send(serve, 'github', body, await githubHeaders(body));
      expect(JSON.parse(late.text)).toMatchObject({ status: 'accepted' });
      expect(JSON.parse(late.text).id).not.toBe(JSON.parse(first.text).id);
      await settled();

      // Every github key expired; the shop's events are old, so purge --days takes them and their keys.
      await env.db.all(`UPDATE body_keys SET expires_at = 1 WHERE source = 'github'`);
      await env.db.all(`UPDATE events SET received_at = 1 WHERE source = 'shop'`);
      const expired = (await env.db.all<{ n: number }>(`SELECT count(*) AS n FROM body_keys WHERE source = 'github'`))[0]!.n;
      expect(expired).toBe(3);
      const dry = await runCli(['purge', '-c', files.file, '--days', '30', '--dry-run', '--json']);
      expect(dry.code, dry.stderr).toBe(0);
      expect(JSON.parse(dry.stdout)).toMatchObject({ bodyKeysPurged: 3 });
      const purged = await runCli(['purge', '-c', files.file, '--days', '30', '--json']);
      expect(purged.code, purged.stderr).toBe(0);
      expect(JSON.parse(purged.stdout)).toMatchObject({ bodyKeysPurged: 3, purged: 2 });
      expect(await env.db.all(`SELECT source, count(*) AS n FROM body_keys GROUP BY source ORDER BY source`)).toEqual([]);
      // A purged key protects nothing: its body is new again (and the text says so).
      expect(JSON.parse((await send(serve, 'github', body, await githubHeaders(body))).text)).toMatchObject({ status: 'accepted' });
    });
  });
}

scenario('SQLite', async () => {
  const tmp = tempDir('receiver-dedupe-');
  const file = join(tmp.dir, 'receiver.db');
  let db: Db | undefined;
  return {
    dir: tmp.dir,
    database: file,
    get db() {
      db ??= sqliteDb(file);
      return db;
    },
    done: async () => {
      await db?.close();
      tmp.cleanup();
    },
  };
});

if (pgOk) {
  scenario('PostgreSQL', async () => {
    const tmp = tempDir('receiver-dedupe-pg-');
    const t = await createTestDatabase();
    return {
      dir: tmp.dir,
      database: t.url,
      db: postgresDb(t),
      done: async () => {
        await t.drop();
        tmp.cleanup();
      },
    };
  });
} else {
  describe.skip('body dedupe on PostgreSQL (not reachable)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

/** A GitHub push stored by a receiver at schema version 6 (before body keys), within the horizon and before it. */
const OLD_BODY = Buffer.from('{"ref":"refs/heads/main","after":"1111111111111111111111111111111111111111"}');
const OLDER_BODY = Buffer.from('{"ref":"refs/heads/main","after":"2222222222222222222222222222222222222222"}');
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('upgrade from schema version 6', () => {
  it('SQLite: a push stored by the old version within 72 h is protected after the upgrade; one older is not', async () => {
    const tmp = tempDir('receiver-dedupe-upgrade-');
    try {
      const file = join(tmp.dir, 'receiver.db');
      const raw = new Database(file);
      raw.pragma('journal_mode = WAL');
      for (const m of sqliteMigrations.filter((x) => x.version <= 6)) {
        raw.exec(m.sql);
        m.apply?.(raw);
      }
      raw.pragma('user_version = 6');
      const now = Date.now();
      const insert =
        raw.prepare(`INSERT INTO events (source, delivery_id, event_type, status, received_at, body, body_sha256, response_status, response_body, next_attempt_at, headers)
        VALUES ('github', ?, 'push', 'done', ?, ?, ?, 202, ?, ?, '{}')`);
      insert.run('101:old-older', now - 100 * HOUR, OLDER_BODY, sha(OLDER_BODY), '{"status":"accepted","id":1}', now - 100 * HOUR);
      insert.run('101:old-guid', now - HOUR, OLD_BODY, sha(OLD_BODY), '{"status":"accepted","id":2}', now - HOUR);
      raw.close();

      const { file: cfg, deployLog } = config(tmp.dir, file);
      const serve = await startServe(cfg);
      try {
        expect(await send(serve, 'github', OLD_BODY, await githubHeaders(OLD_BODY))).toEqual({ status: 202, text: '{"status":"accepted","id":2}' });
        const older = await send(serve, 'github', OLDER_BODY, await githubHeaders(OLDER_BODY));
        expect(JSON.parse(older.text)).toMatchObject({ status: 'accepted' });
        expect(JSON.parse(older.text).id).toBeGreaterThan(2);
        await waitFor(() => (lines(deployLog).length === 1 ? true : undefined), 'the older push deployed');
      } finally {
        await serve.stop();
      }
      const db = new Database(file, { readonly: true });
      expect(db.pragma('user_version', { simple: true })).toBe(sqliteMigrations.at(-1)!.version);
      db.close();
    } finally {
      tmp.cleanup();
    }
  });

  it.runIf(pgOk)('PostgreSQL: the same', async () => {
    const t = await createTestDatabase();
    const tmp = tempDir('receiver-dedupe-upgrade-pg-');
    try {
      const client = new pg.Client({ connectionString: t.url });
      await client.connect();
      await client.query('CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      for (const m of postgresMigrations.filter((x) => x.version <= 6)) {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [m.version, m.name]);
      }
      const now = Date.now();
      for (const [id, at, body, answer] of [
        ['101:old-older', now - 100 * HOUR, OLDER_BODY, '{"status":"accepted","id":1}'],
        ['101:old-guid', now - HOUR, OLD_BODY, '{"status":"accepted","id":2}'],
      ] as const) {
        await client.query(
          `INSERT INTO events (source, delivery_id, event_type, status, received_at, body, body_sha256, response_status, response_body, next_attempt_at, headers)
           VALUES ('github', $1, 'push', 'done', $2, $3, $4, 202, $5, $2, '{}')`,
          [id, at, body, sha(body), answer],
        );
      }
      await client.end();
      const { file: cfg, deployLog } = config(tmp.dir, t.url);
      const serve = await startServe(cfg);
      try {
        const replay = await send(serve, 'github', OLD_BODY, await githubHeaders(OLD_BODY));
        expect(replay.status).toBe(202);
        expect(JSON.parse(replay.text)).toMatchObject({ status: 'accepted', id: 2 });
        const older = await send(serve, 'github', OLDER_BODY, await githubHeaders(OLDER_BODY));
        expect(JSON.parse(older.text).id).toBeGreaterThan(2);
        await waitFor(() => (lines(deployLog).length === 1 ? true : undefined), 'the older push deployed');
      } finally {
        await serve.stop();
      }
    } finally {
      await t.drop();
      tmp.cleanup();
    }
  });
});
