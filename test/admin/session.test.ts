import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers.js';
import { insertEvent, seedDb } from '../store/ops-seed.js';
import { adminConfig, csrfOf, login, startAdmin, TOKEN } from './helpers.js';
import type { RunningApp } from '../helpers.js';

/**
 * The admin session and login over real HTTP on a real SQLite file: logging out ends a
 * session on the server, failed logins slow only the address they come from, an action's
 * outcome shows only to the session that did it, and sender-chosen control characters are
 * escaped in the pages.
 */

const NOW = Date.UTC(2026, 10, 30, 14, 30);

/** A login form posted from `localAddress` (another address on this host's loopback), with `headers`. */
function loginFrom(url: string, token: string, localAddress: string, headers: Record<string, string> = {}): Promise<{ status: number; location: string }> {
  const body = new URLSearchParams({ token, next: '/admin/' }).toString();
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/admin/login`,
      { method: 'POST', localAddress, headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(body.length), ...headers } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, location: String(res.headers.location) }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('admin sessions and logins', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp;
  const clock = NOW;
  let bidi: number;
  beforeAll(async () => {
    tmp = tempDir('receiver-admin-session-');
    const db = seedDb(join(tmp.dir, 'receiver.db'));
    bidi = insertEvent(db, {
      deliveryId: 'evt_\u202Egnp.exe',
      eventType: 'order.\u2066paid\u2069',
      status: 'dead',
      receivedAt: NOW - 1000,
      headers: { 'content-type': 'application/json', 'x-note': 'a\u200Fb' },
      body: '{"name":"\u202Eevil","ctl":"\u001b[2J"}',
      lastError: 'exit 1: \u202Etxt.exe',
    });
    db.close();
    app = await startAdmin(adminConfig(tmp.dir), { now: () => clock });
  });
  afterAll(async () => {
    await app.close();
    tmp.cleanup();
  });
  const page = (path: string, cookie: string) => fetch(`${app.url}${path}`, { headers: { cookie }, redirect: 'manual' });

  it('the overview says when serve loaded the running configuration (its start or last reload)', async () => {
    const loaded = await startAdmin(adminConfig(tmp.dir), { now: () => clock, configLoadedAt: clock - 90 * 60_000 });
    try {
      const overview = await (await fetch(`${loaded.url}/admin/`, { headers: { cookie: (await login(loaded.url)).cookie! } })).text();
      expect(overview).toContain(`Configuration loaded <time datetime="${new Date(clock - 90 * 60_000).toISOString()}">`);
      expect(overview).toContain('(1 h 30 min ago; SIGHUP reloads it)');
      // Outside serve (no load time), nothing is said.
      expect(await (await page('/admin/', (await login(app.url)).cookie!)).text()).not.toContain('Configuration loaded');
    } finally {
      await loaded.close();
    }
  });

  it('logging out ends the session on the server: a copy of the cookie is refused at once, by pages and API; other sessions go on', async () => {
    const mine = (await login(app.url)).cookie!;
    const other = (await login(app.url)).cookie!;
    const overview = await (await page('/admin/', mine)).text();
    const out = await fetch(`${app.url}/admin/logout`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie: mine, 'content-type': 'application/x-www-form-urlencoded' },
      body: `csrf=${csrfOf(overview)}`,
    });
    expect(out.status).toBe(303);
    expect(out.headers.get('location')).toBe('/admin/login?out=1');
    const after = await page('/admin/events', mine);
    expect(after.status).toBe(303);
    expect(after.headers.get('location')).toBe(`/admin/login?next=${encodeURIComponent('/admin/events')}`);
    expect((await fetch(`${app.url}/admin/api/stats`, { headers: { cookie: mine } })).status).toBe(401);
    expect((await page('/admin/events', other)).status).toBe(200);
  });

  it('a session outlives a restart (it is kept in the database), and a form sent after it ended leads back to its page after a login', async () => {
    const cookie = (await login(app.url)).cookie!;
    const again = await startAdmin(app.config, { now: () => clock });
    try {
      expect((await page('/admin/events', cookie)).status).toBe(200);
      expect((await fetch(`${again.url}/admin/events`, { headers: { cookie }, redirect: 'manual' })).status).toBe(200);
    } finally {
      await again.close();
    }
    const expired = await fetch(`${app.url}/admin/events/${bidi}/replay`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        cookie: 'receiver_admin=1.AAAAAAAAAAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: 'csrf=x',
    });
    expect(expired.status).toBe(303);
    expect(expired.headers.get('location')).toBe(`/admin/login?${new URLSearchParams({ next: `/admin/events/${bidi}`, ended: '1' }).toString()}`);
    expect(await (await fetch(`${app.url}${expired.headers.get('location')}`)).text()).toContain(
      'Your session has ended; log in again, then repeat the action.',
    );
  });

  it("an action's outcome shows only on its own session's pages: a made-up or another session's one is ignored", async () => {
    const cookie = (await login(app.url)).cookie!;
    const html = await (await page(`/admin/events/${bidi}`, cookie)).text();
    const res = await fetch(`${app.url}/admin/events/${bidi}/replay`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: `csrf=${csrfOf(html)}`,
    });
    const location = res.headers.get('location')!;
    expect(await (await page(location, cookie)).text()).toContain(`Replayed event ${bidi} (was dead)`);
    const other = (await login(app.url)).cookie!;
    expect(await (await page(location, other)).text()).not.toContain('Replayed');
    const forged = `?done=${Buffer.from(JSON.stringify({ tone: 'good', text: 'Replayed everything', at: NOW })).toString('base64url')}.${'A'.repeat(43)}`;
    expect(await (await page(`/admin/events/${bidi}${forged}`, cookie)).text()).not.toContain('Replayed everything');
  });

  it('shows bidi overrides, isolates and other controls a sender chose escaped, as the CLI does', async () => {
    const cookie = (await login(app.url)).cookie!;
    for (const path of [`/admin/events/${bidi}`, '/admin/events']) {
      const html = await (await page(path, cookie)).text();
      // eslint-disable-next-line no-control-regex -- no raw control character may reach the page
      expect(html, path).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200E\u200F\u001b]/);
      expect(html).toContain('evt_\\u202egnp.exe');
      expect(html).toContain('order.\\u2066paid\\u2069');
      expect(html).toContain('exit 1: \\u202etxt.exe');
    }
    const event = await (await page(`/admin/events/${bidi}`, cookie)).text();
    expect(event).toContain('a\\u200fb');
    // Not JSON (a raw control character in a string): the body as received, escaped.
    expect(event).toContain('{&quot;name&quot;:&quot;\\u202eevil&quot;,&quot;ctl&quot;:&quot;\\x1b[2J&quot;}');
  });

  describe('failed logins slow only the address they come from', () => {
    it('a client sending wrong tokens as fast as it can never holds back the right token from another address', async () => {
      const fresh = await startAdmin(app.config, { now: () => clock });
      try {
        for (let i = 0; i < 20; i++) await loginFrom(fresh.url, 'wrong-token', '127.0.0.2');
        expect((await loginFrom(fresh.url, TOKEN, '127.0.0.2')).location).not.toContain('failed');
        const operator = await loginFrom(fresh.url, TOKEN, '127.0.0.1');
        expect(operator).toEqual({ status: 303, location: '/admin/' });
        // The API's Bearer checks count per address the same way.
        const held = await fetch(`${fresh.url}/admin/api/stats`, { headers: { authorization: `Bearer ${TOKEN}` } });
        expect(held.status).toBe(200);
      } finally {
        await fresh.close();
      }
    });

    it('behind a proxy on this host, by the address the proxy saw (the last X-Forwarded-For entry)', async () => {
      const fresh = await startAdmin(app.config, { now: () => clock });
      try {
        for (let i = 0; i < 20; i++) await loginFrom(fresh.url, 'wrong-token', '127.0.0.1', { 'x-forwarded-for': '203.0.113.7' });
        const attacker = await loginFrom(fresh.url, TOKEN, '127.0.0.1', { 'x-forwarded-for': '203.0.113.7' });
        expect(attacker.location).toBe('/admin/login?next=%2Fadmin%2F');
        expect(await loginFrom(fresh.url, TOKEN, '127.0.0.1', { 'x-forwarded-for': '10.0.0.1, 198.51.100.4' })).toEqual({ status: 303, location: '/admin/' });
      } finally {
        await fresh.close();
      }
    });
  });
});
