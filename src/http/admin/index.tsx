import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { detailJson, eventJson, summaryJson } from '../../json/events.js';
import { replayJson } from '../../json/replay.js';
import { statsJson } from '../../json/stats.js';
import type { Config } from '../../config/load.js';
import type { Secret } from '../../config/secret.js';
import { NEAR_MATCHES, senderDeliveryId } from '../../delivery-ids.js';
import { ReceiverError } from '../../errors.js';
import type { EventSummary, NearDeliveryId, ReplayResult } from '../../store/ops-types.js';
import type { Store } from '../../store/types.js';
import { CHART_HOURS, hourBuckets } from './chart.js';
import { filtersQuery, parseFilters, toListQuery, toSearchQuery, type EventFilters } from './filters.js';
import { clientAddress, fromAnotherOrigin, overHttps, securityHeaders } from './guard.js';
import { LoginThrottle, SESSION_COOKIE, sessionId, Sessions } from './session.js';
import { ADMIN_CSS, ADMIN_ICON } from './style.js';
import { ADMIN, EventPage, EventsPage, LoginPage, MessagePage, OverviewPage, replayOutcome, type ListedEvent, type Outcome } from './views.js';

/**
 * The admin pages and JSON API, mounted at /admin on the serve listener when the
 * configuration has `admin.token`. Pages: a session cookie from the login form; every POST
 * carries the session's CSRF token and must come from our own origin, and is answered with
 * a redirect (303) to a page that shows what it did, so a reload or the back button never
 * does it again. API: the token as a Bearer header, or the session cookie from a page of
 * our own origin.
 */

export interface AdminOptions {
  config: Config;
  store: Store;
  token: Secret;
  now?: () => number;
  /** How long a login lasts. */
  sessionHours?: number;
  /** When serve loaded this configuration (the overview shows it). */
  configLoadedAt?: number | undefined;
  /** The failed token checks so far (serve keeps one across the apps its reloads build); default: this app's own. */
  loginThrottle?: LoginThrottle | undefined;
  /** Failed token checks before each further try from one address must wait (see LoginThrottle). */
  throttle?: ConstructorParameters<typeof LoginThrottle>[1];
}

type AdminEnv = { Variables: { nonce: string } };

const HOUR_MS = 3_600_000;

/** The query parameter that carries an action's sealed outcome to the page it redirects to. */
const OUTCOME_PARAM = 'done';

function html(c: Context, node: unknown, status = 200): Response {
  return c.html(`<!doctype html>${String(node)}`, status as 200);
}

function jsonError(c: Context, status: number, error: string, message: string, headers: Record<string, string> = {}): Response {
  return c.json({ error, message }, status as 401, headers);
}

function eventId(text: string): number {
  if (!/^\d{1,16}$/.test(text) || Number(text) <= 0 || !Number.isSafeInteger(Number(text)))
    throw new ReceiverError('not_found', `"${text}" is not an event id`);
  return Number(text);
}

/** 200 when something was replayed or nothing needed to be; 404 when the event is unknown; 409 when a replay was refused. */
function replayStatus(r: ReplayResult): 200 | 404 | 409 {
  if (r.refused.length === 0) return 200;
  return r.refused.every((x) => x.reason === 'not_found') ? 404 : 409;
}

const NEXT_BASE = 'http://receiver.invalid';

/**
 * Where to go after a login: a path inside the admin pages, never another site. The path
 * is taken as the browser will resolve it (`%2e%2e` is `..`), and that resolved path is
 * what is followed, so no spelling of `next` leads out of /admin.
 */
export function safeNext(next: unknown): string {
  const fallback = `${ADMIN}/`;
  if (typeof next !== 'string' || !next.startsWith('/') || /[\\\s]/.test(next) || next.includes('//')) return fallback;
  let url: URL;
  try {
    url = new URL(next, NEXT_BASE);
  } catch {
    return fallback;
  }
  if (url.origin !== NEXT_BASE || !(url.pathname === ADMIN || url.pathname.startsWith(`${ADMIN}/`)) || url.pathname.includes('//')) return fallback;
  return `${url.pathname}${url.search}`;
}

