import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCatchUp, type CatchUpRunOptions } from '../../src/catchup/run.js';
import { makeConfig, startApp, tempDir, waitFor, type RunningApp } from '../helpers.js';
import { FakeGithub, GITHUB_SECRET, GITHUB_TOKEN, HOOK_PATH } from './fakes.js';

const ATTEMPTS = /\/deliveries\/\d+\/attempts$/;

describe('catch-up: github (redelivery asked through the API)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let gh: FakeGithub;
  let app: RunningApp;
  let db: Database.Database;
  const waits: number[] = [];

  async function setup(token = GITHUB_TOKEN, catchUp: Record<string, unknown> = {}) {
    const config = makeConfig(
      { sources: { gh: { provider: 'github', secret: GITHUB_SECRET, catchUp: { token: 'env:GH_TOKEN', hook: HOOK_PATH, apiBase: gh.base, ...catchUp } } } },
      tmp.dir,
      { GH_TOKEN: token },
    );
    app = await startApp(config);
    db = new Database(config.database, { readonly: true });
    gh.target = `${app.url}/webhooks/gh`;
  }

  const run = (extra: Partial<CatchUpRunOptions> = {}) =>
    runCatchUp({
      settings: app.config.catchUp.get('gh')!,
      source: app.config.sources.get('gh')!,
      store: app.store,
      routes: app.config.routes,
      now: Date.now(),
      sleep: async (ms) => void waits.push(ms),
      ...extra,
    });
  const stored = () => db.prepare(`SELECT delivery_id FROM events ORDER BY id`).pluck().all() as string[];

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-github-');
    gh = await new FakeGithub().start();
    waits.length = 0;
  });
  afterEach(async () => {
    db?.close();
    await app?.close();
    await gh.close();
    tmp.cleanup();
  });

  it('asks once for each delivery missed while down; each comes back signed and is stored once; a second run asks nothing', async () => {
    await setup();
    expect(await run()).toMatchObject({ error: null, listed: 0 });
    const ok = await gh.push();
    expect(ok.status_code).toBe(202);
    gh.target = undefined;
    const missed = [await gh.push('push'), await gh.push('issues'), await gh.push('push')];
    expect(missed.every((d) => d.status_code === 0)).toBe(true);
    gh.target = `${app.url}/webhooks/gh`;

    const r = await run();
    expect(r).toMatchObject({ error: null, listed: 4, alreadyStored: 1, storedNow: 0, redeliveryAsked: 3, failed: 0 });
    expect(gh.count('POST', ATTEMPTS)).toBe(3);
    // Oldest first, each by its own delivery record.
    expect(gh.requests.filter((q) => q.method === 'POST').map((q) => q.path)).toEqual(missed.map((d) => `/${HOOK_PATH}/deliveries/${d.id}/attempts`));
    await waitFor(() => (stored().length === 4 ? true : undefined), 'the redeliveries');
    // Redeliveries arrive as GitHub sends them, maybe at once: compared as a set.
    expect(stored().sort()).toEqual([ok, ...missed].map((d) => `42:${d.guid}`).sort());

    const again = await run();
    expect(again).toMatchObject({ error: null, listed: 4, alreadyStored: 4, redeliveryAsked: 0 });
    expect(gh.count('POST', ATTEMPTS)).toBe(3);
    expect(stored()).toHaveLength(4);
  });

  it('follows Link rel="next" cursor pages at 100 a page, and stops at deliveries from before the starting point', async () => {
    await setup();
    gh.target = undefined;
    for (let i = 0; i < 30; i++) await gh.push();
    await new Promise((r) => setTimeout(r, 5));
    await run(); // configured now: the 30 above are from before
    for (let i = 0; i < 130; i++) await gh.push();
    gh.target = `${app.url}/webhooks/gh`;
    gh.faultAfter = 1;
    gh.faults.push({ status: 500 });
    const r = await run({ dryRun: true });
    expect(r).toMatchObject({ error: null, listed: 130, redeliveryAsked: 130 });
    const lists = gh.requests.filter((q) => q.method === 'GET');
    expect(new URLSearchParams(lists[0]!.query).get('per_page')).toBe('100');
    expect(lists.at(-1)!.query).toMatch(/cursor=/);
    // The dry run asked nothing and stored nothing.
    expect(gh.count('POST', ATTEMPTS)).toBe(0);
    expect(stored()).toEqual([]);
    expect(waits).toEqual([500]);
  });

  it('a secondary rate limit (403, x-ratelimit-remaining 0) is waited out until x-ratelimit-reset', async () => {
    await setup();
    await run();
    gh.target = undefined;
    await gh.push();
    gh.target = `${app.url}/webhooks/gh`;
    gh.faults.push({ status: 403, headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 2) } });
    const r = await run();
    expect(r).toMatchObject({ error: null, redeliveryAsked: 1 });
    expect(waits[0]).toBeGreaterThan(500);
    expect(waits[0]).toBeLessThanOrEqual(2000);
  });

  it('a hook that does not exist is one error naming the fields to check', async () => {
    await setup(GITHUB_TOKEN, { hook: 'repos/shop/site/hooks/43' });
    const r = await run();
    expect(r.error).toBe(
      'sources.gh.catchUp: GitHub: the API answered 404 to GET /repos/shop/site/hooks/43/deliveries: nothing there, or the credential cannot see it (check catchUp.hook and catchUp.apiBase)',
    );
  });

  it('a secondary rate limit (403 with Retry-After) is waited out too', async () => {
    await setup();
    gh.faults.push({ status: 403, headers: { 'retry-after': '4' }, body: '{"message":"You have exceeded a secondary rate limit"}' });
    expect(await run()).toMatchObject({ error: null });
    expect(waits).toEqual([4000]);
  });

  it('a bad token is one clear error naming the source and the field, and nothing is asked', async () => {
    await setup('github_pat_wrong');
    await run();
    const r = await run();
    expect(r.error).toBe('sources.gh.catchUp.token: GitHub refused the credential (HTTP 401): it is wrong, expired or revoked, or lacks a permission');
    expect(r.hint).toContain('Webhooks: Read and write');
    expect(gh.count('POST', ATTEMPTS)).toBe(0);
  });

  it('a redelivery GitHub refuses counts as failed, and the next run asks for it again', async () => {
    await setup();
    await run();
    gh.target = undefined;
    await gh.push();
    gh.target = `${app.url}/webhooks/gh`;
    gh.faultAfter = 1;
    gh.faults.push({ status: 422, body: '{"message":"Validation Failed"}' });
    const r = await run();
    expect(r).toMatchObject({ listed: 1, redeliveryAsked: 0, failed: 1 });
    expect(r.error).toBe(
      `sources.gh.catchUp: GitHub: the API answered 422 to POST /${HOOK_PATH}/deliveries/${gh.deliveries[0]!.id}/attempts (Validation Failed)`,
    );
    const next = await run();
    expect(next).toMatchObject({ error: null, redeliveryAsked: 1 });
    await waitFor(() => (stored().length === 1 ? true : undefined), 'the redelivery');
  });
});
