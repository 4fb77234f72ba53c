#!/usr/bin/env node
/* global performance, fetch */
/**
 * The admin events page and API list on a large database: server time per request.
 *
 *   npm run build && node bench/admin.mjs [--events 1000000] [--requests 300] [--keep]
 *                                         [--db postgres://postgres@127.0.0.1:5432/postgres]
 *
 * 1. Builds a SQLite database with --events events (3 sources, 4 event types, 1 % dead,
 *    0.1 % pending, the rest done; ~300-byte bodies) in one bulk transaction. With --db, a
 *    new PostgreSQL database beside the one named (dropped at the end), rows made by one
 *    INSERT ... SELECT over generate_series, then ANALYZE.
 * 2. Starts `receiver serve` from dist/ (a real server, drain off so nothing changes the
 *    rows) with admin.token, logs in with the form for a session cookie.
 * 3. For each case, --requests sequential requests after 20 warm-up ones, and prints the
 *    server time (the Server-Timing header the admin pages set: routing, the store query
 *    and rendering) p50/p99/max, and the client round trip p50. Cases: the events page and
 *    the API list, first page and a deep page (a cursor among the oldest 5 % of ids, a
 *    different one per request), then the filters for information.
 * Target: under 50 ms server time for the page and the API list, first and deep.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const REPO = new URL('..', import.meta.url).pathname;
const BIN = join(REPO, 'bin/receiver.js');
const { openSqlite } = await import(join(REPO, 'dist/store/sqlite/open.js'));

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    requests: { type: 'string', default: '300' },
    keep: { type: 'boolean', default: false },
    db: { type: 'string' },
  },
});
const EVENTS = Number(args.events);
const REQUESTS = Number(args.requests);
const TOKEN = randomBytes(24).toString('hex');
const HOUR = 3_600_000;

const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-admin-'));
const dbFile = join(dir, 'receiver.db');
const log = (...a) => console.error(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

// --- 1. The database ------------------------------------------------------------------------
const SOURCES = ['stripe', 'github', 'shop'];
const TYPES = ['invoice.paid', 'checkout.session.completed', 'push', 'order.created'];
const now = Date.now();
const span = 90 * 24 * HOUR; // three months of traffic
let database = dbFile;
let dropDatabase = async () => {};
if (args.db !== undefined) {
  const started = performance.now();
  const { default: pg } = await import('pg');
  const name = `receiver_bench_admin_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: args.db });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(args.db);
  url.pathname = `/${name}`;
  database = url.toString();
  dropDatabase = async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  };
  const { openStore } = await import(join(REPO, 'dist/store/open.js'));
  await (await openStore(database, { busyTimeoutMs: 5000 })).close(); // migrations
  const c = new pg.Client({ connectionString: database });
  await c.connect();
  await c.query(
    `INSERT INTO events (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body, attempts, next_attempt_at, last_error, finished_at)
     SELECT (ARRAY['stripe','github','shop'])[i % 3 + 1], 'evt_' || lpad(to_hex(i + 1), 8, '0'), (ARRAY['invoice.paid','checkout.session.completed','push','order.created'])[i % 4 + 1],
       CASE WHEN i % 1000 = 7 THEN 'pending' WHEN i % 100 = 3 THEN 'dead' ELSE 'done' END, r,
       '{"content-type":"application/json","user-agent":"bench/1.0","stripe-signature":"[redacted]"}'::jsonb,
       convert_to(json_build_object('id', 'evt_' || lpad(to_hex(i + 1), 8, '0'), 'data', json_build_object('object', json_build_object('id', 'obj_' || i, 'amount', (i % 5000) * 100, 'customer', 'cus_' || (i % 7919), 'email', 'customer' || (i % 7919) || '@example.com')))::text, 'UTF8'),
       md5(i::text) || md5(i::text), 202, '{"status":"accepted"}', 1, r,
       CASE WHEN i % 100 = 3 THEN 'exit 1: smtp connection refused (gave up after 12 attempts)' END, CASE WHEN i % 1000 <> 7 THEN r + 800 END
     FROM (SELECT i, $1::bigint - $2::bigint + (i::bigint * $2::bigint / $3::bigint) AS r FROM generate_series(0, $3::int - 1) AS i) AS g`,
    [now, span, EVENTS],
  );
  await c.query('ANALYZE');
  await c.end();
  log(`built ${EVENTS} events in PostgreSQL database ${name} in ${((performance.now() - started) / 1000).toFixed(1)} s`);
} else {
  const started = performance.now();
  const db = openSqlite(dbFile, { busyTimeoutMs: 5000 });
  db.pragma('synchronous = OFF'); // building only
  const ins = db.prepare(`INSERT INTO events (id, source, delivery_id, event_type, status, received_at, headers, body, body_sha256,
      response_status, response_body, attempts, next_attempt_at, last_error, finished_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 202, ?, ?, ?, ?, ?)`);
  const headers = JSON.stringify({ 'content-type': 'application/json', 'user-agent': 'bench/1.0', 'stripe-signature': '[redacted]' });
  const batch = db.transaction((from, to) => {
    for (let i = from; i < to; i++) {
      const id = i + 1;
      const source = SOURCES[i % 3];
      const status = i % 1000 === 7 ? 'pending' : i % 100 === 3 ? 'dead' : 'done';
      const receivedAt = now - span + Math.floor((i / EVENTS) * span);
      const deliveryId = `evt_${id.toString(16).padStart(8, '0')}`; // as the PostgreSQL build makes them
      const body = Buffer.from(
        JSON.stringify({
          id: deliveryId,
          type: TYPES[i % 4],
          data: {
            object: { id: `obj_${id}`, amount: (i % 5000) * 100, currency: 'eur', customer: `cus_${i % 7919}`, email: `customer${i % 7919}@example.com` },
          },
          created: Math.floor(receivedAt / 1000),
        }),
      );
      ins.run(
        id,
        source,
        deliveryId,
        TYPES[i % 4],
        status,
        receivedAt,
        headers,
        body,
        createHash('sha256').update(body).digest('hex'),
        JSON.stringify({ status: 'accepted', id }),
        status === 'pending' ? 0 : status === 'dead' ? 12 : 1,
        receivedAt,
        status === 'dead' ? 'exit 1: smtp connection refused (gave up after 12 attempts)' : null,
        status === 'pending' ? null : receivedAt + 800,
      );
    }
  });
  for (let from = 0; from < EVENTS; from += 100_000) batch(from, Math.min(EVENTS, from + 100_000));
  db.close();
  log(`built ${EVENTS} events in ${((performance.now() - started) / 1000).toFixed(1)} s (${(statSync(dbFile).size / 1e6).toFixed(0)} MB)`);
}

// --- 2. The server ----------------------------------------------------------------------------
const configFile = join(dir, 'receiver.config.json');
writeFileSync(
  configFile,
  JSON.stringify({
    database,
    // github as GitHub: a GUID looked up in it walks that source's delivery ids (stored as <hook id>:<GUID>).
    sources: Object.fromEntries(
      SOURCES.map((s) => [
        s,
        s === 'github' ? { provider: 'github', secret: 'bench-secret' } : { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' },
      ]),
    ),
    drain: { enabled: false },
    log: { level: 'warn' },
    admin: { token: 'env:RECEIVER_ADMIN_TOKEN' },
  }),
);
const child = spawn(process.execPath, [BIN, 'serve', '-c', configFile, '--port', '0', '--log-level', 'info'], {
  env: { ...process.env, RECEIVER_ADMIN_TOKEN: TOKEN },
  stdio: ['ignore', 'ignore', 'pipe'],
});
const url = await new Promise((resolve, reject) => {
  let err = '';
  child.stderr.on('data', (d) => {
    err += d.toString();
    const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(err);
    if (m !== null) resolve(`http://127.0.0.1:${m[1]}`);
  });
  child.on('exit', (code) => reject(new Error(`serve exited with ${code}:\n${err}`)));
});
const stop = () => child.kill('SIGTERM');
process.on('exit', stop);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, async () => {
    stop();
    if (!args.keep) rmSync(dir, { recursive: true, force: true });
    await dropDatabase().catch(() => {});
    process.exit(130);
  });
}

const login = await fetch(`${url}/admin/login`, {
  method: 'POST',
  redirect: 'manual',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: `token=${TOKEN}`,
});
const cookie = login.headers.getSetCookie()[0]?.split(';')[0];
if (login.status !== 303 || cookie === undefined) throw new Error(`login failed: ${login.status}`);

// --- 3. The measurements ----------------------------------------------------------------------
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const deepCursor = () => 1 + Math.floor(Math.random() * Math.floor(EVENTS * 0.05));

async function measure(name, path, headers, n = REQUESTS) {
  const warm = Math.min(20, n);
  const server = [];
  const client = [];
  let rows = 0;
  for (let i = 0; i < n + warm; i++) {
    const p = typeof path === 'function' ? path() : path;
    const t0 = performance.now();
    const res = await fetch(`${url}${p}`, { headers });
    const text = await res.text();
    const t1 = performance.now();
    if (res.status !== 200) throw new Error(`${name}: ${p} answered ${res.status}: ${text.slice(0, 200)}`);
    if (i < warm) continue;
    server.push(Number(/app;dur=([\d.]+)/.exec(res.headers.get('server-timing') ?? '')?.[1]));
    client.push(t1 - t0);
    rows = text.startsWith('[') ? JSON.parse(text).length : (text.match(/<tr>/g) ?? []).length - 1;
  }
  server.sort((a, b) => a - b);
  client.sort((a, b) => a - b);
  const f = (x) => x.toFixed(1).padStart(7);
  console.log(
    `${name.padEnd(44)} server p50 ${f(pct(server, 50))} ms  p99 ${f(pct(server, 99))} ms  max ${f(server[server.length - 1])} ms   client p50 ${f(pct(client, 50))} ms   rows ${rows}`,
  );
  return { p50: pct(server, 50), p99: pct(server, 99) };
}

const page = { cookie };
const api = { authorization: `Bearer ${TOKEN}` };
console.log(`admin list on ${EVENTS} events (${args.db === undefined ? 'SQLite' : 'PostgreSQL'}), ${REQUESTS} sequential requests per case, 50 rows per page`);
const target = [
  await measure('page /admin/events, first page', '/admin/events', page),
  await measure('page /admin/events, deep page (oldest 5 %)', () => `/admin/events?before=${deepCursor()}`, page),
  await measure('API /admin/api/events, first page', '/admin/api/events', api),
  await measure('API /admin/api/events, deep page (oldest 5 %)', () => `/admin/api/events?before=${deepCursor()}`, api),
];
console.log('filters (for information):');
await measure('API status=dead, first page', '/admin/api/events?status=dead', api);
await measure('API status=dead, deep page', () => `/admin/api/events?status=dead&before=${deepCursor()}`, api);
await measure('API status=done, deep page', () => `/admin/api/events?status=done&before=${deepCursor()}`, api);
await measure('API status=pending, first page (0.1 % of events)', '/admin/api/events?status=pending', api);
await measure('API source=github, deep page', () => `/admin/api/events?source=github&before=${deepCursor()}`, api);
await measure('API type=push, deep page', () => `/admin/api/events?type=push&before=${deepCursor()}`, api);
await measure('API delivery id, exact (any source)', () => `/admin/api/events?delivery=evt_${deepCursor().toString(16).padStart(8, '0')}`, api);
await measure(
  'API delivery id prefix matching the newest events',
  `/admin/api/events?delivery=evt_${(EVENTS - 1).toString(16).padStart(8, '0').slice(0, 5)}&match=prefix`,
  api,
);
// A prefix only old events have: the walk down the ids passes every newer event first (20 requests).
await measure('API delivery id prefix matching only the oldest ~6 % (20 requests)', '/admin/api/events?delivery=evt_0000&match=prefix', api, 20);
// No index on received_at: the walk down the ids passes every newer event first (20 requests).
await measure(
  'API received in one day 60 days ago (20 requests)',
  `/admin/api/events?from=${new Date(now - 60 * 24 * HOUR).toISOString()}&to=${new Date(now - 59 * 24 * HOUR).toISOString()}`,
  api,
  20,
);
await measure('API received in the last day', `/admin/api/events?from=${new Date(now - 24 * HOUR).toISOString()}`, api);
await measure('API delivery id, a GitHub GUID (20 requests)', `/admin/api/events?delivery=${randomUUID()}`, api, 20);
await measure('API type pattern checkout.*, first page', '/admin/api/events?type=checkout.*', api);
await measure('API origin=test (none), 20 requests', '/admin/api/events?origin=test', api, 20);
await measure('API body search for one customer (10,000 bodies read)', '/admin/api/events?search=customer42%40example.com', api, 20);
await measure('page /admin/events/:id (one event)', () => `/admin/events/${1 + Math.floor(Math.random() * EVENTS)}`, page);
await measure('page /admin/ (overview: full stats scan; 10 requests)', '/admin/', page, 10);

const worst = Math.max(...target.map((t) => t.p99));
console.log(`target: page and API list under 50 ms server time: ${worst < 50 ? 'met' : 'NOT met'} (worst p99 ${worst.toFixed(1)} ms)`);
stop();
await new Promise((resolve) => child.once('exit', resolve));
if (!args.keep) {
  rmSync(dir, { recursive: true, force: true });
  await dropDatabase();
} else log(`kept ${dir}${args.db === undefined ? '' : ` and ${database}`}`);
