import { existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';
import { inspect, lines } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/**
 * An exec effect that proves its lane runs one unit at a time: it takes `<dir>/lock` with
 * mkdir (atomic), writing OVERLAP to `log` if another unit holds it, logs `start <key>`
 * and `end <key>`, holds it `seconds`, and gives it back.
 */
const locked = (dir: string, log: string, seconds: number) => [
  '/bin/sh',
  '-c',
  'mkdir "$1/lock" 2>/dev/null || echo OVERLAP >> "$2"; echo "start $RECEIVER_RUN_KEY" >> "$2"; sleep "$3"; echo "end $RECEIVER_RUN_KEY" >> "$2"; rmdir "$1/lock"',
  'sh',
  dir,
  log,
  String(seconds),
];

/** What the tests read of the database, on either store. */
interface Look {
  status(eventId: number): Promise<string | undefined>;
  unit(eventId: number, route: string): Promise<{ status: string; lane: string } | undefined>;
  close(): void;
}

function sqliteLook(file: string): Look {
  const db = inspect(file);
  return {
    status: async (id) => db.event(id)?.status,
    unit: async (id, route) => db.unit(id, route),
    close: () => db.close(),
  };
}

function postgresLook(db: TestDatabase): Look {
  return {
    status: async (id) => (await db.query<{ status: string }>(`SELECT status FROM events WHERE id = ${Number(id)}`))[0]?.status,
    unit: async (id, route) =>
      (
        await db.query<{ status: string; lane: string }>(
          `SELECT status, lane FROM units WHERE event_id = ${Number(id)} AND route = '${route.replace(/'/g, "''")}'`,
        )
      )[0],
    close: () => undefined,
  };
}

/** Resolves once every one of `ids` is done (polling), or fails naming what is left. */
async function allDone(look: Look, ids: number[], timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const statuses = await Promise.all(ids.map((id) => look.status(id)));
    if (statuses.every((s) => s === 'done')) return;
    if (Date.now() > until) throw new Error(`events not done: ${JSON.stringify(statuses)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const pgOk = await postgresAvailable();

/** Lanes with real `serve` processes, on each store: a slow route never holds up another lane. */
describe.each(['sqlite', ...(pgOk ? ['postgres'] : [])])('lanes (receiver serve processes, %s)', (store) => {
  let tmp: ReturnType<typeof tempDir>;
  let serves: ServeProcess[] = [];
  let pg: TestDatabase | undefined;
  let look: Look | undefined;
  beforeEach(async () => {
    tmp = tempDir('receiver-lanes-');
    serves = [];
    if (store === 'postgres') pg = await createTestDatabase();
  });
  afterEach(async () => {
    for (const s of serves) await s.stop('SIGKILL');
    look?.close();
    look = undefined;
    await pg?.drop();
    pg = undefined;
    tmp.cleanup();
  });
  /** The configuration's database: a file in the test's directory, or the test's PostgreSQL database. */
  const database = () => (pg === undefined ? {} : { database: pg.url });
  /** Once serve has created the tables. */
  const looking = () => (look ??= pg === undefined ? sqliteLook(join(tmp.dir, 'receiver.db')) : postgresLook(pg));

  it('a licence is done within about a second of its receipt while a slow deploy runs in its own lane', async () => {
    const log = join(tmp.dir, 'deploy.log');
    const licences = join(tmp.dir, 'licences.txt');
    const file = writeConfig(tmp.dir, {
      ...database(),
      sources: { shop },
      routes: [
        { name: 'deploy', source: 'shop', events: ['push'], key: '{body.commit}', effect: { exec: locked(tmp.dir, log, 4), timeoutSeconds: 30 } },
        {
          name: 'licence',
          source: 'shop',
          events: ['order.paid'],
          key: '{body.order}',
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"', 'sh', licences] },
        },
      ],
    });
    const serve = await startServe(file);
    serves.push(serve);
    expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'p1', type: 'push', commit: 'c1' }))).status).toBe(202);
    await waitFor(() => (lines(log).includes('start deploy:c1') ? true : undefined), 'the deploy to start', 10_000);
    const received = Date.now();
    expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'o1', type: 'order.paid', order: 'ord_1' }))).status).toBe(202);
    await waitFor(() => (lines(licences).length === 1 ? true : undefined), 'the licence', 5_000);
    const tookMs = Date.now() - received;
    // The deploy is still running: the licence did not wait for it.
    expect(lines(log)).toEqual(['start deploy:c1']);
    expect(tookMs).toBeLessThan(1500);
    const db = looking();
    await allDone(db, [2], 5_000);
    expect(await db.status(1)).toBe('processing');
    expect(await db.unit(1, 'deploy')).toMatchObject({ status: 'processing', lane: 'deploy' });
    await allDone(db, [1], 20_000);
    expect(lines(log)).toEqual(['start deploy:c1', 'end deploy:c1']);
  });

  it('a module effect runs while a module effect of another lane waits on an API (each in a host of its own)', async () => {
    // The CRM sync calls an API for 6 s before it writes; the licence, a module too, must
    // not wait for it (module effects of every lane took turns in one host before).
    const insert = (table: string) =>
      `await ctx.db.run('CREATE TABLE IF NOT EXISTS ${table} (k TEXT PRIMARY KEY)');
  await ctx.db.run(ctx.db.dialect === 'postgres' ? 'INSERT INTO ${table} (k) VALUES ($1)' : 'INSERT INTO ${table} (k) VALUES (?)', [ctx.key]);`;
    writeFileSync(
      join(tmp.dir, 'crm.mjs'),
      `import { writeFileSync } from 'node:fs';
export default async (event, ctx) => {
  writeFileSync(new URL('./crm.started', import.meta.url), '');
  await new Promise((r) => setTimeout(r, 6000));
  ${insert('synced')}
  writeFileSync(new URL('./crm.done', import.meta.url), '');
};`,
    );
    writeFileSync(
      join(tmp.dir, 'licence.mjs'),
      `import { appendFileSync } from 'node:fs';
export default async (event, ctx) => {
  ${insert('issued')}
  appendFileSync(new URL('./licences.txt', import.meta.url), ctx.key + '\\n');
};`,
    );
    const file = writeConfig(tmp.dir, {
      ...database(),
      sources: { shop },
      drain: { pollMs: 100 },
      routes: [
        { name: 'crm', source: 'shop', events: ['customer'], key: '{body.id}', effect: { module: './crm.mjs', timeoutSeconds: 20 } },
        { name: 'licence', source: 'shop', events: ['order.paid'], key: '{body.order}', effect: { module: './licence.mjs' } },
      ],
    });
    const serve = await startServe(file);
    serves.push(serve);
    expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'c1', type: 'customer' }))).status).toBe(202);
    await waitFor(() => (existsSync(join(tmp.dir, 'crm.started')) ? true : undefined), 'the CRM sync to start', 20_000);
    const received = Date.now();
    expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'o1', type: 'order.paid', order: 'ord_1' }))).status).toBe(202);
    await waitFor(() => (lines(join(tmp.dir, 'licences.txt')).length === 1 ? true : undefined), 'the licence', 10_000);
    // The CRM sync is still waiting: the licence did not wait for it (that would take 6 s).
    expect(existsSync(join(tmp.dir, 'crm.done'))).toBe(false);
    // Including the start of the licence's own host: 0.2 s on an idle machine, 4.5 s
    // while other suites kept both cores busy.
    expect(Date.now() - received).toBeLessThan(5000);
    await allDone(looking(), [1, 2], 20_000);
    expect(lines(join(tmp.dir, 'licences.txt'))).toEqual(['ord_1']);
  });

  it('two routes sharing a lane never overlap, and the lane runs its units oldest first', async () => {
    const log = join(tmp.dir, 'lane.log');
    const file = writeConfig(tmp.dir, {
      ...database(),
      sources: { shop },
      routes: [
        { name: 'a', source: 'shop', key: '{body.id}', lane: 'erp', effect: { exec: locked(tmp.dir, log, 0.2) } },
        { name: 'b', source: 'shop', key: '{body.id}', lane: 'erp', effect: { exec: locked(tmp.dir, log, 0.2) } },
      ],
    });
    const serve = await startServe(file);
    serves.push(serve);
    for (const id of ['e1', 'e2', 'e3']) expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id, type: 't' }))).status).toBe(202);
    await allDone(looking(), [1, 2, 3], 20_000);
    const got = lines(log);
    expect(got).not.toContain('OVERLAP');
    // One at a time: every start is followed by its own end; in unit (planning) order.
    expect(got.filter((l) => l.startsWith('start '))).toEqual(['start a:e1', 'start b:e1', 'start a:e2', 'start b:e2', 'start a:e3', 'start b:e3']);
    for (let i = 0; i < got.length; i += 2) expect(got[i + 1]).toBe(got[i]!.replace('start', 'end'));
  });

  it('kill -9 mid-effect with several lanes busy loses nothing; each lane repeats at most the unit it was running', async () => {
    const dir = (name: string) => join(tmp.dir, name);
    const logs = { slow: join(tmp.dir, 'slow.log'), other: join(tmp.dir, 'other.log') };
    const release = join(tmp.dir, 'release');
    // Held until the test releases it, so the kill lands mid-effect in both lanes.
    const held = (lock: string, log: string) => [
      '/bin/sh',
      '-c',
      'mkdir "$1/lock" 2>/dev/null || echo OVERLAP >> "$2"; echo "start $RECEIVER_RUN_KEY" >> "$2"; while [ ! -f "$3" ]; do sleep 0.05; done; rmdir "$1/lock"',
      'sh',
      lock,
      log,
      release,
    ];
    mkdirSync(dir('slow-lane'));
    mkdirSync(dir('other-lane'));
    const file = writeConfig(tmp.dir, {
      ...database(),
      sources: { shop },
      // SQLite: the restarted serve takes back its dead predecessor's claims at once. PostgreSQL
      // (receivers on several machines) waits for their lease to run out: a short one.
      drain: { leaseSeconds: store === 'postgres' ? 2 : 60 },
      routes: [
        { name: 'slow', source: 'shop', key: '{body.id}', effect: { exec: held(dir('slow-lane'), logs.slow), timeoutSeconds: 30 } },
        { name: 'other', source: 'shop', key: '{body.id}', effect: { exec: held(dir('other-lane'), logs.other), timeoutSeconds: 30 } },
      ],
    });
    let serve = await startServe(file);
    serves.push(serve);
    for (const id of ['e1', 'e2', 'e3']) expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id, type: 't' }))).status).toBe(202);
    await waitFor(() => (lines(logs.slow).length === 1 && lines(logs.other).length === 1 ? true : undefined), 'both lanes to be mid-effect', 10_000);
    await serve.stop('SIGKILL');
    serves = [];
    // The killed effects' commands are gone with their lock directories left: clear them, as a reboot would.
    for (const name of ['slow-lane', 'other-lane']) if (existsSync(join(dir(name), 'lock'))) rmdirSync(join(dir(name), 'lock'));
    writeFileSync(release, '');
    serve = await startServe(file);
    serves.push(serve);
    await allDone(looking(), [1, 2, 3], 20_000);
    for (const [route, log] of Object.entries(logs)) {
      const got = lines(log);
      expect(got).not.toContain('OVERLAP');
      // The unit cut by the kill runs again (once); every other one runs once.
      expect(got).toEqual([`start ${route}:e1`, `start ${route}:e1`, `start ${route}:e2`, `start ${route}:e3`]);
    }
  });
});

/** Lanes across receivers: several serve processes on one PostgreSQL database. */
describe.runIf(pgOk)('lanes across serve processes on one PostgreSQL database', () => {
  let tmp: ReturnType<typeof tempDir>;
  let db: TestDatabase | undefined;
  const serves: ServeProcess[] = [];
  beforeEach(() => {
    tmp = tempDir('receiver-pg-lanes-');
  });
  afterEach(async () => {
    await Promise.all(serves.splice(0).map((s) => s.stop('SIGKILL')));
    await db?.drop();
    db = undefined;
    tmp.cleanup();
  });

  it('two receivers never run two units of one lane at once, each lane in order, and both lanes run side by side', async () => {
    db = await createTestDatabase();
    const erp = join(tmp.dir, 'erp');
    const mail = join(tmp.dir, 'mail');
    mkdirSync(erp);
    mkdirSync(mail);
    const logs = { erp: join(tmp.dir, 'erp.log'), mail: join(tmp.dir, 'mail.log') };
    const file = writeConfig(tmp.dir, {
      database: db.url,
      sources: { shop },
      drain: { pollMs: 100 },
      routes: [
        { name: 'a', source: 'shop', key: '{body.id}', lane: 'erp', effect: { exec: locked(erp, logs.erp, 0.1) } },
        { name: 'b', source: 'shop', key: '{body.id}', lane: 'erp', effect: { exec: locked(erp, logs.erp, 0.1) } },
        { name: 'mail', source: 'shop', key: '{body.id}', effect: { exec: locked(mail, logs.mail, 0.1) } },
      ],
    });
    serves.push(await startServe(file), await startServe(file));
    const ids = Array.from({ length: 10 }, (_, i) => `e${i + 1}`);
    // Each delivery to one receiver or the other; both drains claim from the one database.
    for (const [i, id] of ids.entries()) expect((await post(`${serves[i % 2]!.url}/webhooks/shop`, JSON.stringify({ id, type: 't' }))).status).toBe(202);
    const until = Date.now() + 30_000;
    for (;;) {
      const left = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM events WHERE status <> 'done'`))[0]!.n;
      if (left === 0) break;
      if (Date.now() > until) throw new Error(`${left} events still not done`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const starts = (log: string) => lines(log).filter((l) => l.startsWith('start '));
    for (const log of Object.values(logs)) {
      const got = lines(log);
      expect(got).not.toContain('OVERLAP');
      for (let i = 0; i < got.length; i += 2) expect(got[i + 1]).toBe(got[i]!.replace('start', 'end'));
    }
    // Each lane once per unit, oldest first, whichever receiver ran it.
    expect(starts(logs.erp)).toEqual(ids.flatMap((id) => [`start a:${id}`, `start b:${id}`]));
    expect(starts(logs.mail)).toEqual(ids.map((id) => `start mail:${id}`));
  });
});
