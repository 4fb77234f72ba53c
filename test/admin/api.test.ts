import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isReceiverError } from '../../src/errors.js';
import { makeConfig, runCli, runInProcess, startApp, tempDir, writeConfig, type RunningApp } from '../helpers.js';
import { adminConfig, csrfOf, login, seed, startAdmin, TOKEN, type Seeded } from './helpers.js';

/**
 * The admin pages and API over real HTTP on a real SQLite file: every API route with and
 * without the token, the session cookie and its limits, CSRF, and escaping.
 */

const NOW = Date.UTC(2026, 10, 30, 14, 30);
const bearer = { authorization: `Bearer ${TOKEN}` };

describe('admin configuration', () => {
  it('refuses a token shorter than 32 characters, naming the field', () => {
    const tmp = tempDir();
    try {
      let error: unknown;
      try {
        makeConfig({ admin: { token: 'env:T' } }, tmp.dir, { T: 'x'.repeat(31) });
      } catch (e) {
        error = e;
      }
      expect(isReceiverError(error, 'config')).toBe(true);
      expect((error as Error).message).toMatch(/admin\.token: is 31 characters long; it must be at least 32/);
      expect(() => makeConfig({ admin: { token: 'env:UNSET' } }, tmp.dir, {})).toThrow(/admin\.token: environment variable UNSET is not set/);
      expect(makeConfig({ admin: { token: 'env:T' } }, tmp.dir, { T: 'x'.repeat(32) }).admin?.token.reveal()).toBe('x'.repeat(32));
      expect(makeConfig({}, tmp.dir).admin).toBeUndefined();
    } finally {
      tmp.cleanup();
    }
  });

  it('mounts nothing at /admin when admin is not configured', async () => {
    const tmp = tempDir();
    const app = await startApp(makeConfig({}, tmp.dir));
    try {
      expect((await fetch(`${app.url}/admin/`)).status).toBe(404);
      expect((await fetch(`${app.url}/admin/api/stats`, { headers: bearer })).status).toBe(404);
    } finally {
      await app.close();
      tmp.cleanup();
    }
  });
});

