import Database from 'better-sqlite3';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, describe, expect, it } from 'vitest';
import { providers } from '../src/providers/registry.js';
import { makeConfig, runCli, startServe, tempDir, writeConfig, type CliResult } from './helpers.js';

/**
 * A full session: `receiver serve` with every kind of secret reference, good and bad
 * deliveries, duplicates, a conflict, effects that dump their whole environment, a scrape
 * of /metrics with its token, then check-config, send-test, events, stats and replay.
 * Everything any process wrote to stdout and stderr, and every byte of the database
 * file, is searched for the configured secrets and for the signatures sent: none found.
 */

const unique = (label: string) => `${label}-${randomBytes(9).toString('hex')}`;

const SECRETS = {
  stripe: `whsec_${randomBytes(24).toString('hex')}`,
  githubNew: unique('gh-new'),
  githubOld: unique('gh-old'),
  shopFile: unique('shop-file'),
  standard: `whsec_${randomBytes(24).toString('base64')}`,
  gitlab: unique('gitlab-token'),
  asaas: unique('asaas-token'),
  metrics: unique('metrics-token'),
  // An http effect's credential header (env:) and its signing secret.
  appToken: unique('app-token'),
  forward: `whsec_${randomBytes(32).toString('base64')}`,
};

const env = {
  LEAK_STRIPE_SECRET: SECRETS.stripe,
  LEAK_GH_OLD: SECRETS.githubOld,
  LEAK_STANDARD: SECRETS.standard,
  LEAK_GITLAB: SECRETS.gitlab,
  LEAK_ASAAS: SECRETS.asaas,
  LEAK_METRICS_TOKEN: SECRETS.metrics,
  LEAK_APP_TOKEN: SECRETS.appToken,
  LEAK_FORWARD_SECRET: SECRETS.forward,
};

