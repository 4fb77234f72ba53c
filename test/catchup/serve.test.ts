import Database from 'better-sqlite3';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { FakeGithub, FakeStripe, GITHUB_SECRET, GITHUB_TOKEN, HOOK_PATH, STRIPE_KEY, STRIPE_WHSEC } from './fakes.js';

/**
 * The whole story with real processes: serve runs, is stopped while Stripe and GitHub
 * "deliver", starts again, and its start-up catch-up recovers every missed event, whose
 * effect runs once. Then `receiver catch-up` finds nothing left, a late Stripe webhook is a
 * duplicate, and --dry-run changes nothing.
 */
describe('catch-up: serve after downtime, and receiver catch-up', () => {
  let tmp: ReturnType<typeof tempDir>;
  let stripe: FakeStripe;
  let gh: FakeGithub;
  let serve: ServeProcess | undefined;
  const env = { STRIPE_API_KEY: STRIPE_KEY, GH_TOKEN: GITHUB_TOKEN };

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-serve-');
    stripe = await new FakeStripe().start();
    gh = await new FakeGithub().start();
  });
  afterEach(async () => {
    await serve?.stop();
    serve = undefined;
    await stripe.close();
    await gh.close();
    tmp.cleanup();
  });

  function config(ghToken = 'env:GH_TOKEN') {
    const effects = join(tmp.dir, 'effects.log');
    const file = writeConfig(tmp.dir, {
      sources: {
        shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:STRIPE_API_KEY', apiBase: stripe.base, everyMinutes: 60 } },
        gh: { provider: 'github', secret: GITHUB_SECRET, catchUp: { token: ghToken, hook: HOOK_PATH, apiBase: gh.base, everyMinutes: 60 } },
      },
      drain: { pollMs: 100 },
      routes: [
        {
          name: 'fulfil',
          source: 'shop',
          events: ['*'],
          key: '{body.data.object.id}',
          effect: { exec: ['/bin/sh', '-c', `echo "fulfil $RECEIVER_KEY" >> ${effects}`] },
        },
        { name: 'build', source: 'gh', events: ['push'], key: '{body.after}', effect: { exec: ['/bin/sh', '-c', `echo "build $RECEIVER_KEY" >> ${effects}`] } },
      ],
    });
    return { file, effects, db: join(tmp.dir, 'receiver.db') };
  }

  async function start(file: string): Promise<ServeProcess> {
    serve = await startServe(file, { env });
    stripe.target = `${serve.url}/webhooks/shop`;
    gh.target = `${serve.url}/webhooks/gh`;
    return serve;
  }

  const lines = (file: string) =>
    existsSync(file)
      ? readFileSync(file, 'utf8')
          .trim()
          .split('\n')
          .filter((l) => l !== '')
      : [];
  const catchUpLines = (s: ServeProcess, source: string) =>
    s
      .output()
      .stderr.split('\n')
      .filter((l) => l.includes('"msg":"catch-up') && l.includes(`"source":"${source}"`));

  it(
    'recovers what was missed during downtime at start; each effect runs once; again changes nothing; a late webhook is a duplicate; --dry-run changes nothing',
    { timeout: 120_000 },
    async () => {
      const { file, effects, db } = config();
      let s = await start(file);
      // The first runs at start: catch-up is configured from now on.
      await waitFor(() => (catchUpLines(s, 'shop').length > 0 && catchUpLines(s, 'gh').length > 0 ? true : undefined), 'the first catch-up runs');
      // Stripe's times are whole seconds: events of the second catch-up was configured in count as from before.
      await new Promise((r) => setTimeout(r, 1000));
      await stripe.create();
      await gh.push();
      await waitFor(() => (lines(effects).length === 2 ? true : undefined), 'the live effects');

      await s.stop();
      stripe.target = undefined;
      gh.target = undefined;
      const missedStripe = [await stripe.create(), await stripe.create()];
      const missedGh = [await gh.push('push', { after: 'sha-a' }), await gh.push('push', { after: 'sha-b' })];
      expect([...missedStripe, ...missedGh].some((e) => ('delivered' in e ? e.delivered : e.status_code === 202))).toBe(false);

      s = await start(file);
      await waitFor(() => (lines(effects).length === 6 ? true : undefined), 'the recovered effects', 10_000);
      const log = catchUpLines(s, 'shop').map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(log[0]).toMatchObject({ msg: 'catch-up', listed: 3, alreadyStored: 1, storedNow: 2 });
      expect(JSON.parse(catchUpLines(s, 'gh')[0]!)).toMatchObject({ msg: 'catch-up', listed: 3, alreadyStored: 1, redeliveryAsked: 2 });
      expect(gh.count('POST', /attempts$/)).toBe(2);

      // receiver catch-up while serve runs: nothing left to do.
      const again = await runCli(['catch-up', '-c', file, '--json'], { env });
      expect(again.code).toBe(0);
      expect(JSON.parse(again.stdout).sources).toEqual([
        expect.objectContaining({ source: 'shop', listed: 3, alreadyStored: 3, storedNow: 0, redeliveryAsked: 0, failed: 0, error: null }),
        expect.objectContaining({ source: 'gh', listed: 3, alreadyStored: 3, storedNow: 0, redeliveryAsked: 0, failed: 0, error: null }),
      ]);
      expect(gh.count('POST', /attempts$/)).toBe(2);

      // Stripe retries its webhook of a caught-up event after all: a duplicate, answered as the first.
      const raw = new Database(db, { readonly: true });
      const id = raw.prepare(`SELECT id FROM events WHERE delivery_id = ?`).pluck().get(missedStripe[0]!.id) as number;
      expect(await stripe.webhook(stripe.events[1]!)).toEqual({ ok: true, status: 202 });
      expect(raw.prepare(`SELECT duplicates FROM events WHERE id = ?`).pluck().get(id)).toBe(1);
      expect(raw.prepare(`SELECT count(*) FROM events`).pluck().get()).toBe(6);

      // --dry-run: counts what is missing, changes nothing, asks nothing.
      stripe.target = undefined;
      gh.target = undefined;
      await stripe.create();
      await gh.push();
      const stateBefore = raw.prepare(`SELECT * FROM catch_up ORDER BY source`).all();
      const dry = await runCli(['catch-up', '-c', file, '--dry-run'], { env });
      expect(dry.code).toBe(0);
      expect(dry.stdout).toContain('shop (stripe, from ');
      expect(dry.stdout).toMatch(/shop .*listed 4, already stored 3, would store 1, failed 0/);
      expect(dry.stdout).toMatch(/gh .*listed 4, already stored 3, would ask redelivery of 1, failed 0/);
      expect(dry.stdout).toContain('dry run: nothing was changed');
      expect(raw.prepare(`SELECT count(*) FROM events`).pluck().get()).toBe(6);
      expect(raw.prepare(`SELECT * FROM catch_up ORDER BY source`).all()).toEqual(stateBefore);
      expect(gh.count('POST', /attempts$/)).toBe(2);
      raw.close();

      // Effects ran once each, whatever came twice.
      await new Promise((r) => setTimeout(r, 300));
      const ran = lines(effects);
      expect(ran).toHaveLength(6);
      expect(new Set(ran).size).toBe(6);

      // Results in metrics and stats.
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      expect(metrics).toMatch(/receiver_catch_up_runs_total\{source="shop",result="ok"\} 1/);
      expect(metrics).toMatch(/receiver_catch_up_events_total\{source="shop",outcome="stored"\} 2/);
      expect(metrics).toMatch(/receiver_catch_up_events_total\{source="gh",outcome="redelivery_asked"\} 2/);
      const stats = await runCli(['stats', '-c', file, '--json']);
      expect(JSON.parse(stats.stdout).catchUp).toEqual([
        expect.objectContaining({
          source: 'gh',
          configured: true,
          everyMinutes: 60,
          lastError: null,
          lastCounts: { listed: 3, alreadyStored: 3, storedNow: 0, redeliveryAsked: 0, failed: 0, skipped: 0 },
        }),
        expect.objectContaining({ source: 'shop', configured: true, everyMinutes: 60, lastError: null }),
      ]);
      const text = await runCli(['stats', '-c', file]);
      expect(text.stdout).toMatch(/catch-up \(from the senders' APIs\):\n {2}gh: every 60 min, last run \S+ ok \(listed 3/);

      // The API credentials were sent to the APIs only: never written anywhere.
      const written = [
        s.output().stdout,
        s.output().stderr,
        again.stdout,
        again.stderr,
        dry.stdout,
        dry.stderr,
        stats.stdout,
        text.stdout,
        readFileSync(db).toString('latin1'),
        readFileSync(effects, 'utf8'),
      ].join('\n');
      for (const credential of [STRIPE_KEY, GITHUB_TOKEN]) expect(written).not.toContain(credential);
    },
  );

  it('a wrong API token is one error line naming the source, and serve keeps taking deliveries', async () => {
    const { file } = config('literal-wrong-token');
    const s = await start(file);
    const failed = await waitFor(
      () =>
        s
          .output()
          .stderr.split('\n')
          .find((l) => l.includes('"msg":"catch-up failed"')),
      'the catch-up error',
    );
    const line = JSON.parse(failed) as Record<string, unknown>;
    expect(line).toMatchObject({
      level: 'error',
      source: 'gh',
      error: 'sources.gh.catchUp.token: GitHub refused the credential (HTTP 401): it is wrong, expired or revoked, or lacks a permission',
    });
    expect(s.output().stderr).not.toContain('literal-wrong-token');
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
    expect((await gh.push()).status_code).toBe(202);
    const cli = await runCli(['catch-up', 'gh', '-c', file], { env });
    expect(cli.code).toBe(1);
    expect(cli.stdout).toContain('error: sources.gh.catchUp.token: GitHub refused the credential (HTTP 401)');
    expect(cli.stdout).toContain('try: give catchUp.token a valid credential');
    expect(cli.stdout + cli.stderr).not.toContain('literal-wrong-token');
  });

  it('names an unknown source, refuses a --since it cannot read (exit 2)', async () => {
    const { file } = config();
    const unknown = await runCli(['catch-up', 'nope', '-c', file], { env });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('Error: no source named "nope"');
    const since = await runCli(['catch-up', '--since', 'yesterday', '-c', file], { env });
    expect(since.code).toBe(2);
    expect(since.stderr).toContain('--since must be a duration');
  });
});
