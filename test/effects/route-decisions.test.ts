import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeConfig, post, runCli, startApp, tempDir, writeConfig, type RunningApp } from '../helpers.js';
import { clock, drainDue, harness } from '../drain/helpers.js';

/**
 * Every settled event records why each route of its source did or did not apply: at ingest
 * for an event stored done because none applied, and by the drain when it plans effects.
 * Real HTTP on port 0, a real SQLite file, real exec effects, `events show` as a subprocess.
 */
const gh = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };
const json = {
  sources: { gh, shop: gh, quiet: gh },
  routes: [
    { name: 'deploy', source: 'gh', events: ['push'], filter: { 'body.ref': 'refs/heads/main' }, key: '{body.after}', effect: { exec: ['/bin/true'] } },
    { name: 'licence', source: 'shop', events: ['checkout.session.completed'], key: '{body.order}', effect: { exec: ['/bin/true'] } },
  ],
};

describe('route decisions', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-decisions-');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    tmp.cleanup();
  });

  it('ping, another branch, an unrouted type and source at ingest; applied and an empty key template in the drain; events show prints them', async () => {
    const config = makeConfig(json, tmp.dir);
    const c = clock();
    app = await startApp(config, { routes: config.routes, now: c.now });
    const send = async (source: string, body: object) =>
      (JSON.parse((await post(`${app!.url}/webhooks/${source}`, JSON.stringify(body))).text) as { id: number }).id;
    const ping = await send('gh', { id: 'g1', type: 'ping', zen: 'Keep it logically awesome.' });
    const dev = await send('gh', { id: 'g2', type: 'push', ref: 'refs/heads/dev', after: 'c0ffee' });
    const main = await send('gh', { id: 'g3', type: 'push', ref: 'refs/heads/main', after: 'abc123' });
    const noAfter = await send('gh', { id: 'g4', type: 'push', ref: 'refs/heads/main' });
    const refund = await send('shop', { id: 's1', type: 'charge.refunded' });
    const quiet = await send('quiet', { id: 'q1', type: 'anything' });

    expect((await drainDue(harness(config, app.store, c.now))).map((o) => [o.eventId, o.status])).toEqual([
      [main, 'done'],
      [noAfter, 'retry'],
    ]);

    const decisions = async (id: number) => (await app!.store.getEvent(id))!.routeDecisions;
    expect(await decisions(ping)).toEqual(['deploy: event type "ping" not in [push]']);
    expect(await decisions(dev)).toEqual(['deploy: filter body.ref = "refs/heads/dev", wanted "refs/heads/main"']);
    expect(await decisions(main)).toEqual(['deploy: applies (key "abc123")']);
    expect(await decisions(noAfter)).toEqual(['deploy: key template "{body.after}" resolved to nothing']);
    expect(await decisions(refund)).toEqual(['licence: event type "charge.refunded" not in [checkout.session.completed]']);
    expect(await decisions(quiet)).toEqual(['no route for source "quiet"']);

    const file = writeConfig(tmp.dir, json);
    const shownJson = await runCli(['events', 'show', String(dev), '--json', '-c', file]);
    expect(shownJson.code).toBe(0);
    expect((JSON.parse(shownJson.stdout) as { routeDecisions: string[] }).routeDecisions).toEqual([
      'deploy: filter body.ref = "refs/heads/dev", wanted "refs/heads/main"',
    ]);
    const shown = await runCli(['events', 'show', String(ping), '-c', file]);
    expect(shown.stdout).toContain(
      '  routes:     no route matched this event when it arrived (stored done; after adding a route, replay it)\n    deploy: event type "ping" not in [push]\n',
    );
    const drained = await runCli(['events', 'show', String(main), '-c', join(tmp.dir, 'receiver.config.json')]);
    expect(drained.stdout).toContain('  routes:\n    deploy: applies (key "abc123")\n');
  });

  it('a sender-chosen value is quoted and cut, so it cannot forge a line or fill the column', async () => {
    const config = makeConfig(json, tmp.dir);
    app = await startApp(config, { routes: config.routes });
    await post(`${app.url}/webhooks/gh`, JSON.stringify({ id: 'g1', type: 'push', ref: `refs/heads/x\ndeploy: applies (key "forged")${'z'.repeat(500)}` }));
    const stored = (await app.store.getEvent(1))!.routeDecisions!;
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatch(/^deploy: filter body\.ref = "refs\/heads\/x\\ndeploy: applies \(key \\"forged\\"\)z+…, wanted "refs\/heads\/main"$/);
    expect(stored[0]!.length).toBeLessThan(120);
  });
});