describe('no secret is ever written: stdout, stderr and the database of a full session', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('finds no configured secret and no signature anywhere', { timeout: 90_000 }, async () => {
    const dir = `${tmp.dir}/session`;
    mkdirSync(dir);
    writeFileSync(`${dir}/shop.secret`, `${SECRETS.shopFile}\n`);
    const dump = ['/bin/sh', '-c', 'env; cat; echo "attempt $RECEIVER_ATTEMPT" >&2'];
    const sources: Record<string, Record<string, unknown>> = {
      stripe: { provider: 'stripe', secret: 'env:LEAK_STRIPE_SECRET' },
      github: { provider: 'github', secrets: [SECRETS.githubNew, 'env:LEAK_GH_OLD'] },
      shop: {
        provider: 'hmac-sha256',
        header: 'X-Signature',
        prefix: 'sha256=',
        secret: `file:${dir}/shop.secret`,
        deliveryId: '{body.id}',
        eventType: '{body.type}',
      },
      polar: { provider: 'standard-webhooks', secret: 'env:LEAK_STANDARD' },
    };
    // Token-style senders, where the header *is* the secret (once their providers exist).
    if (providers.has('gitlab')) sources.gitlab = { provider: 'gitlab', secret: 'env:LEAK_GITLAB' };
    if (providers.has('asaas')) sources.asaas = { provider: 'asaas', secret: 'env:LEAK_ASAAS' };
    // The app an http effect forwards to: it gets the credential and a signature it can check.
    const forwarded: { headers: IncomingHttpHeaders; body: string }[] = [];
    const app = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        forwarded.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    const appUrl = `http://127.0.0.1:${(app.address() as AddressInfo).port}/hooks`;
    const json = {
      sources,
      routes: [
        {
          name: 'forward',
          source: 'shop',
          events: ['*'],
          key: '{id}',
          effect: { http: { url: appUrl, headers: { Authorization: 'env:LEAK_APP_TOKEN' }, sign: 'env:LEAK_FORWARD_SECRET' } },
        },
        { name: 'dump-ok', source: '*', events: ['*'], key: '{source}:{id}', effect: { exec: [...dump.slice(0, 2), `${dump[2]}; exit 0`] } },
        { name: 'dump-fail', source: 'shop', events: ['*'], key: '{id}', effect: { exec: [...dump.slice(0, 2), `${dump[2]}; exit 7`] } },
      ],
      retry: { maxAttempts: 2, baseSeconds: 0.01, maxSeconds: 0.01 },
      metrics: { token: 'env:LEAK_METRICS_TOKEN' },
      log: { level: 'trace' },
    };
    const file = writeConfig(dir, json);
    const config = makeConfig({ ...json, database: `${dir}/receiver.db` }, dir, env);
    const outputs: { what: string; text: string }[] = [];
    const keep = (what: string, r: CliResult) => {
      outputs.push({ what: `${what} stdout`, text: r.stdout }, { what: `${what} stderr`, text: r.stderr });
      return r;
    };
    const signatures: string[] = [];

    const serve = await startServe(file, { env, args: ['--log-level', 'trace'] });
    try {
      const send = async (name: string, body: string, extra: Record<string, string> = {}, secret?: string) => {
        const source = config.sources.get(name)!;
        const url = `${serve.url}/webhooks/${name}`;
        const signed = source.provider.sign(Buffer.from(body), secret ?? source.secrets[0]!.reveal(), Date.now(), source, url);
        for (const [k, v] of Object.entries(signed.headers)) if (/sig|token|hmac/i.test(k)) signatures.push(v);
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...signed.headers, ...extra },
          body: signed.body === undefined ? body : new Uint8Array(signed.body),
        });
        return res.status;
      };
      const now = Math.floor(Date.now() / 1000);
      // Good deliveries, every source, and a duplicate of each.
      for (const name of config.sources.keys()) {
        const body = name === 'shop' ? '{"id":"o-1","type":"order.paid"}' : new TextDecoder().decode(config.sources.get(name)!.provider.sample(Date.now()));
        expect([200, 202]).toContain(await send(name, body));
        expect([200, 202]).toContain(await send(name, body));
      }
      // The old GitHub secret (rotation) also verifies.
      expect(await send('github', `{"zen":"old secret","t":${now}}`, {}, SECRETS.githubOld)).toBe(202);
      // A conflict, and an Authorization header carrying a secret on a stored delivery.
      expect(await send('shop', '{"id":"o-1","type":"order.paid","changed":true}')).toBe(409);
      expect(await send('shop', '{"id":"o-2","type":"order.paid"}', { authorization: `Bearer ${SECRETS.metrics}` })).toBe(202);
      // Bad deliveries: wrong secret, signature of another source, garbage.
      expect(await send('shop', '{"id":"o-3"}', {}, 'not-the-secret')).toBe(401);
      expect(await send('stripe', '{"id":"evt_x"}', {}, SECRETS.githubNew)).toBe(401);
      expect(
        (await fetch(`${serve.url}/webhooks/github`, { method: 'POST', body: '{}', headers: { 'x-hub-signature-256': `sha256=${SECRETS.githubNew}` } })).status,
      ).toBe(401);
      if (config.sources.has('gitlab')) {
        expect((await fetch(`${serve.url}/webhooks/gitlab`, { method: 'POST', body: '{}', headers: { 'x-gitlab-token': `${SECRETS.gitlab}x` } })).status).toBe(
          401,
        );
      }
      // Metrics with its token, and refused without it.
      expect((await fetch(`${serve.url}/metrics`, { headers: { authorization: `Bearer ${SECRETS.metrics}` } })).status).toBe(200);
      expect((await fetch(`${serve.url}/metrics`, { headers: { authorization: `Bearer ${SECRETS.stripe}` } })).status).toBe(401);

      // The CLI around a running server.
      expect(keep('check-config', await runCli(['check-config', '-c', file], { env })).code).toBe(0);
      expect(keep('check-config --json', await runCli(['check-config', '-c', file, '--json'], { env })).code).toBe(0);
      for (const name of config.sources.keys()) {
        // --run-effects: the effects run too (a test delivery skips them otherwise), so their output is looked at.
        const r = keep(`send-test ${name}`, await runCli(['send-test', name, '-c', file, '--url', serve.url, '--run-effects'], { env }));
        expect(r.code).toBe(0);
      }

      // Let the drain run every effect (bounded poll of the database, read-only).
      const db = new Database(`${dir}/receiver.db`, { readonly: true });
      const deadline = Date.now() + 15_000;
      const settled = () => (db.prepare(`SELECT count(*) FROM events WHERE status IN ('pending', 'processing')`).pluck().get() as number) === 0;
      while (!settled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(settled()).toBe(true);
      expect(db.prepare(`SELECT count(*) FROM attempts WHERE output IS NOT NULL AND output <> ''`).pluck().get()).toBeGreaterThan(0);
      expect(db.prepare(`SELECT count(*) FROM events WHERE status = 'dead'`).pluck().get()).toBeGreaterThan(0);
      db.close();

      const list = keep('events list --json', await runCli(['events', 'list', '--json', '--limit', '100', '-c', file], { env }));
      const ids = (JSON.parse(list.stdout) as { id: number }[]).map((e) => e.id);
      expect(ids.length).toBeGreaterThan(5);
      // events show for a few (each CLI run is a second): the newest, the oldest, a dead one.
      const dead = (
        JSON.parse(keep('events list --status dead', await runCli(['events', 'list', '--status', 'dead', '--json', '-c', file], { env })).stdout) as {
          id: number;
        }[]
      )[0]!.id;
      for (const id of new Set([ids[0]!, ids.at(-1)!, dead]))
        keep(`events show ${id}`, await runCli(['events', 'show', String(id), '--json', '-c', file], { env }));
      keep('events show (text)', await runCli(['events', 'show', String(ids[0]), '-c', file], { env }));
      keep('stats', await runCli(['stats', '--json', '-c', file], { env }));
      keep('replay --dead', await runCli(['replay', '--dead', '-c', file], { env }));
    } finally {
      expect(await serve.stop()).toBe(0);
      app.close();
    }
    // The app got the resolved credential and forwards it can verify; nothing else saw either.
    expect(forwarded.length).toBeGreaterThan(0);
    for (const f of forwarded) {
      expect(f.headers.authorization).toBe(SECRETS.appToken);
      expect(() => new Webhook(SECRETS.forward).verify(f.body, f.headers as Record<string, string>)).not.toThrow();
    }
    const { stdout, stderr } = serve.output();
    outputs.push({ what: 'serve stdout', text: stdout }, { what: 'serve stderr', text: stderr });
    // The session really logged deliveries and effect attempts (so the search means something).
    expect(stderr).toContain('"msg":"delivery"');
    expect(stderr).toContain('"msg":"effect attempt"');

    const needles = [...Object.entries(SECRETS).map(([k, v]) => [`secret ${k}`, v] as const), ...signatures.map((s, i) => [`signature ${i}`, s] as const)];
    expect(signatures.length).toBeGreaterThan(10);
    const found: string[] = [];
    for (const { what, text } of outputs) for (const [name, needle] of needles) if (text.includes(needle)) found.push(`${name} in ${what}`);

    // Every column of every table, as text (bodies too).
    const db = new Database(`${dir}/receiver.db`, { readonly: true });
    const tables = db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).pluck().all() as string[];
    for (const table of tables) {
      for (const row of db.prepare(`SELECT * FROM ${table}`).all() as Record<string, unknown>[]) {
        for (const [column, value] of Object.entries(row)) {
          const text = Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
          for (const [name, needle] of needles) if (text.includes(needle)) found.push(`${name} in ${table}.${column}`);
        }
      }
    }
    db.close();
    // And every byte of the files (free pages, the WAL), in case something was written and deleted.
    for (const suffix of ['', '-wal', '-shm', '-journal']) {
      const path = `${dir}/receiver.db${suffix}`;
      if (!existsSync(path)) continue;
      const bytes = readFileSync(path);
      for (const [name, needle] of needles) if (bytes.includes(Buffer.from(needle))) found.push(`${name} in receiver.db${suffix} bytes`);
    }
    expect(found).toEqual([]);
  });
});
