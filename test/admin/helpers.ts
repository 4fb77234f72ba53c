import { join } from 'node:path';
import type { Config } from '../../src/config/load.js';
import { insertAttempt, insertConflict, insertEffect, insertEvent, seedDb, HOUR } from '../store/ops-seed.js';
import { makeConfig, startApp, type RunningApp } from '../helpers.js';
import type { AdminOptions } from '../../src/http/admin/index.js';

export const TOKEN = 'admin-token-0123456789abcdef0123456789';

export interface Seeded {
  dead: number;
  done: number;
  processing: number;
  xss: number;
  pending: number;
}

/** A database with one event of each kind the admin tests look at, received in the last hours before `now`. */
export function seed(dir: string, now: number): Seeded {
  const db = seedDb(join(dir, 'receiver.db'));
  const done = insertEvent(db, {
    deliveryId: 'evt_done_1',
    status: 'done',
    receivedAt: now - 5 * HOUR,
    headers: { 'content-type': 'application/json', 'stripe-signature': '[redacted]', 'user-agent': 'Stripe/1.0' },
    body: '{"id":"evt_done_1","amount":1200}',
  });
  insertAttempt(db, done, { startedAt: now - 5 * HOUR + 1000, output: 'licence sent\n' });
  insertEffect(db, { effectKey: `licence:${done}`, eventId: done, at: now - 5 * HOUR + 1000 });
  insertConflict(db, done, now - 4 * HOUR);
  const dead = insertEvent(db, {
    deliveryId: 'evt_dead_1',
    status: 'dead',
    receivedAt: now - 3 * HOUR,
    lastError: 'smtp: connection refused (gave up after 3 attempts)',
  });
  insertAttempt(db, dead, { startedAt: now - 3 * HOUR + 1000, outcome: 'failed', error: 'smtp: connection refused', route: 'mail', effectKey: 'mail:x' });
  const processing = insertEvent(db, {
    deliveryId: 'evt_live',
    source: 'github',
    status: 'processing',
    receivedAt: now - 2 * HOUR,
    leaseOwner: 'drain-1',
    leaseExpiresAt: now + 60_000,
  });
  const xss = insertEvent(db, {
    deliveryId: 'evt_<b>bold</b>',
    eventType: '<img src=x onerror=alert(1)>',
    status: 'done',
    receivedAt: now - HOUR,
    headers: { 'x-note': '<script>alert("header")</script>' },
    body: '{"note":"<script>window.__pwned = 1</script>"}',
  });
  const pending = insertEvent(db, { deliveryId: 'evt_pending', status: 'pending', receivedAt: now - 60_000 });
  db.close();
  return { dead, done, processing, xss, pending };
}

export function adminConfig(dir: string, extra: Record<string, unknown> = {}): Config {
  return makeConfig({ sources: { stripe: { provider: 'none', deliveryId: '{body.id}' } }, admin: { token: 'env:RECEIVER_ADMIN_TOKEN' }, ...extra }, dir, {
    RECEIVER_ADMIN_TOKEN: TOKEN,
  });
}

export function startAdmin(config: Config, options: Partial<Omit<AdminOptions, 'store' | 'config' | 'token'>> = {}): Promise<RunningApp> {
  return startApp(config, { admin: { config, token: config.admin!.token, ...options } });
}

/**
 * Logs in with the form and returns the session cookie (name=value), and what became of the
 * try: `in` (a session), `wrong` (back to the form saying so), `held` (back to the form,
 * the token not checked: this address must wait), or `refused` (not a redirect).
 */
export async function login(
  url: string,
  token = TOKEN,
  headers: Record<string, string> = {},
): Promise<{
  status: number;
  cookie: string | undefined;
  setCookie: string | undefined;
  location: string | null;
  outcome: 'in' | 'wrong' | 'held' | 'refused';
  retryAfter: string | null;
}> {
  const res = await fetch(`${url}/admin/login`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ token, next: '/admin/events' }).toString(),
  });
  await res.text();
  const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('receiver_admin='));
  const location = res.headers.get('location');
  const outcome = res.status !== 303 ? 'refused' : setCookie !== undefined ? 'in' : location?.includes('failed=token') === true ? 'wrong' : 'held';
  return { status: res.status, cookie: setCookie?.split(';')[0], setCookie, location, outcome, retryAfter: res.headers.get('retry-after') };
}

/** The CSRF token from a page's forms. */
export function csrfOf(html: string): string {
  const m = /name="csrf" value="([^"]+)"/.exec(html);
  if (m === null) throw new Error('no CSRF token on the page');
  return m[1]!;
}