/** The admin page a POST's form is on (where a login sends the browser back to). */
function pageOf(postPath: string): string {
  return safeNext(postPath.replace(/\/[^/]*$/, '') || ADMIN);
}

export function createAdmin(options: AdminOptions): Hono<AdminEnv> {
  const { config, store } = options;
  const now = options.now ?? Date.now;
  const sessions = new Sessions(options.token, (options.sessionHours ?? 8) * HOUR_MS);
  const throttle = options.loginThrottle ?? new LoginThrottle(now, options.throttle);
  const admin = new Hono<AdminEnv>();
  admin.use('*', securityHeaders());
  // Forms and API bodies are a few hundred bytes; the login form is open to anyone who
  // reaches the listener, so nothing larger is read into memory.
  admin.use('*', bodyLimit({ maxSize: 16 * 1024, onError: (c) => jsonError(c, 413, 'too_large', 'admin request bodies are limited to 16 KiB') }));

  /** The nonce of the request's session: its cookie is ours, unexpired, and the session has not been ended. */
  async function sessionOf(c: Context): Promise<string | undefined> {
    const nonce = sessions.verify(getCookie(c, SESSION_COOKIE), now());
    if (nonce === undefined) return undefined;
    return (await store.isAdminSessionLive(sessionId(nonce), now())) ? nonce : undefined;
  }

  // --- the JSON API -------------------------------------------------------------------
  const apiAuth: MiddlewareHandler<AdminEnv> = async function adminApiAuth(c, next) {
    const authorization = c.req.header('authorization');
    if (authorization !== undefined) {
      const address = clientAddress(c);
      const wait = throttle.waitMs(address);
      if (wait > 0) return jsonError(c, 429, 'throttled', 'too many failed token checks; try again later', { 'retry-after': String(Math.ceil(wait / 1000)) });
      const m = /^Bearer +(\S+) *$/i.exec(authorization);
      if (m === null || !sessions.isToken(m[1]!)) {
        throttle.failed(address);
        return jsonError(c, 401, 'unauthorized', 'wrong admin token', { 'www-authenticate': 'Bearer' });
      }
      throttle.succeeded(address);
      return next();
    }
    const nonce = await sessionOf(c);
    if (nonce === undefined) return jsonError(c, 401, 'unauthorized', 'send Authorization: Bearer <admin token>', { 'www-authenticate': 'Bearer' });
    // The cookie goes wherever the browser sends it; only our own pages may use it. A
    // write needs positive proof of that (the browser's Sec-Fetch-Site or Origin).
    const proven = c.req.header('sec-fetch-site') !== undefined || c.req.header('origin') !== undefined;
    if (fromAnotherOrigin(c) || (c.req.method !== 'GET' && c.req.method !== 'HEAD' && !proven)) {
      return jsonError(c, 403, 'forbidden', 'a request from another origin cannot use the admin session; send the Bearer token');
    }
    return next();
  };
  admin.use('/api/*', apiAuth);

  /** One page of events for these filters: listed, or body-searched; one more than shown, for the next page. */
  async function findEvents(f: EventFilters): Promise<{ rows: EventSummary[]; scanLimitReached: boolean }> {
    const search = toSearchQuery(f, config.sources);
    if (search === undefined) return { rows: await store.listEvents(toListQuery(f, config.sources)), scanLimitReached: false };
    const found = await store.searchEvents(search);
    return { rows: found.events, scanLimitReached: found.scanLimitReached };
  }

  admin.get('/api/events', async (c) => {
    const f = parseFilters((n) => c.req.query(n));
    const { rows, scanLimitReached } = await findEvents(f);
    const page = rows.slice(0, f.limit);
    // The body is `events list --json`'s array; the next page is a Link, as keyset pagination's cursor.
    if (rows.length > f.limit) c.header('link', `<${ADMIN}/api/events?${filtersQuery(f, page[page.length - 1]!.id)}>; rel="next"`);
    // Said as `events list --search` says it on stderr: older events were left unsearched.
    if (scanLimitReached) c.header('x-scan-limit-reached', String(f.scanLimit));
    return c.json(page.map(summaryJson));
  });

  admin.get('/api/events/:id', async (c) => {
    const id = eventId(c.req.param('id'));
    const event = await store.getEvent(id);
    if (event === undefined) return jsonError(c, 404, 'not_found', `event ${id} does not exist (never received, or purged)`);
    return c.json(eventJson(event, config));
  });

  admin.get('/api/stats', async (c) => {
    const at = now();
    return c.json(statsJson(await store.stats(at), config, at));
  });

  /** `{"force": true, "route": "licence"}` (both optional), or no body at all. */
  async function replayBody(c: Context): Promise<{ force: boolean; route?: string }> {
    const text = await c.req.text();
    if (text.trim() === '') return { force: false };
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new ReceiverError('usage', 'the body must be JSON: {"force": true}, {"route": "<name>"}, {} or nothing');
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body))
      throw new ReceiverError('usage', 'the body must be a JSON object: {"force": true}, {"route": "<name>"}, {} or nothing');
    const { force, route } = body as Record<string, unknown>;
    if (force !== undefined && typeof force !== 'boolean') throw new ReceiverError('usage', '"force" must be true or false');
    if (route !== undefined && (typeof route !== 'string' || route === '')) throw new ReceiverError('usage', '"route" must be a route name');
    return { force: force === true, ...(route === undefined ? {} : { route }) };
  }

  admin.post('/api/events/:id/replay', async (c) => {
    const id = eventId(c.req.param('id'));
    const result = await store.replayEvents([id], { ...(await replayBody(c)), now: now() });
    return c.json(replayJson(result), replayStatus(result));
  });

  admin.post('/api/replay-dead', async (c) => {
    const { force, route } = await replayBody(c);
    if (route !== undefined) throw new ReceiverError('usage', '"route" replays one route of one event: POST /admin/api/events/<id>/replay');
    const result = await store.replayDead({ force, now: now() });
    return c.json(replayJson(result), replayStatus(result));
  });

  admin.all('/api/*', (c) => jsonError(c, 404, 'not_found', 'no such admin API route'));

  // --- the pages ------------------------------------------------------------------------
  admin.get('/admin.css', (c) => c.body(ADMIN_CSS, 200, { 'content-type': 'text/css; charset=utf-8' }));
  // An icon of our own, so the browser does not ask the webhook listener for /favicon.ico.
  admin.get('/favicon.svg', (c) => c.body(ADMIN_ICON, 200, { 'content-type': 'image/svg+xml' }));

  /** The login page's notice: the last try's outcome (from the redirect), or the wait this address must still sit out. */
  function loginMessage(c: Context): { text: string; bad: boolean } | undefined {
    const wait = throttle.waitMs(clientAddress(c));
    if (wait > 0) return { text: `Too many wrong tokens from your address: try again in ${Math.ceil(wait / 1000)} s.`, bad: true };
    if (c.req.query('failed') !== undefined) return { text: 'That is not the admin token.', bad: true };
    if (c.req.query('ended') !== undefined) return { text: 'Your session has ended; log in again, then repeat the action.', bad: true };
    if (c.req.query('out') !== undefined) return { text: 'You are logged out.', bad: false };
    return undefined;
  }

  const loginUrl = (next: string, extra: Record<string, string> = {}) => `${ADMIN}/login?${new URLSearchParams({ next, ...extra }).toString()}`;

  admin.get('/login', async (c) => {
    const next = safeNext(c.req.query('next'));
    if ((await sessionOf(c)) !== undefined) return c.redirect(next, 303);
    return html(c, <LoginPage next={next} message={loginMessage(c)} />);
  });

  // Every answer is a redirect to the login page (or where the login leads): a reload shows
  // the outcome and never sends the token again.
  admin.post('/login', async (c) => {
    if (fromAnotherOrigin(c)) return html(c, <MessagePage title="Refused" message="A login form from another site is refused." />, 403);
    const form = await c.req.parseBody();
    const next = safeNext(form.next);
    const address = clientAddress(c);
    const wait = throttle.waitMs(address);
    if (wait > 0) {
      c.header('retry-after', String(Math.ceil(wait / 1000)));
      return c.redirect(loginUrl(next), 303);
    }
    if (typeof form.token !== 'string' || !sessions.isToken(form.token)) {
      throttle.failed(address);
      return c.redirect(loginUrl(next, { failed: 'token' }), 303);
    }
    throttle.succeeded(address);
    const session = sessions.issue(now());
    await store.startAdminSession(sessionId(session.nonce), session.expiresAt, now());
    setCookie(c, SESSION_COOKIE, session.cookie, {
      path: ADMIN,
      httpOnly: true,
      sameSite: 'Strict',
      // Secure when the browser came over HTTPS (via the TLS proxy): the cookie never travels in clear text then.
      secure: overHttps(c),
      maxAge: Math.floor(sessions.lifetimeMs / 1000),
    });
    return c.redirect(next, 303);
  });

  // Every other page needs a session; every POST its CSRF token, from our own origin.
  const pageAuth: MiddlewareHandler<AdminEnv> = async function adminPageAuth(c, next) {
    const nonce = await sessionOf(c);
    if (nonce === undefined) {
      const url = new URL(c.req.url);
      if (c.req.method === 'GET' || c.req.method === 'HEAD') return c.redirect(loginUrl(url.pathname + url.search), 303);
      // A form sent after the session ended: nothing is done; after the login, back to its page.
      return c.redirect(loginUrl(pageOf(url.pathname), { ended: '1' }), 303);
    }
    if (c.req.method === 'POST') {
      const form = await c.req.parseBody();
      if (fromAnotherOrigin(c) || !sessions.isCsrfToken(nonce, form.csrf)) {
        return html(
          c,
          <MessagePage
            title="Refused"
            message="This form was not sent by a page of this admin session (missing or wrong CSRF token). Reload the page and try again."
            csrf={sessions.csrfToken(nonce)}
          />,
          403,
        );
      }
    }
    c.set('nonce', nonce);
    return next();
  };
  admin.use('*', pageAuth);

  const csrfOf = (c: Context<AdminEnv>) => sessions.csrfToken(c.get('nonce'));

  /** After an action: to `path`, with what it did sealed for this session (shown by outcomeOf there). */
  function doneRedirect(c: Context<AdminEnv>, path: string, outcome: Omit<Outcome, 'at'>): Response {
    const sealed = sessions.seal(c.get('nonce'), JSON.stringify({ ...outcome, at: now() }));
    return c.redirect(`${path}?${new URLSearchParams({ [OUTCOME_PARAM]: sealed }).toString()}`, 303);
  }

  /** The outcome an action sealed into this page's address; undefined without one, or one not sealed for this session. */
  function outcomeOf(c: Context<AdminEnv>): Outcome | undefined {
    const text = sessions.unseal(c.get('nonce'), c.req.query(OUTCOME_PARAM));
    return text === undefined ? undefined : (JSON.parse(text) as Outcome);
  }

  admin.post('/logout', async (c) => {
    // Ended here, for every copy of the cookie: the browser's deletion alone would leave it valid.
    await store.endAdminSession(sessionId(c.get('nonce')));
    deleteCookie(c, SESSION_COOKIE, { path: ADMIN });
    return c.redirect(`${ADMIN}/login?out=1`, 303);
  });

  async function overview(c: Context<AdminEnv>) {
    const at = now();
    const since = Math.floor(at / HOUR_MS) * HOUR_MS - (CHART_HOURS - 1) * HOUR_MS;
    const [s, q, hourly, failures, alerts] = await Promise.all([
      store.stats(at),
      store.queueStats(),
      store.deliveriesPerHour(since),
      store.effectFailuresByRoute(since),
      store.alerts.firingAlerts(),
    ]);
    const data = {
      stats: statsJson(s, config, at, [], alerts),
      oldestPendingAgeMs: q.oldestPendingReceivedAt === null ? null : at - q.oldestPendingReceivedAt,
      buckets: hourBuckets(hourly, at),
      failures,
      now: at,
      configLoadedAt: options.configLoadedAt,
    };
    return html(c, <OverviewPage data={data} csrf={csrfOf(c)} outcome={outcomeOf(c)} />);
  }

  admin.get('/', (c) => overview(c));

  admin.post('/replay-dead', async (c) => {
    const result = await store.replayDead({ force: false, now: now() });
    return doneRedirect(c, `${ADMIN}/`, replayOutcome(replayJson(result), true));
  });

  admin.get('/events', async (c) => {
    let filters: EventFilters | undefined;
    let error: string | undefined;
    try {
      filters = parseFilters((n) => c.req.query(n));
    } catch (e) {
      if (!(e instanceof ReceiverError)) throw e;
      error = e.message;
    }
    const { rows, scanLimitReached } = filters === undefined ? { rows: [], scanLimitReached: false } : await findEvents(filters);
    const page = rows.slice(0, filters?.limit ?? 0);
    const olderThan = filters !== undefined && rows.length > filters.limit ? page[page.length - 1]?.id : undefined;
    // A whole delivery id nothing matched: the ids like it (in any source: the source may be the mistake).
    let near: NearDeliveryId[] | undefined;
    if (filters?.delivery !== undefined && filters.match === 'exact' && page.length === 0) near = await store.nearDeliveryIds(filters.delivery, NEAR_MATCHES);
    const events: ListedEvent[] = page.map((e) => ({ ...summaryJson(e), senderDeliveryId: senderDeliveryId(config.sources, e.source, e.deliveryId) }));
    return html(
      c,
      <EventsPage
        filters={filters}
        error={error}
        events={events}
        olderThan={olderThan}
        sources={[...config.sources.keys()]}
        csrf={csrfOf(c)}
        scanLimitReached={scanLimitReached ? filters?.scanLimit : undefined}
        near={near}
      />,
      error === undefined ? 200 : 400,
    );
  });

  admin.get('/events/:id', async (c) => {
    const id = eventId(c.req.param('id'));
    const event = await store.getEvent(id);
    if (event === undefined)
      return html(c, <MessagePage title="No such event" message={`Event ${id} does not exist (never received, or purged).`} csrf={csrfOf(c)} />, 404);
    return html(c, <EventPage event={detailJson(event, config.sources)} conflicts={event.conflicts} csrf={csrfOf(c)} outcome={outcomeOf(c)} />);
  });

  // The raw bytes, exactly as received: as text when they are UTF-8 (never as HTML), else a download.
  admin.get('/events/:id/body', async (c) => {
    const event = await store.getEvent(eventId(c.req.param('id')));
    if (event?.body === undefined || event.body === null)
      return html(c, <MessagePage title="No body" message="This event has no stored body." csrf={csrfOf(c)} />, 404);
    const text = detailJson(event).bodyEncoding === 'utf8';
    return c.body(new Uint8Array(event.body), 200, {
      'content-type': text ? 'text/plain; charset=utf-8' : 'application/octet-stream',
      'content-disposition': `${text ? 'inline' : 'attachment'}; filename="event-${event.id}.body"`,
    });
  });

  admin.post('/events/:id/replay', async (c) => {
    const id = eventId(c.req.param('id'));
    const form = await c.req.parseBody();
    const force = form.force === '1';
    // A route's own button replays that route alone (its unit); the store refuses a route the event does not have.
    const route = typeof form.route === 'string' && form.route !== '' ? form.route : undefined;
    const page = `${ADMIN}/events/${id}`;
    // Force re-sends what was already done: it needs the confirmation box ticked, checked
    // here too (the form's `required` is only the browser's courtesy).
    if (force && form.confirm !== 'yes') {
      return doneRedirect(c, page, { tone: 'bad', text: 'Replay with force needs its confirmation box ticked; nothing was replayed.' });
    }
    return doneRedirect(c, page, replayOutcome(replayJson(await store.replayEvents([id], { force, now: now(), route }))));
  });

  // The overview also answers at /admin/ (the sub-application's root is /admin); any other
  // path is an admin 404 page, with the admin security headers.
  admin.get('/*', (c) => {
    if (c.req.path === `${ADMIN}/`) return overview(c);
    return html(c, <MessagePage title="Not found" message="There is no such admin page." csrf={csrfOf(c)} />, 404);
  });

  return admin;
}
