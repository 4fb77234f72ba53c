import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeConfig, post, runCli, startApp, tempDir, type RunningApp } from '../helpers.js';
import { inspect } from '../drain/helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

describe('ingest: an event no route applies to is stored done, never drained', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-unrouted-');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    tmp.cleanup();
  });

  const routes = [
    { name: 'licence', source: 'shop', events: ['order.paid'], key: '{body.order}', effect: { exec: ['/bin/true'] } },
    { name: 'deploy', source: 'shop', events: ['push'], filter: { 'body.ref': 'refs/heads/main' }, key: '{body.after}', effect: { exec: ['/bin/true'] } },
    { name: 'by-id', source: 'shop', events: ['odd'], filter: { id: 3 }, key: '{body.id}', effect: { exec: ['/bin/true'] } },
  ];

  it('by source, event type and filter; a filter on {id} is left to the drain; a duplicate gets the same answer', async () => {
    const config = makeConfig({ sources: { shop, other: shop }, routes }, tmp.dir);
    app = await startApp(config, { routes: config.routes });
    const send = (source: string, body: object) => post(`${app!.url}/webhooks/${source}`, JSON.stringify(body));
    const answers = [
      await send('shop', { id: 'e1', type: 'order.paid', order: 'o1' }), // routed
      await send('shop', { id: 'e2', type: 'order.refunded' }), // no route for the type
      await send('shop', { id: 'e3', type: 'push', ref: 'refs/heads/dev', after: 'abc' }), // the filter does not match
      await send('shop', { id: 'e4', type: 'push', ref: 'refs/heads/main', after: 'abc' }), // it does
      await send('other', { id: 'e5', type: 'order.paid', order: 'o1' }), // no route for the source
      await send('shop', { id: 'e6', type: 'odd' }), // a filter on the event id: the drain decides
    ];
    expect(answers.map((a) => a.status)).toEqual([202, 202, 202, 202, 202, 202]);
    const duplicate = await send('shop', { id: 'e2', type: 'order.refunded' });
    expect(duplicate.text).toBe(answers[1]!.text);

    const db = inspect(config.database);
    try {
      const rows = db.db.prepare('SELECT delivery_id AS d, status, attempts, finished_at IS NOT NULL AS finished FROM events ORDER BY id').all();
      expect(rows).toEqual([
        { d: 'e1', status: 'pending', attempts: 0, finished: 0 },
        { d: 'e2', status: 'done', attempts: 0, finished: 1 },
        { d: 'e3', status: 'done', attempts: 0, finished: 1 },
        { d: 'e4', status: 'pending', attempts: 0, finished: 0 },
        { d: 'e5', status: 'done', attempts: 0, finished: 1 },
        { d: 'e6', status: 'pending', attempts: 0, finished: 0 },
      ]);
    } finally {
      db.close();
    }
  });

  it('events show says that no route matched', async () => {
    const config = makeConfig({ sources: { shop }, routes }, tmp.dir);
    app = await startApp(config, { routes: config.routes });
    await post(`${app.url}/webhooks/shop`, JSON.stringify({ id: 'e1', type: 'order.refunded' }));
    const file = join(tmp.dir, 'receiver.config.json');
    writeFileSync(file, JSON.stringify({ database: config.database, sources: { shop }, routes }));
    const shown = await runCli(['events', 'show', '1', '-c', file]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/status: +done/);
    expect(shown.stdout).toMatch(/no route matched this event when it arrived/);
  });
});