describe('admin HTTP', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp;
  let ids: Seeded;
  let clock = NOW;
  let configFile: string;

  beforeAll(async () => {
    tmp = tempDir('receiver-admin-');
    ids = seed(tmp.dir, NOW);
    configFile = writeConfig(tmp.dir, { sources: { stripe: { provider: 'none', deliveryId: '{body.id}' } } });
    app = await startAdmin(adminConfig(tmp.dir), { now: () => clock });
  });
  afterAll(async () => {
    await app.close();
    tmp.cleanup();
  });

  const api = (path: string, init: RequestInit = {}) => fetch(`${app.url}/admin/api${path}`, init);

  describe('every API route refuses a request without the token, or with a wrong one', () => {
    const routes: [string, string][] = [
      ['GET', '/events'],
      ['GET', '/events/1'],
      ['GET', '/stats'],
      ['POST', '/events/1/replay'],
      ['POST', '/replay-dead'],
    ];
    it.each(routes)('%s %s', async (method, path) => {
      const none = await api(path, { method });
      expect(none.status).toBe(401);
      expect(none.headers.get('www-authenticate')).toBe('Bearer');
      expect(await none.json()).toMatchObject({ error: 'unauthorized' });
      const wrong = await api(path, { method, headers: { authorization: `Bearer ${TOKEN}x` } });
      expect(wrong.status).toBe(401);
      // Nothing was replayed by the refused POSTs.
      expect(((await api(`/events/${ids.dead}`, { headers: bearer }).then((r) => r.json())) as { status: string }).status).toBe('dead');
    });
  });

  it('GET /events is `events list --json`, with the same filters as query parameters', async () => {
    const res = await api('/events', { headers: bearer });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: number }[];
    const cli = await runCli(['events', 'list', '--json', '-c', configFile]);
    expect(cli.code).toBe(0);
    expect(body).toEqual(JSON.parse(cli.stdout));
    expect(body.map((e) => e.id)).toEqual([ids.pending, ids.xss, ids.processing, ids.dead, ids.done]);

    const get = async (q: string) => ((await (await api(`/events?${q}`, { headers: bearer })).json()) as { id: number }[]).map((e) => e.id);
    expect(await get('status=dead')).toEqual([ids.dead]);
    expect(await get('source=github')).toEqual([ids.processing]);
    expect(await get('delivery=evt_done_1')).toEqual([ids.done]);
    expect(await get('delivery=evt_d&match=prefix')).toEqual([ids.dead, ids.done]);
    expect(await get('type=invoice.paid&status=done')).toEqual([ids.done]);
    expect(await get(`from=${new Date(NOW - 3 * 3_600_000).toISOString()}&to=${new Date(NOW - 3_600_000).toISOString()}`)).toEqual([ids.processing, ids.dead]);
    const bad = await api('/events?status=lost', { headers: bearer });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: 'usage', message: expect.stringMatching(/status: "lost" is not one of/) });
  });

  it('GET /events finds by a text in the body, a type pattern and the origin, as events list --search, --type and --origin do', async () => {
    const get = async (q: string) => {
      const res = await api(`/events?${q}`, { headers: bearer });
      return { ids: ((await res.json()) as { id: number }[]).map((e) => e.id), incomplete: res.headers.get('x-scan-limit-reached') };
    };
    const cli = async (...args: string[]) =>
      JSON.parse((await runInProcess(['events', 'list', '--json', '-c', configFile, ...args])).stdout).map((e: { id: number }) => e.id);
    expect(await get('search=1200')).toEqual({ ids: [ids.done], incomplete: null });
    expect((await get('search=1200')).ids).toEqual(await cli('--search', '1200'));
    expect((await get('type=invoice.*&status=dead')).ids).toEqual([ids.dead]);
    expect((await get('type=*.paid&search=evt_')).ids).toEqual(await cli('--type', '*.paid', '--search', 'evt_'));
    expect((await get('origin=webhook')).ids).toHaveLength(5);
    expect((await get('origin=test')).ids).toEqual([]);
    // The search read only the newest event: it says so, as the CLI does on stderr.
    expect(await get('search=1200&scan=1')).toEqual({ ids: [], incomplete: '1' });
    const bad = await api('/events?origin=email', { headers: bearer });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ message: 'origin: "email" is not one of webhook, catch-up, test' });
    expect((await api('/events?scan=5', { headers: bearer })).status).toBe(400);
  });

  it('GET /events pages by keyset: a Link to the next page until the last', async () => {
    const seen: number[] = [];
    let next: string | null = '/admin/api/events?limit=2';
    let pages = 0;
    while (next !== null) {
      const res: Response = await fetch(`${app.url}${next}`, { headers: bearer });
      seen.push(...((await res.json()) as { id: number }[]).map((e) => e.id));
      next = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')?.[1] ?? null;
      pages += 1;
    }
    expect(pages).toBe(3);
    expect(seen).toEqual([ids.pending, ids.xss, ids.processing, ids.dead, ids.done]);
  });

  it('GET /events/:id is `events show --json`; an unknown id is 404', async () => {
    const res = await api(`/events/${ids.done}`, { headers: bearer });
    expect(res.status).toBe(200);
    const cli = await runCli(['events', 'show', String(ids.done), '--json', '-c', configFile]);
    expect(await res.json()).toEqual(JSON.parse(cli.stdout));
    expect((await api('/events/999999', { headers: bearer })).status).toBe(404);
    expect((await api('/events/abc', { headers: bearer })).status).toBe(404);
  });

  it('GET /stats is `stats --json` (at the server clock)', async () => {
    const res = await api('/stats', { headers: bearer });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body.at).toBe(new Date(NOW).toISOString());
    const cli = JSON.parse((await runCli(['stats', '--json', '-c', configFile])).stdout) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(Object.keys(cli));
    expect(body.events).toEqual({ pending: 1, processing: 1, done: 2, dead: 1, total: 5 });
    expect(body.events).toEqual(cli.events);
    expect(body.conflicts).toBe(1);
  });

  it('POST /events/:id/replay is `replay --json`: refused while processing (409), unknown (404), force from the body', async () => {
    const live = await api(`/events/${ids.processing}/replay`, { method: 'POST', headers: bearer });
    expect(live.status).toBe(409);
    expect(await live.json()).toEqual({
      replayed: [],
      refused: [{ id: ids.processing, reason: 'processing', leaseOwner: 'drain-1', leaseExpiresAt: new Date(NOW + 60_000).toISOString() }],
    });
    expect((await api('/events/999999/replay', { method: 'POST', headers: bearer })).status).toBe(404);
    const bad = await api(`/events/${ids.done}/replay`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json' },
      body: '{"force":"yes"}',
    });
    expect(bad.status).toBe(400);

    const ok = await api(`/events/${ids.done}/replay`, { method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body: '{"force":true}' });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({
      replayed: [{ id: ids.done, source: 'stripe', deliveryId: 'evt_done_1', previousStatus: 'done', force: true }],
      refused: [],
    });
    expect(await (await api(`/events/${ids.done}`, { headers: bearer })).json()).toMatchObject({ status: 'pending', forceEffects: true });
  });

  it('a replay of one route: the API takes {"route"}, the event page\'s form a route field; a route the event lacks is refused naming its routes, nothing replayed', async () => {
    const json = { ...bearer, 'content-type': 'application/json' };
    // The dead event's one route.
    const db = new Database(join(tmp.dir, 'receiver.db'));
    db.prepare(
      `INSERT INTO units (event_id, route, lane, status, attempts, next_attempt_at, last_error) VALUES (?, 'mail', 'mail', 'dead', 3, ?, 'smtp down')`,
    ).run(ids.dead, NOW);
    db.close();
    const missing = await api(`/events/${ids.dead}/replay`, { method: 'POST', headers: json, body: '{"route":"nope"}' });
    expect(missing.status).toBe(409);
    expect(await missing.json()).toEqual({ replayed: [], refused: [{ id: ids.dead, reason: 'no_route', route: 'nope', routes: ['mail'] }] });
    // Its one route is running under a live lease.
    const held = await api(`/events/${ids.processing}/replay`, { method: 'POST', headers: json, body: '{"route":"r","force":true}' });
    expect(held.status).toBe(409);
    expect(((await held.json()) as { refused: { reason: string }[] }).refused).toMatchObject([{ reason: 'processing' }]);
    expect((await api(`/events/${ids.processing}/replay`, { method: 'POST', headers: json, body: '{"route":7}' })).status).toBe(400);
    expect((await api('/replay-dead', { method: 'POST', headers: json, body: '{"route":"r"}' })).status).toBe(400);

    const { cookie } = await login(app.url);
    const page = await (await fetch(`${app.url}/admin/events/${ids.processing}`, { headers: { cookie: cookie! } })).text();
    // Its route is listed with its lane, status and lease, and a replay button of its own.
    expect(page).toContain('Work per route');
    expect(page).toMatch(
      /<td class="mono" data-label="Route">r<\/td><td class="mono" data-label="Lane">r<\/td><td data-label="Status"><span class="status status-processing">processing<\/span><div class="muted">lease held by drain-1/,
    );
    expect(page).toContain('<input type="hidden" name="route" value="r"/>');
    const res = await fetch(`${app.url}/admin/events/${ids.dead}/replay`, {
      method: 'POST',
      headers: { cookie: cookie!, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ csrf: csrfOf(page), route: 'nope' }).toString(),
      redirect: 'manual',
    });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toMatch(new RegExp(`^/admin/events/${ids.dead}\\?done=`));
    const shown = await (await fetch(new URL(res.headers.get('location')!, app.url), { headers: { cookie: cookie! } })).text();
    expect(shown).toContain(`Nothing was replayed: event ${ids.dead} has no route &quot;nope&quot; (its routes: &quot;mail&quot;).`);
    expect(await (await api(`/events/${ids.dead}`, { headers: bearer })).json()).toMatchObject({ status: 'dead', units: [{ route: 'mail', status: 'dead' }] });
  });

  it('POST /replay-dead replays every dead event', async () => {
    const res = await api('/replay-dead', { method: 'POST', headers: bearer });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      replayed: [{ id: ids.dead, source: 'stripe', deliveryId: 'evt_dead_1', previousStatus: 'dead', force: false }],
      refused: [],
    });
    expect(await (await api('/replay-dead', { method: 'POST', headers: bearer })).json()).toEqual({ replayed: [], refused: [] });
  });

  it('a replay waits for a write lock another process holds, up to busyTimeoutMs, instead of failing at once', async () => {
    // Another writer (a purge, the drain's module effect) holds the lock for 300 ms; the
    // default busyTimeoutMs is 5000.
    const other = new Database(join(tmp.dir, 'receiver.db'));
    other.exec('BEGIN IMMEDIATE');
    const released = new Promise<void>((r) =>
      setTimeout(() => {
        other.exec('COMMIT');
        other.close();
        r();
      }, 300),
    );
    const started = Date.now();
    const res = await api(`/events/${ids.done}/replay`, { method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body: '{"force":true}' });
    await released;
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(((await res.json()) as { replayed: unknown[] }).replayed).toHaveLength(1);
  });

  it('sets the security headers on pages and API answers', async () => {
    for (const res of [await fetch(`${app.url}/admin/login`), await api('/stats', { headers: bearer }), await api('/stats')]) {
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).not.toContain('script-src');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.headers.get('server-timing')).toMatch(/^app;dur=\d+\.\d\d$/);
    }
  });

  describe('session', () => {
    it('a right token gives a signed HttpOnly SameSite=Strict cookie for /admin; Secure only over HTTPS (the proxy says)', async () => {
      const plain = await login(app.url);
      expect(plain.status).toBe(303);
      expect(plain.location).toBe('/admin/events');
      expect(plain.setCookie).toMatch(/HttpOnly/);
      expect(plain.setCookie).toMatch(/SameSite=Strict/);
      expect(plain.setCookie).toMatch(/Path=\/admin/);
      expect(plain.setCookie).not.toMatch(/Secure/);
      const proxied = await login(app.url, TOKEN, { 'x-forwarded-proto': 'https' });
      expect(proxied.setCookie).toMatch(/; Secure/);

      const page = await fetch(`${app.url}/admin/events`, { headers: { cookie: plain.cookie! }, redirect: 'manual' });
      expect(page.status).toBe(200);
      // Tampered with: refused (back to the login form).
      const tampered = plain.cookie!.replace(/^(receiver_admin=)(\d)/, (_, n: string, d: string) => `${n}${(Number(d) + 1) % 10}`);
      expect((await fetch(`${app.url}/admin/events`, { headers: { cookie: tampered }, redirect: 'manual' })).status).toBe(303);
    });

    it('a page without a session sends the browser to the login form, keeping where it was going', async () => {
      const res = await fetch(`${app.url}/admin/events?status=dead`, { redirect: 'manual' });
      expect(res.status).toBe(303);
      expect(res.headers.get('location')).toBe(`/admin/login?next=${encodeURIComponent('/admin/events?status=dead')}`);
    });

    it('a session expires', async () => {
      const { cookie } = await login(app.url);
      clock = NOW + 8 * 3_600_000 + 1;
      try {
        expect((await fetch(`${app.url}/admin/`, { headers: { cookie: cookie! }, redirect: 'manual' })).status).toBe(303);
        expect((await api('/stats', { headers: { cookie: cookie! } })).status).toBe(401);
      } finally {
        clock = NOW;
      }
    });

    it('the session cookie works for the API from our own pages only', async () => {
      const { cookie } = await login(app.url);
      const c = { cookie: cookie! };
      expect((await api('/stats', { headers: c })).status).toBe(200);
      expect((await api('/stats', { headers: { ...c, 'sec-fetch-site': 'same-origin' } })).status).toBe(200);
      expect((await api('/stats', { headers: { ...c, 'sec-fetch-site': 'cross-site' } })).status).toBe(403);
      expect((await api('/stats', { headers: { ...c, origin: 'https://evil.example' } })).status).toBe(403);
      expect((await api('/stats', { headers: { ...c, origin: 'null' } })).status).toBe(403);
      // A write with the cookie alone needs the browser's word that it is same-origin.
      expect((await api('/replay-dead', { method: 'POST', headers: c })).status).toBe(403);
      expect((await api('/replay-dead', { method: 'POST', headers: { ...c, origin: 'https://evil.example' } })).status).toBe(403);
      expect((await api('/replay-dead', { method: 'POST', headers: { ...c, origin: new URL(app.url).origin } })).status).toBe(200);
      // The Bearer token is no ambient credential: any origin may use it.
      expect((await api('/stats', { headers: { ...bearer, origin: 'https://evil.example' } })).status).toBe(200);
    });

    it('after a login the browser goes back where it was going, within /admin only', async () => {
      const after = async (next: string) => {
        const res = await fetch(`${app.url}/admin/login`, {
          method: 'POST',
          redirect: 'manual',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ token: TOKEN, next }).toString(),
        });
        return res.headers.get('location');
      };
      expect(await after('/admin/events?status=dead')).toBe('/admin/events?status=dead');
      for (const elsewhere of [
        'https://evil.example/admin',
        '//evil.example/admin',
        '/admin//evil.example',
        '/admin/\\evil.example',
        '/admin/x\r\nset-cookie: a=b',
        '/webhooks/x',
        // Dot segments, plain or percent-encoded, as the browser resolves them.
        '/admin/%2e%2e/%2e%2e/metrics',
        '/admin/%2E%2E/metrics',
        '/admin/../metrics',
        '/admin/.%2e/healthz',
        '/adminx',
      ]) {
        expect(await after(elsewhere), elsewhere).toBe('/admin/');
      }
      // Inside /admin after resolving: followed as resolved.
      expect(await after('/admin/events/%2e%2e/events?status=dead')).toBe('/admin/events?status=dead');
      // The login page's own form carries the resolved path too.
      const form = await (await fetch(`${app.url}/admin/login?next=${encodeURIComponent('/admin/%2e%2e/%2e%2e/metrics')}`)).text();
      expect(form).toContain('<input type="hidden" name="next" value="/admin/"/>');
    });

    it('reads no admin request body over 16 KiB, not even a login form', async () => {
      const big = `token=${'x'.repeat(20_000)}`;
      expect(
        (await fetch(`${app.url}/admin/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: big })).status,
      ).toBe(413);
      const chunked = new ReadableStream({ start: (c) => (c.enqueue(new TextEncoder().encode(big)), c.close()) });
      const res = await fetch(`${app.url}/admin/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: chunked,
        duplex: 'half',
      } as RequestInit);
      expect(res.status).toBe(413);
    });

    it('a login form posted from another site is refused', async () => {
      expect((await login(app.url, TOKEN, { origin: 'https://evil.example' })).status).toBe(403);
      expect((await login(app.url, TOKEN, { 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    });
  });

  it('page forms need the session CSRF token: without it, or with another, nothing happens', async () => {
    const { cookie } = await login(app.url);
    const headers = { cookie: cookie!, 'content-type': 'application/x-www-form-urlencoded' };
    const page = await (await fetch(`${app.url}/admin/events/${ids.xss}`, { headers })).text();
    const csrf = csrfOf(page);
    const post = (body: Record<string, string>, extra: Record<string, string> = {}) =>
      fetch(`${app.url}/admin/events/${ids.xss}/replay`, {
        method: 'POST',
        headers: { ...headers, ...extra },
        body: new URLSearchParams(body).toString(),
        redirect: 'manual',
      });
    /** The page a 303 leads to, as the browser would load it. */
    const follow = async (res: Response) => (await fetch(new URL(res.headers.get('location')!, app.url), { headers: { cookie: cookie! } })).text();
    expect((await post({})).status).toBe(403);
    expect((await post({ csrf: csrf.replace(/^./, (ch) => (ch === 'A' ? 'B' : 'A')) })).status).toBe(403);
    expect((await post({ csrf }, { origin: 'https://evil.example' })).status).toBe(403);
    // Another session's token is not this session's.
    const other = await login(app.url);
    const otherCsrf = csrfOf(await (await fetch(`${app.url}/admin/`, { headers: { cookie: other.cookie! } })).text());
    expect((await post({ csrf: otherCsrf })).status).toBe(403);
    expect(await (await api(`/events/${ids.xss}`, { headers: bearer })).json()).toMatchObject({ status: 'done' });
    // Force without its confirmation box: refused, said on the event's page.
    const unconfirmed = await post({ csrf, force: '1' });
    expect(unconfirmed.status).toBe(303);
    expect(await follow(unconfirmed)).toContain('Replay with force needs its confirmation box ticked; nothing was replayed.');
    expect(await (await api(`/events/${ids.xss}`, { headers: bearer })).json()).toMatchObject({ status: 'done', forceEffects: false });

    const ok = await post({ csrf, force: '1', confirm: 'yes' });
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toMatch(new RegExp(`^/admin/events/${ids.xss}\\?done=`));
    expect(await follow(ok)).toMatch(/Replayed event \d+ \(was done\)[^]*Forced: effects already done run again/);
    expect(await (await api(`/events/${ids.xss}`, { headers: bearer })).json()).toMatchObject({ status: 'pending', forceEffects: true });
  });

  it('shows every value from an event escaped: a stored <script> is text', async () => {
    const { cookie } = await login(app.url);
    for (const path of [`/admin/events/${ids.xss}`, '/admin/events']) {
      const html = await (await fetch(`${app.url}${path}`, { headers: { cookie: cookie! } })).text();
      expect(html).not.toContain('<script');
      expect(html).not.toContain('<b>bold');
      expect(html).not.toContain('<img');
      expect(html).toContain('evt_&lt;b&gt;bold&lt;/b&gt;');
      expect(html).toContain('&lt;img src=x onerror=alert(1)&gt;');
      if (path.includes(String(ids.xss))) {
        expect(html).toContain('&lt;script&gt;window.__pwned = 1&lt;/script&gt;');
        expect(html).toContain('&lt;script&gt;alert(&quot;header&quot;)&lt;/script&gt;');
      }
    }
    // The raw bytes are served as plain text, never as HTML.
    const raw = await fetch(`${app.url}/admin/events/${ids.xss}/body`, { headers: { cookie: cookie! } });
    expect(raw.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await raw.text()).toBe('{"note":"<script>window.__pwned = 1</script>"}');
  });

  // Runs after the replays above: the done event received 5 h ago is pending again.
  it('the overview shows counts, the 48 h chart by outcome and failures per route', async () => {
    const { cookie } = await login(app.url);
    const html = await (await fetch(`${app.url}/admin/`, { headers: { cookie: cookie! } })).text();
    expect(html).toMatch(/<svg class="chart"/);
    expect((html.match(/<rect class="c-/g) ?? []).length).toBeGreaterThanOrEqual(4);
    expect(html).toMatch(/<td class="mono" data-label="Route">mail<\/td><td class="num" data-label="Failed attempts">1<\/td>/);
    expect(html).toContain('conflicting deliveries');
    expect(html).toMatch(/<div class="value">5 h 0 min<\/div><div class="label">oldest pending event waits/);
    // Lanes: the seeded claim's unit runs in lane "r", a route this configuration does not have.
    expect(html).toMatch(
      /<td class="mono" data-label="Lane">r<\/td><td class="mono wrap" data-label="Routes"><span class="muted">not configured any more<\/span><\/td><td class="num" data-label="Pending">0<\/td><td class="num" data-label="Running">1<\/td><td data-label="Oldest pending waits"><span class="muted">none pending<\/span><\/td>/,
    );
  });
});

describe('admin pages', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp;
  let ids: Seeded;
  let cookie: string;
  beforeAll(async () => {
    tmp = tempDir('receiver-admin-');
    ids = seed(tmp.dir, NOW);
    app = await startAdmin(adminConfig(tmp.dir), { now: () => NOW });
    cookie = (await login(app.url)).cookie!;
  });
  afterAll(async () => {
    await app.close();
    tmp.cleanup();
  });
  const get = async (path: string) => (await fetch(`${app.url}${path}`, { headers: { cookie } })).text();

  it('the event page shows attempts with their output, the ledger rows, and conflicts with their differing body', async () => {
    const html = await get(`/admin/events/${ids.done}`);
    expect(html).toMatch(/<pre aria-label="Effect output">licence sent\n<\/pre>/);
    expect(html).toContain(`<td class="mono wrap" data-label="Effect key">licence:${ids.done}</td><td data-label="Status">done</td>`);
    expect(html).toContain('<pre aria-label="Conflicting body">{&quot;other&quot;:true}</pre>');
    const dead = await get(`/admin/events/${ids.dead}`);
    expect(dead).toContain('<div>smtp: connection refused</div>');
  });

  it("the event page numbers attempts across replays and shows a forced run's own run key", async () => {
    const db = new Database(join(tmp.dir, 'receiver.db'));
    const attempt = db.prepare('SELECT id, effect_key FROM attempts WHERE event_id = ? AND effect_key IS NOT NULL ORDER BY id LIMIT 1').get(ids.done) as {
      id: number;
      effect_key: string;
    };
    db.prepare("UPDATE attempts SET run_key = effect_key || '#forced-1', forced = 1 WHERE id = ?").run(attempt.id);
    const html = await get(`/admin/events/${ids.done}`);
    db.prepare('UPDATE attempts SET run_key = NULL, forced = 0 WHERE id = ?').run(attempt.id);
    db.close();
    expect(html).toContain(
      `<td class="mono wrap" data-label="Effect key">${attempt.effect_key}<div class="muted">run key ${attempt.effect_key}#forced-1</div></td>`,
    );
  });

  it('the event page lists why each route did or did not apply, escaped', async () => {
    const db = new Database(join(tmp.dir, 'receiver.db'));
    db.prepare('UPDATE events SET route_decisions = ? WHERE id = ?').run(
      'licence: applies (key "<b>k</b>")\nmail: event type "x" not in [invoice.*]',
      ids.done,
    );
    db.close();
    const html = await get(`/admin/events/${ids.done}`);
    expect(html).toContain(
      '<dt>Routes</dt><dd><ul aria-label="Route decisions" class="mono"><li>licence: applies (key &quot;&lt;b&gt;k&lt;/b&gt;&quot;)</li><li>mail: event type &quot;x&quot; not in [invoice.*]</li></ul></dd>',
    );
    expect(await get(`/admin/events/${ids.pending}`)).not.toContain('<dt>Routes</dt>');
  });

  it('the events page filters with the same parameters, pages by keyset, and says what is wrong with a filter', async () => {
    const first = await get('/admin/events?limit=2');
    expect(first.match(/<tr><td class="num" data-label="Id"><a href="\/admin\/events\/(\d+)"/g)).toHaveLength(2);
    const older = /<a href="(\/admin\/events\?[^"]*before=\d+)">Older events<\/a>/.exec(first)?.[1];
    expect(older).toBe(`/admin/events?limit=2&amp;before=${ids.xss}`);
    const dead = await get('/admin/events?status=dead&delivery=evt_dead&match=prefix');
    expect(dead).toContain(`<a href="/admin/events/${ids.dead}">evt_dead_1</a>`);
    expect(dead).not.toContain('evt_done_1');
    expect(dead).not.toContain('Older events');
    const res = await fetch(`${app.url}/admin/events?from=yesterday`, { headers: { cookie } });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain('from: &quot;yesterday&quot; is not a time');
  });

  it('replays every dead event from the overview, and shows the outcome', async () => {
    const overview = await get('/admin/');
    expect(overview).toContain('Replay all 1 dead events');
    const form = { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: `csrf=${csrfOf(overview)}` };
    const res = await fetch(`${app.url}/admin/replay-dead`, { ...form, redirect: 'manual' });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toMatch(/^\/admin\/\?done=/);
    expect(await get(res.headers.get('location')!)).toContain(`Replayed event ${ids.dead} (was dead)`);
    expect(await (await fetch(`${app.url}/admin/replay-dead`, form)).text()).toContain('No dead events to replay.');
  });
});

describe('failed logins', () => {
  it('slow further tries from that address: after 3 wrong tokens each try must wait, doubling up to 4 s; no token is checked meanwhile', async () => {
    const tmp = tempDir('receiver-admin-');
    seed(tmp.dir, NOW);
    let clock = NOW;
    const app = await startAdmin(adminConfig(tmp.dir), { now: () => clock });
    try {
      for (let i = 0; i < 3; i++) expect((await login(app.url, 'wrong')).outcome).toBe('wrong');
      // Now even the right token waits (1 s): it is not checked, so guessing gains nothing.
      const held = await login(app.url);
      expect(held.outcome).toBe('held');
      expect(held.retryAfter).toBe('1');
      expect(await (await fetch(new URL(held.location!, app.url))).text()).toContain('Too many wrong tokens from your address: try again in 1 s.');
      expect((await fetch(`${app.url}/admin/api/stats`, { headers: bearer })).status).toBe(429);
      clock += 1000;
      expect((await login(app.url, 'wrong')).outcome).toBe('wrong');
      clock += 1000;
      // The wait doubled to 2 s.
      expect((await login(app.url)).outcome).toBe('held');
      clock += 1000;
      expect((await login(app.url)).outcome).toBe('in');
      // A success clears the count.
      expect((await login(app.url, 'wrong')).outcome).toBe('wrong');
      expect((await login(app.url)).outcome).toBe('in');
      // However many wrong tokens, the wait stops growing at 4 s.
      for (let i = 0; i < 40; i++) {
        await login(app.url, 'wrong');
        clock += 4000;
      }
      expect((await login(app.url)).outcome).toBe('in');
    } finally {
      await app.close();
      tmp.cleanup();
    }
  });
});
