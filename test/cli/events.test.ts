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
      origin: 'webhook',
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
    expect(human.stdout.split('\n')[0]).toMatch(/^ID\s+RECEIVED\s+SOURCE\s+DELIVERY ID\s+TYPE\s+STATUS\s+ORIGIN\s+ATTEMPTS\s+NEXT\s+LAST ERROR$/);
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
        number: 1,
        replay: 0,
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
        number: 2,
        replay: 1,
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
        okRuns: 2,
        failedRuns: 0,
        runningRuns: 0,
        startedAt: new Date(t0 + 1000).toISOString(),
        finishedAt: new Date(t0 + 1010).toISOString(),
        lastError: null,
      },
    ]);
    expect(e.conflicts).toEqual([
      {
        id: expect.any(Number),
        receivedAt: new Date(t0 + 5000).toISOString(),
        bodySha256: 'f'.repeat(64),
        repeats: 1,
        headers: { 'content-type': 'application/json' },
        body: '{"other":true}',
        bodyEncoding: 'utf8',
      },
    ]);
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
    expect(human.stdout).toContain('issue-licence:cus_9: done: 2 ok, 0 failed, 1 forced\n');
    // The run key shows where it is not the effect key: a forced run's.
    expect(human.stdout).toContain(`#1 ${new Date(t0 + 1000).toISOString()} issue-licence issue-licence:cus_9 ok\n`);
    expect(human.stdout).toContain(
      `#2 ${new Date(t0 + 2000).toISOString()} issue-licence issue-licence:cus_9 ok (forced) [run key issue-licence:cus_9#forced-1]\n`,
    );
    // The same differing body twice: one conflict, counted, with its body indented (it is JSON).
    expect(human.stdout).toContain(`  ${new Date(t0 + 5000).toISOString()} sha256 ${'f'.repeat(64)}, 1 repeat(s) since:\n    {\n      "other": true\n    }\n`);
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
      const list = await runInProcess(['events', 'list', '-c', config, '--wide']);
      expect(list.code).toBe(0);
      expect(list.stdout).not.toMatch(raw);
      expect(list.stdout).toContain('evt_\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0afake line');
      // Cut to fit, still escaped.
      const narrow = await runInProcess(['events', 'list', '-c', config]);
      expect(narrow.stdout).not.toMatch(raw);
      expect(narrow.stdout).toContain('evt_\\x1b]0;…');
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

  describe('list: filters by type and time, body search, and a table that fits 100 columns', () => {
    const own = tempDir();
    let config: string;
    const now = Date.UTC(2026, 10, 30, 12, 0, 0);
    const MIN = 60_000;
    let e: Record<string, number>;
    beforeAll(() => {
      config = writeConfig(own.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' }, gh: { provider: 'github', secret: 'x' } } });
      const db = seedDb(join(own.dir, 'receiver.db'));
      e = {
        paid: insertEvent(db, { deliveryId: 'evt_paid', eventType: 'invoice.paid', status: 'done', receivedAt: now - 3 * DAY, body: '{"customer":"cus_ann"}' }),
        failed: insertEvent(db, {
          deliveryId: 'evt_1PqRsT2eZvKYlo2C0a1b2c3d4e5f6g7h',
          eventType: 'invoice.payment_failed.with_a_rather_long_name',
          status: 'pending',
          receivedAt: now - 2 * 3_600_000,
          attempts: 3,
          nextAttemptAt: now + 4 * MIN,
          lastError: `exit status 1: ${'the licence server answered 503 Service Unavailable; '.repeat(4)}END`,
          body: '{"customer":"cus_bob"}',
        }),
        refund: insertEvent(db, {
          deliveryId: 'ch_1',
          eventType: 'charge.refunded',
          status: 'dead',
          receivedAt: now - 30 * MIN,
          body: '{"customer":"cus_ann"}',
        }),
        due: insertEvent(db, { deliveryId: 'evt_due', eventType: 'invoice.created', status: 'pending', receivedAt: now - 10 * MIN, nextAttemptAt: now - MIN }),
      };
      db.close();
    });
    afterAll(own.cleanup);
    const ids = async (...args: string[]) => {
      const r = await runInProcess(['events', 'list', '-c', config, '--json', ...args], { now: () => now });
      expect(r.stderr).toBe('');
      return JSON.parse(r.stdout).map((x: { id: number }) => x.id);
    };

    it("--delivery finds an id as its sender shows it (GitHub's GUID alone), --origin by how events came in; show says both", async () => {
      const own = tempDir();
      try {
        const file = writeConfig(own.dir, { sources: { gh: { provider: 'github', secret: 'x' }, shop: { provider: 'none' } } });
        const db = seedDb(join(own.dir, 'receiver.db'));
        const guid = 'c0ffee00-1234-4abc-8def-0123456789ab';
        const push = insertEvent(db, { source: 'gh', deliveryId: `9912:${guid}`, eventType: 'push', status: 'done', receivedAt: now - DAY });
        const test = insertEvent(db, { source: 'shop', deliveryId: 'test_1', status: 'done', receivedAt: now - 1000, origin: 'test' });
        const fetched = insertEvent(db, { source: 'shop', deliveryId: 'evt_f', status: 'pending', receivedAt: now - 500, origin: 'catch-up' });
        db.close();
        const list = async (...args: string[]) => {
          const r = await runInProcess(['events', 'list', '-c', file, '--json', ...args], { now: () => now });
          return { ids: JSON.parse(r.stdout).map((x: { id: number }) => x.id), stderr: r.stderr };
        };
        expect(await list('--delivery', guid)).toEqual({ ids: [push], stderr: '' });
        expect((await list('--delivery', guid, '--source', 'gh')).ids).toEqual([push]);
        expect((await list('--delivery', `9912:${guid}`)).ids).toEqual([push]);
        expect((await list('--delivery', guid, '--source', 'shop')).ids).toEqual([]);
        // Nothing found: the ids near it, on stderr.
        expect(await list('--delivery', guid.slice(0, 20))).toEqual({
          ids: [],
          stderr: `Note: no event with delivery id "${guid.slice(0, 20)}"; near matches: gh/9912:${guid} (event ${push})\n`,
        });
        expect((await list('--origin', 'test')).ids).toEqual([test]);
        expect((await list('--origin', 'catch-up')).ids).toEqual([fetched]);
        expect((await list('--origin', 'webhook')).ids).toEqual([push]);
        const bad = await runInProcess(['events', 'list', '-c', file, '--origin', 'email']);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toContain('--origin must be one of webhook, catch-up, test');
        const text = await runInProcess(['events', 'list', '-c', file], { now: () => now });
        expect(text.stdout).toMatch(new RegExp(`^${test} .*\\sdone\\s+test\\s+1$`, 'm'));
        expect(text.stdout).toMatch(new RegExp(`^${fetched} .*\\spending\\s+catch-up\\s+0\\s+due$`, 'm'));
        const show = await runInProcess(['events', 'show', '-c', file, String(push)]);
        expect(show.stdout).toContain(`event ${push}: gh / 9912:${guid} (push)\n  sender id:  ${guid} (as the sender shows it)\n  origin:     webhook\n`);
        const json = JSON.parse((await runInProcess(['events', 'show', '-c', file, String(push), '--json'])).stdout);
        expect(json).toMatchObject({ deliveryId: `9912:${guid}`, senderDeliveryId: guid, origin: 'webhook' });
        expect(JSON.parse((await runInProcess(['events', 'show', '-c', file, String(test), '--json'])).stdout)).toMatchObject({
          senderDeliveryId: 'test_1',
          origin: 'test',
        });
      } finally {
        own.cleanup();
      }
    });

    it('a last error that fits stays on its row; a path longer than a line is never cut, on a line of its own', async () => {
      const own = tempDir();
      try {
        const file = writeConfig(own.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' } } });
        const db = seedDb(join(own.dir, 'receiver.db'));
        const path = `/var/lib/receiver/${'deeply/nested/'.repeat(8)}licence.json`;
        const short = insertEvent(db, { deliveryId: 'evt_s', status: 'dead', receivedAt: now - 2000, lastError: 'exit 1' });
        const long = insertEvent(db, { deliveryId: 'evt_l', status: 'dead', receivedAt: now - 1000, lastError: `licence: cannot open ${path}: no such file` });
        db.close();
        const lines = (await runInProcess(['events', 'list', '-c', file], { now: () => now })).stdout.trimEnd().split('\n');
        expect(lines.find((l) => l.startsWith(`${short} `))).toMatch(/\sdead\s+webhook\s+1\s+exit 1$/);
        const at = lines.findIndex((l) => l.startsWith(`${long} `));
        // The path alone on its line, longer than 100 columns rather than cut.
        expect(lines.slice(at + 1, at + 4)).toEqual(['    licence: cannot open', `    ${path}:`, '    no such file']);
      } finally {
        own.cleanup();
      }
    });

    it('--type is exact, or a pattern with * and ?', async () => {
      expect(await ids('--type', 'invoice.paid')).toEqual([e.paid]);
      expect(await ids('--type', 'invoice')).toEqual([]);
      expect(await ids('--type', 'invoice.*')).toEqual([e.due, e.failed, e.paid]);
      expect(await ids('--type', '*.refunded')).toEqual([e.refund]);
      expect(await ids('--type', 'invoice.pai?')).toEqual([e.paid]);
    });

    it('--since and --until take ISO 8601 (UTC without a zone) or an age; anything else is exit 2 naming the flag', async () => {
      expect(await ids('--since', '1h')).toEqual([e.due, e.refund]);
      expect(await ids('--since', '3h', '--until', '20m')).toEqual([e.refund, e.failed]);
      expect(await ids('--since', '2d')).toEqual([e.due, e.refund, e.failed]);
      expect(await ids('--until', '2026-11-28')).toEqual([e.paid]);
      expect(await ids('--since', '2026-11-30T11:45')).toEqual([e.due]);
      expect(await ids('--since', '2026-11-30T12:45+01:00')).toEqual([e.due]);
      const bad = await runInProcess(['events', 'list', '-c', config, '--since', 'yesterday']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--since must be a time: ISO 8601 (2026-11-30, 2026-11-30T14:02 in UTC, or with a zone) or an age (30m, 2h, 3d, 1w)');
      expect((await runInProcess(['events', 'list', '-c', config, '--until', '5x'])).code).toBe(2);
    });

    it('--search finds a text in bodies, and says on stderr when --scan-limit left older events unsearched', async () => {
      expect(await ids('--search', 'cus_ann')).toEqual([e.refund, e.paid]);
      expect(await ids('--search', 'cus_ann', '--type', 'invoice.*')).toEqual([e.paid]);
      expect(await ids('--search', 'nobody')).toEqual([]);
      const bounded = await runInProcess(['events', 'list', '-c', config, '--search', 'cus_ann', '--scan-limit', '2', '--json'], { now: () => now });
      expect(bounded.code).toBe(0);
      expect(JSON.parse(bounded.stdout).map((x: { id: number }) => x.id)).toEqual([e.refund]);
      expect(bounded.stderr).toContain('--search read the bodies of the 2 newest events matching the other filters only; older ones were not searched');
      const noSearch = await runInProcess(['events', 'list', '-c', config, '--scan-limit', '2']);
      expect(noSearch.code).toBe(2);
      expect(noSearch.stderr).toContain('--scan-limit bounds --search');
    });

    it('a source not in the configuration that lists nothing is named on stderr with the configured ones', async () => {
      const r = await runInProcess(['events', 'list', '-c', config, '--source', 'strip']);
      expect(r.code).toBe(0);
      expect(r.stdout).toBe('No events.\n');
      expect(r.stderr).toBe('Warning: no source named "strip" in the configuration; configured: stripe, gh\n');
      // A configured source with nothing stored is simply empty.
      expect((await runInProcess(['events', 'list', '-c', config, '--source', 'gh'])).stderr).toBe('');
    });

    it('text: short times, NEXT for pending events, ids cut with … to fit 100 columns, a long last error whole on the lines below; --wide shows everything', async () => {
      const r = await runInProcess(['events', 'list', '-c', config], { now: () => now });
      const lines = r.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(/^ID\s+RECEIVED\s+SOURCE\s+DELIVERY ID\s+TYPE\s+STATUS\s+ORIGIN\s+ATTEMPTS\s+NEXT\s+LAST ERROR$/);
      for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
      const at = lines.findIndex((l) => l.startsWith(`${e.failed} `));
      expect(lines[at]).toMatch(/^\d+\s+11-30 10:00:00\s+stripe\s+evt_1PqRsT…\s+invoice\.pay…\s+pending\s+webhook\s+3\s+in 4m$/);
      // The error below its row, broken between words only, every word of it there.
      const error = lines.slice(at + 1, at + 4);
      for (const line of error) expect(line).toMatch(/^ {4}\S/);
      expect(error.map((l) => l.trim()).join(' ')).toBe(`exit status 1: ${'the licence server answered 503 Service Unavailable; '.repeat(4)}END`);
      expect(lines[at + 4]).toMatch(new RegExp(`^${e.paid} `));
      expect(lines.find((l) => l.startsWith(`${e.due} `))).toMatch(/\spending\s+webhook\s+0\s+due$/);
      expect(lines.find((l) => l.startsWith(`${e.paid} `))).toMatch(/\sdone\s+webhook\s+1$/);
      const wide = await runInProcess(['events', 'list', '-c', config, '--wide'], { now: () => now });
      expect(wide.stdout).toContain('2026-11-30T10:00:00.000Z  stripe  evt_1PqRsT2eZvKYlo2C0a1b2c3d4e5f6g7h  invoice.payment_failed.with_a_rather_long_name');
      expect(wide.stdout).toContain('in 4m  exit status 1: the licence server answered 503');
      expect(wide.stdout).toContain('Unavailable; END\n');
    });
  });

  describe('show: JSON bodies indented, attempts numbered across replays, runs counted by outcome', () => {
    const own = tempDir();
    let config: string;
    let id: number;
    const BODY = '{"id":"evt_9","amount":12345678901234567890,"items":[],"nested":{"a":[1,{"b":null}]},"text":"a, b: {c}","q":"say \\"hi\\", \\\\"}';
    // A differing body of 50 fields: the conflict shows its first 40 lines.
    const CONFLICT = JSON.stringify(Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`f${i}`, i])));
    beforeAll(() => {
      config = writeConfig(own.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' } } });
      const db = seedDb(join(own.dir, 'receiver.db'));
      id = insertEvent(db, { deliveryId: 'evt_9', status: 'done', receivedAt: t0, attempts: 1, body: BODY });
      // Three failed tries of two routes, a replay, then one try: its stored attempt is 1 again.
      let at = t0 + 1000;
      for (const attempt of [1, 2, 3]) {
        insertAttempt(db, id, { attempt, route: 'mail', effectKey: 'mail:evt_9', startedAt: (at += 1000), outcome: 'ok' });
        insertAttempt(db, id, { attempt, route: 'crm', effectKey: 'crm:cus_9', startedAt: (at += 1000), outcome: 'failed', error: 'crm down' });
      }
      insertAttempt(db, id, { attempt: 1, route: 'mail', effectKey: 'mail:evt_9', startedAt: (at += 1000), outcome: 'skipped' });
      insertAttempt(db, id, { attempt: 1, route: 'crm', effectKey: 'crm:cus_9', startedAt: (at += 1000), outcome: 'ok', forced: true });
      insertEffect(db, { effectKey: 'crm:cus_9', eventId: id, at });
      insertEffect(db, { effectKey: 'mail:evt_9', eventId: id, at: t0 });
      db.prepare(
        `INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, headers, body) VALUES (?, 'stripe', 'evt_9', ?, 'c', ?, ?)`,
      ).run(id, t0 + 500, JSON.stringify({ 'content-type': 'application/json; charset=utf-8' }), Buffer.from(CONFLICT));
      db.prepare(
        `INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, headers, body) VALUES (?, 'stripe', 'evt_9', ?, 'd', ?, ?)`,
      ).run(id, t0 + 600, JSON.stringify({ 'content-type': 'text/plain' }), Buffer.from('x'.repeat(10_000)));
      db.close();
    });
    afterAll(own.cleanup);

    it('prints a JSON body indented by 2, every token as received; --json keeps the bytes', async () => {
      const r = await runInProcess(['events', 'show', '-c', config, String(id)]);
      expect(r.stdout).toContain('; JSON shown indented, --json has it as received):\n');
      expect(r.stdout).toContain(
        [
          '{',
          '  "id": "evt_9",',
          '  "amount": 12345678901234567890,',
          '  "items": [],',
          '  "nested": {',
          '    "a": [',
          '      1,',
          '      {',
          '        "b": null',
          '      }',
          '    ]',
          '  },',
          '  "text": "a, b: {c}",',
          '  "q": "say \\"hi\\", \\\\"',
          '}',
          'attempts:',
        ].join('\n'),
      );
      expect(JSON.parse((await runInProcess(['events', 'show', '-c', config, String(id), '--json'])).stdout).body).toBe(BODY);
    });

    it('prints a conflict with its body, indented, at most 40 lines or 4000 characters; --json has all of it', async () => {
      const r = await runInProcess(['events', 'show', '-c', config, String(id)]);
      const conflicts = r.stdout.slice(r.stdout.indexOf('conflicts (same delivery id, different body):\n'));
      expect(conflicts.split('\n').slice(1, 4)).toEqual([`  ${new Date(t0 + 500).toISOString()} sha256 c:`, '    {', '      "f0": 0,']);
      expect(conflicts).toContain('      "f38": 38,\n    … 12 more line(s); --json has the whole body\n');
      expect(conflicts).not.toContain('"f39"');
      expect(conflicts).toContain(
        `  ${new Date(t0 + 600).toISOString()} sha256 d:\n    ${'x'.repeat(4000)}\n    … the rest of the line; --json has the whole body\n`,
      );
      const json = JSON.parse((await runInProcess(['events', 'show', '-c', config, String(id), '--json'])).stdout);
      expect(json.conflicts).toEqual([
        expect.objectContaining({ body: CONFLICT, bodyEncoding: 'utf8', headers: { 'content-type': 'application/json; charset=utf-8' } }),
        expect.objectContaining({ body: 'x'.repeat(10_000), headers: { 'content-type': 'text/plain' } }),
      ]);
    });

    it('numbers attempts on across a replay and marks where it started; counts ok and failed runs apart', async () => {
      const r = await runInProcess(['events', 'show', '-c', config, String(id)]);
      const attempts = r.stdout.slice(r.stdout.indexOf('attempts:\n'), r.stdout.indexOf('effects:\n'));
      expect(attempts.split('\n').map((l) => l.replace(/ \S+Z /, ' T '))).toEqual([
        'attempts:',
        '  #1 T mail mail:evt_9 ok',
        '  #1 T crm crm:cus_9 failed: crm down',
        '  #2 T mail mail:evt_9 ok',
        '  #2 T crm crm:cus_9 failed: crm down',
        '  #3 T mail mail:evt_9 ok',
        '  #3 T crm crm:cus_9 failed: crm down',
        '  -- replay: the retry counter started again here (attempt 1); #n counts on --',
        '  #4 T mail mail:evt_9 skipped',
        '  #4 T crm crm:cus_9 ok (forced)',
        '',
      ]);
      expect(r.stdout).toContain('  attempts:   1 since the last replay (4 in all, 1 replay(s))');
      expect(r.stdout).toContain('  crm:cus_9: done: 1 ok, 3 failed, 1 forced\n');
      expect(r.stdout).toContain('  mail:evt_9: done: 3 ok, 0 failed\n');
      const json = JSON.parse((await runInProcess(['events', 'show', '-c', config, String(id), '--json'])).stdout);
      expect(json.attemptLog.map((a: { attempt: number; number: number; replay: number }) => [a.attempt, a.number, a.replay])).toEqual([
        [1, 1, 0],
        [1, 1, 0],
        [2, 2, 0],
        [2, 2, 0],
        [3, 3, 0],
        [3, 3, 0],
        [1, 4, 1],
        [1, 4, 1],
      ]);
      expect(json.effects.find((f: { effectKey: string }) => f.effectKey === 'crm:cus_9')).toMatchObject({ runs: 1, okRuns: 1, failedRuns: 3, runningRuns: 0 });
    });
  });

  describe("show: each route's unit of work", () => {
    const own = tempDir();
    let config: string;
    let id: number;
    beforeAll(() => {
      config = writeConfig(own.dir, { sources: { stripe: { provider: 'stripe', secret: 'whsec_test' } } });
      const db = seedDb(join(own.dir, 'receiver.db'));
      id = insertEvent(db, { deliveryId: 'evt_lanes', status: 'pending', receivedAt: t0, attempts: 3, nextAttemptAt: t0 + 60_000 });
      const unit = db.prepare(
        `INSERT INTO units (event_id, route, lane, status, attempts, next_attempt_at, lease_owner, lease_expires_at, last_error, replays, finished_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      unit.run(id, 'deploy', 'deploys', 'dead', 3, t0 + 5000, null, null, 'exit status 1: deploy failed', 0, t0 + 9000);
      unit.run(id, 'licence', 'licence', 'pending', 1, t0 + 60_000, null, null, 'smtp 421', 1, null);
      unit.run(id, 'crm', 'crm', 'processing', 2, t0, 'drain-7', t0 + 90_000, null, 0, null);
      unit.run(id, 'audit', 'audit', 'done', 1, t0, null, null, null, 0, t0 + 2000);
      db.prepare(`UPDATE events SET planned = 1 WHERE id = ?`).run(id);
      db.close();
    });
    afterAll(own.cleanup);

    const iso = (ms: number) => new Date(ms).toISOString();

    it('--json: route, lane, status, attempts, next attempt (pending only), last error, lease (processing only), replays; the derived status as it was', async () => {
      const e = JSON.parse((await runInProcess(['events', 'show', '-c', config, String(id), '--json'])).stdout);
      expect(e.status).toBe('pending');
      expect(e.units).toEqual([
        {
          route: 'deploy',
          lane: 'deploys',
          status: 'dead',
          attempts: 3,
          nextAttemptAt: null,
          lastError: 'exit status 1: deploy failed',
          leaseOwner: null,
          leaseExpiresAt: null,
          replays: 0,
          finishedAt: iso(t0 + 9000),
        },
        {
          route: 'licence',
          lane: 'licence',
          status: 'pending',
          attempts: 1,
          nextAttemptAt: iso(t0 + 60_000),
          lastError: 'smtp 421',
          leaseOwner: null,
          leaseExpiresAt: null,
          replays: 1,
          finishedAt: null,
        },
        {
          route: 'crm',
          lane: 'crm',
          status: 'processing',
          attempts: 2,
          nextAttemptAt: null,
          lastError: null,
          leaseOwner: 'drain-7',
          leaseExpiresAt: iso(t0 + 90_000),
          replays: 0,
          finishedAt: null,
        },
        {
          route: 'audit',
          lane: 'audit',
          status: 'done',
          attempts: 1,
          nextAttemptAt: null,
          lastError: null,
          leaseOwner: null,
          leaseExpiresAt: null,
          replays: 0,
          finishedAt: iso(t0 + 2000),
        },
      ]);
    });

    it('text: one line per route under the derived status', async () => {
      const out = (await runInProcess(['events', 'show', '-c', config, String(id)])).stdout;
      const start = out.indexOf('units (');
      expect(start).toBeGreaterThan(out.indexOf('  status:     pending'));
      expect(out.slice(start, out.indexOf('headers:')).trimEnd().split('\n')).toEqual([
        'units (one per route; the status above is derived from them):',
        '  ROUTE    LANE     STATUS      ATTEMPTS         NEXT                                          LAST ERROR',
        '  deploy   deploys  dead        3                                                              exit status 1: deploy failed',
        `  licence  licence  pending     1 (1 replay(s))  ${iso(t0 + 60_000)}                      smtp 421`,
        `  crm      crm      processing  2                lease drain-7 until ${iso(t0 + 90_000)}`,
        '  audit    audit    done        1',
      ]);
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
