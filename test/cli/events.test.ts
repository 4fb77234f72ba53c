import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type Database from 'better-sqlite3';
import { runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';
import { DAY, insertAttempt, insertConflict, insertEffect, insertEvent, seedDb } from '../store/ops-seed.js';

/** `receiver events list` and `events show`, in-process (exit codes also as subprocesses): JSON shapes and exit codes. */
describe('receiver events', () => {
  const tmp = tempDir();
  let config: string;
  let db: Database.Database;
  const t0 = Date.UTC(2026, 0, 2, 3, 4, 5);
  let ids: number[];

  beforeAll(() => {
    config = writeConfig(tmp.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' } } });
    db = seedDb(join(tmp.dir, 'receiver.db'));
    ids = [
      insertEvent(db, {
        deliveryId: 'evt_1',
        eventType: 'invoice.paid',
        status: 'done',
        receivedAt: t0,
        headers: { 'content-type': 'application/json', 'user-agent': 'Stripe/1.0' },
        body: '{"id":"evt_1","ünïcode":true}',
      }),
      insertEvent(db, {
        source: 'github',
        deliveryId: 'gh-2',
        eventType: 'push',
        status: 'dead',
        receivedAt: t0 + DAY,
        attempts: 12,
        lastError: 'exit status 1: deploy failed',
      }),
      insertEvent(db, {
        deliveryId: 'evt_3',
        eventType: 'invoice.created',
        status: 'pending',
        receivedAt: t0 + 2 * DAY,
        body: Buffer.from([0xff, 0xfe, 0x00, 0x41]),
      }),
    ];
    insertAttempt(db, ids[0]!, { attempt: 1, route: 'issue-licence', effectKey: 'issue-licence:cus_9', startedAt: t0 + 1000 });
    // replay --force: the run has a key of its own.
    insertAttempt(db, ids[0]!, {
      attempt: 1,
      route: 'issue-licence',
      effectKey: 'issue-licence:cus_9',
      startedAt: t0 + 2000,
      forced: true,
      runKey: 'issue-licence:cus_9#forced-1',
    });
    insertEffect(db, { effectKey: 'issue-licence:cus_9', eventId: ids[0]!, at: t0 + 1000 });
    insertConflict(db, ids[0]!, t0 + 5000);
    insertConflict(db, ids[0]!, t0 + 6000);
  });
  afterAll(() => {
    db.close();
    tmp.cleanup();
  });

  it('list --json: newest first, exactly one JSON array with the contract fields', async () => {
    const r = await runInProcess(['events', 'list', '-c', config, '--json']);
    expect(r.code).toBe(0);
    const list = JSON.parse(r.stdout);
    expect(list.map((e: { id: number }) => e.id)).toEqual([...ids].reverse());
    expect(list[1]).toEqual({
      id: ids[1],
      source: 'github',
      deliveryId: 'gh-2',
      eventType: 'push',
      status: 'dead',
      attempts: 12,
      receivedAt: new Date(t0 + DAY).toISOString(),
      nextAttemptAt: new Date(t0 + DAY).toISOString(),
      finishedAt: new Date(t0 + DAY + 1000).toISOString(),
      lastError: 'exit status 1: deploy failed',
      duplicates: 0,
      forceEffects: false,
    });
  });

  it('list filters by --status, --source and --limit; a bad --status is exit 2 naming the flag', async () => {
    const dead = JSON.parse((await runInProcess(['events', 'list', '-c', config, '--status', 'dead', '--json'])).stdout);
    expect(dead.map((e: { id: number }) => e.id)).toEqual([ids[1]]);
    const stripe = JSON.parse((await runInProcess(['events', 'list', '-c', config, '--source', 'stripe', '--limit', '1', '--json'])).stdout);
    expect(stripe.map((e: { id: number }) => e.id)).toEqual([ids[2]]);
    const bad = await runInProcess(['events', 'list', '-c', config, '--status', 'failed']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--status must be one of pending, processing, done, dead');
    const human = await runInProcess(['events', 'list', '-c', config]);
    expect(human.stdout.split('\n')[0]).toMatch(/^ID\s+RECEIVED\s+SOURCE\s+DELIVERY ID\s+TYPE\s+STATUS\s+ATTEMPTS\s+LAST ERROR$/);
    expect(human.stdout).toContain('gh-2');
  });

  it('show --json: headers, UTF-8 body, attempts joined to the effect ledger, conflicts', async () => {
    const r = await runInProcess(['events', 'show', '-c', config, String(ids[0]), '--json']);
    expect(r.code).toBe(0);
    const e = JSON.parse(r.stdout);
    expect(e).toMatchObject({
      id: ids[0],
      source: 'stripe',
      deliveryId: 'evt_1',
      status: 'done',
      headers: { 'content-type': 'application/json', 'user-agent': 'Stripe/1.0' },
      body: '{"id":"evt_1","ünïcode":true}',
      bodyEncoding: 'utf8',
      bodySha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      responseStatus: 202,
    });
    expect(e.attemptLog).toEqual([
      {
        attempt: 1,
        route: 'issue-licence',
        effectKey: 'issue-licence:cus_9',
        runKey: 'issue-licence:cus_9',
        outcome: 'ok',
        forced: false,
        startedAt: new Date(t0 + 1000).toISOString(),
        finishedAt: new Date(t0 + 1010).toISOString(),
        error: null,
        output: null,
      },
      {
        attempt: 1,
        route: 'issue-licence',
        effectKey: 'issue-licence:cus_9',
        runKey: 'issue-licence:cus_9#forced-1',
        outcome: 'ok',
        forced: true,
        startedAt: new Date(t0 + 2000).toISOString(),
        finishedAt: new Date(t0 + 2010).toISOString(),
        error: null,
        output: null,
      },
    ]);
    expect(e.effects).toEqual([
      {
        effectKey: 'issue-licence:cus_9',
        route: 'issue-licence',
        businessKey: 'cus_9',
        status: 'done',
        eventId: ids[0],
        version: null,
        runs: 1,
        forcedRuns: 0,
        startedAt: new Date(t0 + 1000).toISOString(),
        finishedAt: new Date(t0 + 1010).toISOString(),
        lastError: null,
      },
    ]);
    expect(e.conflicts).toEqual([{ id: expect.any(Number), receivedAt: new Date(t0 + 5000).toISOString(), bodySha256: 'f'.repeat(64), repeats: 1 }]);
  });

  it('show: a body that is not UTF-8 comes as base64 with its encoding; human output prints the event', async () => {
    const r = await runInProcess(['events', 'show', '-c', config, String(ids[2]), '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({
      body: Buffer.from([0xff, 0xfe, 0x00, 0x41]).toString('base64'),
      bodyEncoding: 'base64',
      attemptLog: [],
      effects: [],
    });
    const human = await runInProcess(['events', 'show', '-c', config, String(ids[0])]);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(`event ${ids[0]}: stripe / evt_1 (invoice.paid)`);
    expect(human.stdout).toContain('issue-licence:cus_9: done, 1 run(s)');
    // The run key shows where it is not the effect key: a forced run's.
    expect(human.stdout).toContain(`#1 ${new Date(t0 + 1000).toISOString()} issue-licence issue-licence:cus_9 ok\n`);
    expect(human.stdout).toContain(
      `#1 ${new Date(t0 + 2000).toISOString()} issue-licence issue-licence:cus_9 ok (forced) [run key issue-licence:cus_9#forced-1]\n`,
    );
    // The same differing body twice: one conflict, counted.
    expect(human.stdout).toContain(`${new Date(t0 + 5000).toISOString()} sha256 ${'f'.repeat(64)}, 1 repeat(s) since`);
  });

  describe('sender-chosen text with control characters', () => {
    // An id that would retitle the terminal and clear the screen; C1 CSI; a bidi override.
    const ID = 'evt_\u001b]0;pwned\u0007\u001b[2J\r\nfake line';
    const TYPE = 'order.\u009b31mpaid';
    const BODY = '{"note":"\u001b[31mred\u001b[0m"}\n{"second":"line"}';
    const OUTPUT = 'licence sent to \u001b[1ma@example.com\u001b[0m\nmailer: 250 OK\n';
    // A database of its own: the tests above see only their rows.
    const own = tempDir();
    let config: string;
    let evil: number;
    beforeAll(() => {
      config = writeConfig(own.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' } } });
      const db = seedDb(join(own.dir, 'receiver.db'));
      evil = insertEvent(db, { deliveryId: ID, eventType: TYPE, status: 'done', receivedAt: t0, headers: { 'x-name': 'abc\u202edcba' }, body: BODY });
      insertAttempt(db, evil, { attempt: 1, route: 'mail', effectKey: 'mail:\u001b[8mhidden', startedAt: t0 + 1000, outcome: 'ok', output: OUTPUT });
      db.close();
    });
    afterAll(own.cleanup);
    // eslint-disable-next-line no-control-regex -- the raw control characters must not reach the terminal
    const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/;

    it('list and show print them escaped, never raw', async () => {
      const list = await runInProcess(['events', 'list', '-c', config]);
      expect(list.code).toBe(0);
      expect(list.stdout).not.toMatch(raw);
      expect(list.stdout).toContain('evt_\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0afake line');
      expect(list.stdout).toContain('order.\\x9b31mpaid');
      const show = await runInProcess(['events', 'show', '-c', config, String(evil)]);
      expect(show.code).toBe(0);
      expect(show.stdout).not.toMatch(raw);
      expect(show.stdout).toContain(`event ${evil}: stripe / evt_\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0afake line (order.\\x9b31mpaid)`);
      expect(show.stdout).toContain('  x-name: abc\\u202edcba');
      // The body keeps its lines; only the controls in them are escaped.
      expect(show.stdout).toContain('{"note":"\\x1b[31mred\\x1b[0m"}\n{"second":"line"}');
      expect(show.stdout).toContain('mail:\\x1b[8mhidden');
    });

    it('show prints the output of a successful attempt', async () => {
      const show = await runInProcess(['events', 'show', '-c', config, String(evil)]);
      expect(show.stdout).toMatch(
        /#1 \S+ mail mail:\\x1b\[8mhidden ok\n {4}output:\n {6}licence sent to \\x1b\[1ma@example\.com\\x1b\[0m\n {6}mailer: 250 OK\n/,
      );
    });

    it('--json keeps every value exact, with C1 and bidi controls escaped as \\u in the document', async () => {
      const list = await runInProcess(['events', 'list', '-c', config, '--json']);
      expect(list.stdout).not.toMatch(raw);
      expect(JSON.parse(list.stdout)[0]).toMatchObject({ id: evil, deliveryId: ID, eventType: TYPE });
      const show = await runInProcess(['events', 'show', '-c', config, String(evil), '--json']);
      expect(show.stdout).not.toMatch(raw);
      expect(JSON.parse(show.stdout)).toMatchObject({
        deliveryId: ID,
        eventType: TYPE,
        headers: { 'x-name': 'abc\u202edcba' },
        body: BODY,
        attemptLog: [{ output: OUTPUT, effectKey: 'mail:\u001b[8mhidden' }],
      });
    });
  });

  it('show: an unknown id is exit 1, a malformed one exit 2', async () => {
    const unknown = await runCli(['events', 'show', '-c', config, '99999', '--json']);
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe('');
    expect(unknown.stderr).toContain('event 99999 does not exist');
    const bad = await runCli(['events', 'show', '-c', config, 'x1']);
    expect(bad.code).toBe(2);
  });
});
