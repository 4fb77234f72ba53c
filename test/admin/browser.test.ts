import { createHmac, randomUUID } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, runCli, startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { TOKEN } from './helpers.js';

/**
 * The admin pages in a real browser (Debian's chromium, driven by playwright-core; no
 * browser is downloaded), against a real `receiver serve` with its drain: one browser
 * launch for the file. RECEIVER_TEST_CHROMIUM (set by .ci/run) names the browser and makes
 * these tests required; without it and without /usr/bin/chromium they are skipped, loudly.
 *
 * Every action (log in, replay, replay with force, replay every dead event, log out) is
 * followed by a reload and a step back: the browser sends no POST again. Every page is
 * laid out at 390 px (a phone) without scrolling sideways.
 */
const CHROMIUM = process.env.RECEIVER_TEST_CHROMIUM ?? '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available) {
  if (process.env.RECEIVER_TEST_CHROMIUM !== undefined) throw new Error(`RECEIVER_TEST_CHROMIUM=${CHROMIUM} does not exist`);
  console.warn(`\n*** Admin browser tests SKIPPED: no chromium at ${CHROMIUM} (apt-get install chromium, or set RECEIVER_TEST_CHROMIUM). ***\n`);
}

const GH_SECRET = 'admin-browser-gh-secret-71c2';
const HOOK = '987654321';
const GUID = randomUUID();
/** What a sender could put in a type: a right-to-left override that reorders what follows it. */
const BIDI_TYPE = 'order.\u202Ediap';
const BIG = '{"id":"evt_big","type":"checkout.completed","amount":12345678901234567890,"tag":"first","tag":"second"}';

describe.skipIf(!available)('admin pages in a browser', () => {
  const tmp = tempDir('receiver-admin-browser-');
  const okFile = join(tmp.dir, 'effects-may-succeed');
  let config: string;
  let serve: ServeProcess;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  /** Everything the pages said on their console, and every script error: none expected. */
  const problems: string[] = [];
  /** The POSTs the page sent, in order. */
  const posts: string[] = [];
  const ids: Record<string, number> = {};

  const api = async (path: string) => (await fetch(`${serve.url}/admin/api${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  const idOf = async (delivery: string) => ((await api(`/events?delivery=${encodeURIComponent(delivery)}`)) as { id: number }[])[0]!.id;

  /** Reloads, then steps back and forward: the browser must ask with GETs only, and still show `shown`. */
  async function reloadAndBack(shown: string | RegExp) {
    posts.length = 0;
    await page.reload();
    expect(await page.locator('main').textContent()).toMatch(shown);
    const url = page.url();
    await page.goBack();
    await page.goForward();
    expect(page.url()).toBe(url);
    expect(posts).toEqual([]);
  }

  beforeAll(async () => {
    config = writeConfig(tmp.dir, {
      sources: {
        shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' },
        gh: { provider: 'github', secret: 'env:ADMIN_GH_SECRET' },
      },
      // The effect fails until the test creates okFile; one attempt, then the event is dead.
      routes: [{ name: 'licence', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/sh', '-c', 'test -f "$1"', 'sh', okFile], timeoutSeconds: 10 } }],
      retry: { maxAttempts: 1, baseSeconds: 1, maxSeconds: 1 },
      drain: { pollMs: 50 },
      admin: { token: 'env:RECEIVER_ADMIN_TOKEN' },
    });
    const env = { RECEIVER_ADMIN_TOKEN: TOKEN, ADMIN_GH_SECRET: GH_SECRET };
    [serve, browser] = await Promise.all([
      startServe(config, { env }),
      chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] }),
    ]);
    const deliver = async (body: object | string, headers: Record<string, string> = {}) =>
      expect((await post(`${serve.url}/webhooks/shop`, typeof body === 'string' ? body : JSON.stringify(body), headers)).status).toBe(202);
    await deliver(
      { id: 'evt_paid_1402', type: 'order.paid', customer: 'ada@example.com', amount: 1200 },
      { 'stripe-signature': 't=1,v1=a-real-looking-signature' },
    );
    await deliver({ id: 'evt_xss', type: 'order.paid', note: '<script>window.__pwned = 1</script>' });
    await deliver(BIG);
    await deliver({ id: 'evt_bidi', type: BIDI_TYPE });
    // GitHub, signed as GitHub signs: stored as <hook id>:<GUID>.
    const push = Buffer.from('{"ref":"refs/heads/main"}');
    const signature = `sha256=${createHmac('sha256', GH_SECRET).update(push).digest('hex')}`;
    const gh = await post(`${serve.url}/webhooks/gh`, push, {
      'x-hub-signature-256': signature,
      'x-github-delivery': GUID,
      'x-github-event': 'push',
      'x-github-hook-id': HOOK,
    });
    expect(gh.status).toBe(202);
    // send-test's sample, marked as a test: stored with its route skipped.
    const sent = await runCli(['send-test', 'shop', '-c', config, '--url', serve.url], { env });
    expect(sent.code).toBe(0);
    // The four shop deliveries fail their one attempt and are dead.
    const deadline = Date.now() + 10_000;
    while (((await api('/events?status=dead')) as unknown[]).length < 4) {
      if (Date.now() > deadline) throw new Error('the events never became dead');
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const d of ['evt_paid_1402', 'evt_xss', 'evt_big', 'evt_bidi']) ids[d] = await idOf(d);
    context = await browser.newContext();
    page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()} (${m.location().url})`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('request', (r) => {
      if (r.method() === 'POST') posts.push(r.url());
    });
  });

  afterAll(async () => {
    await browser?.close();
    await serve?.stop();
    tmp.cleanup();
  });

  it('refuses a wrong token (a reload does not send it again), then logs in with the right one', async () => {
    await page.goto(`${serve.url}/admin/events`);
    expect(new URL(page.url()).pathname).toBe('/admin/login');
    await page.getByLabel(/Admin token/).fill('not-the-token-not-the-token-not-the-token');
    await page.getByRole('button', { name: 'Log in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('That is not the admin token.');
    await reloadAndBack('That is not the admin token.');
    await page.getByLabel(/Admin token/).fill(TOKEN);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.waitForURL(/\/admin\/events$/);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Events');
    await reloadAndBack('Events');
  });

  it('finds an event by its delivery id, and shows the redacted signature header and the body', async () => {
    await page.getByLabel('Delivery id').fill('evt_paid_1402');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/delivery=evt_paid_1402/);
    const rows = page.locator('tbody tr');
    expect(await rows.count()).toBe(1);
    await page.getByRole('link', { name: 'evt_paid_1402' }).click();
    await page.waitForURL(/\/admin\/events\/\d+$/);
    const signature = page.getByRole('row', { name: /stripe-signature/ });
    expect(await signature.textContent()).toBe('stripe-signature[redacted]');
    expect(await page.content()).not.toContain('a-real-looking-signature');
    expect(await page.getByLabel('Body, pretty-printed JSON').textContent()).toContain('"customer": "ada@example.com"');
    // The raw bytes, one click away.
    const raw = page.getByLabel('Raw body');
    expect(await raw.isVisible()).toBe(false);
    await page.getByText('Raw body, exactly as received').click();
    expect(await raw.textContent()).toBe('{"id":"evt_paid_1402","type":"order.paid","customer":"ada@example.com","amount":1200}');
    expect(await page.locator('dl.facts .status').textContent()).toBe('dead');
  });

  it("finds a GitHub delivery by the GUID GitHub shows, and shows that GUID as the event's delivery id", async () => {
    await page.goto(`${serve.url}/admin/events`);
    await page.getByLabel('Delivery id').fill(GUID);
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/delivery=/);
    expect(await page.locator('tbody tr').count()).toBe(1);
    expect(await page.locator('tbody tr').textContent()).toContain(`stored as ${HOOK}:${GUID}`);
    await page.getByRole('link', { name: GUID }).click();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe(`Event ${await idOf(`${HOOK}:${GUID}`)}: gh / ${GUID}`);
    // A GUID never received: the page says so and lists the ids like it.
    await page.goto(`${serve.url}/admin/events?delivery=${GUID.slice(0, 30)}x`);
    expect(await page.getByRole('status').textContent()).toMatch(
      new RegExp(`No event with delivery id ${GUID.slice(0, 30)}x; near matches: gh/${HOOK}:${GUID}`),
    );
  });

  it("finds a customer's order by a text in its body, events by a type pattern, and test deliveries by their origin", async () => {
    await page.goto(`${serve.url}/admin/events`);
    await page.getByLabel('Body contains').fill('ada@example.com');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/search=ada/);
    expect(await page.locator('tbody tr td[data-label="Id"]').allTextContents()).toEqual([String(ids.evt_paid_1402)]);
    await page.goto(`${serve.url}/admin/events`);
    await page.getByLabel('Event type').fill('checkout.*');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/type=checkout/);
    expect(await page.locator('tbody tr td[data-label="Id"]').allTextContents()).toEqual([String(ids.evt_big)]);
    await page.goto(`${serve.url}/admin/events`);
    await page.getByLabel('Origin').selectOption('test');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/origin=test/);
    const test = page.locator('tbody tr');
    expect(await test.count()).toBe(1);
    expect(await test.locator('td[data-label="Origin"]').textContent()).toBe('test');
    await test.locator('td[data-label="Id"] a').click();
    expect(await page.getByRole('list', { name: 'Route decisions' }).textContent()).toBe('test delivery (send-test --run-effects runs its effects)');
  });

  it('shows a body as it was stored: a 20-digit number whole, a repeated key twice', async () => {
    await page.goto(`${serve.url}/admin/events/${ids.evt_big}`);
    const pretty = await page.getByLabel('Body, pretty-printed JSON').textContent();
    expect(pretty).toContain('"amount": 12345678901234567890,');
    expect(pretty).toContain('"tag": "first",\n  "tag": "second"');
  });

  it('shows a bidi override a sender put in a type escaped, as the CLI does', async () => {
    await page.goto(`${serve.url}/admin/events/${ids.evt_bidi}`);
    expect(await page.locator('dl.facts dd.mono').nth(1).textContent()).toBe('order.\\u202ediap');
    expect(await page.content()).not.toContain('\u202E');
    await page.goto(`${serve.url}/admin/events`);
    expect(await page.content()).not.toContain('\u202E');
    expect(await page.locator('main').textContent()).toContain('order.\\u202ediap');
  });

  it('replays the dead event (a reload or a step back does not replay it again) and sees it done, its attempts counted across the replay', async () => {
    const url = `${serve.url}/admin/events/${ids.evt_paid_1402}`;
    await page.goto(url);
    // Force needs its confirmation box: the browser does not send the form without it.
    await page.getByRole('button', { name: /with force/ }).click();
    expect(page.url()).toBe(url);
    writeFileSync(okFile, '');
    await page.getByRole('button', { name: /^Replay event \d+$/ }).click();
    await page.waitForURL(/\?done=/);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed event \d+ \(was dead\)/);
    await reloadAndBack(/Replayed event \d+ \(was dead\)/);
    await expect
      .poll(
        async () => {
          await page.goto(url);
          return page.locator('dl.facts .status').textContent();
        },
        { timeout: 10_000, interval: 100 },
      )
      .toBe('done');
    // The attempt before the replay failed; the one after it succeeded, numbered on across the replay.
    const attempts = page.locator('section[aria-labelledby="attempts"] tbody tr');
    expect(await attempts.allTextContents()).toEqual([
      expect.stringMatching(/^1.*licence.*failed.*exit/),
      'Replay: the retry counter started again here (attempt 1); #n counts on',
      expect.stringMatching(/^2.*licence.*ok$/),
    ]);
    expect(await page.locator('dl.facts dt:has-text("Attempts") + dd').textContent()).toBe('1 since the last replay (2 in all, 1 replay(s))');
  });

  it('replays with force once: a reload or a step back sends nothing again', async () => {
    const url = `${serve.url}/admin/events/${ids.evt_paid_1402}`;
    await page.goto(url);
    // The event's own box (each route has one too, for its own replay).
    await page
      .locator('section[aria-labelledby="actions"]')
      .getByLabel(/I understand/)
      .check();
    await page.getByRole('button', { name: /with force/ }).click();
    await page.waitForURL(/\?done=/);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed event \d+ \(was done\)[^]*Forced/);
    await reloadAndBack(/Forced: effects already done run again/);
    await expect.poll(async () => ((await api(`/events/${ids.evt_paid_1402}`)) as { status: string }).status, { timeout: 10_000, interval: 100 }).toBe('done');
    const e = (await api(`/events/${ids.evt_paid_1402}`)) as { attemptLog: { forced: boolean }[] };
    expect(e.attemptLog.filter((a) => a.forced)).toHaveLength(1);
  });

  it('replays every dead event from the overview: a reload or a step back does not replay them again', async () => {
    await page.goto(`${serve.url}/admin/`);
    await page.getByRole('button', { name: /^Replay all \d+ dead events$/ }).click();
    await page.waitForURL(/\/admin\/\?done=/);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed 3 events/);
    await reloadAndBack(/Replayed 3 events/);
  });

  it('refuses a POST without the CSRF token', async () => {
    const res = await page.request.post(`${serve.url}/admin/events/${ids.evt_xss}/replay`, { form: { force: '1', confirm: 'yes' } });
    expect(res.status()).toBe(403);
    expect(await res.text()).toContain('missing or wrong CSRF token');
  });

  it('shows a stored <script> as text, and runs none', async () => {
    await page.goto(`${serve.url}/admin/events?delivery=evt_xss`);
    await page.getByRole('link', { name: 'evt_xss' }).click();
    await page.waitForURL(/\/admin\/events\/\d+$/);
    expect(await page.getByLabel('Body, pretty-printed JSON').textContent()).toContain('"note": "<script>window.__pwned = 1</script>"');
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    // The overview, with its chart, on the way.
    await page.getByRole('link', { name: 'Overview' }).click();
    expect(await page.locator('svg.chart rect').count()).toBeGreaterThan(0);
  });

  it('lays out every page at 390 px without scrolling sideways', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 } });
    try {
      const p = await phone.newPage();
      const overflow = async (path: string) => {
        await p.goto(`${serve.url}${path}`);
        return p.evaluate(() => ({ width: document.documentElement.scrollWidth, path: location.pathname + location.search }));
      };
      const fits = (r: { width: number; path: string }) => expect(r.width, r.path).toBeLessThanOrEqual(390);
      fits(await overflow('/admin/login'));
      await p.getByLabel(/Admin token/).fill(TOKEN);
      await p.getByRole('button', { name: 'Log in' }).click();
      await p.waitForURL(/\/admin\/$/);
      for (const path of [
        '/admin/',
        '/admin/events',
        `/admin/events?delivery=${GUID}`,
        '/admin/events?search=ada%40example.com&type=order.*&origin=webhook',
        '/admin/events?from=yesterday',
        ...Object.values(ids).map((id) => `/admin/events/${id}`),
        `/admin/events/${await idOf(`${HOOK}:${GUID}`)}`,
        '/admin/events/999999',
        '/admin/no-such-page',
      ]) {
        fits(await overflow(path));
      }
    } finally {
      await phone.close();
    }
  });

  it('logs out on the server: a reload sends nothing again, and the old cookie no longer opens a page', async () => {
    await page.goto(`${serve.url}/admin/events`);
    const [cookie] = await context.cookies();
    expect(cookie?.name).toBe('receiver_admin');
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.waitForURL(/\/admin\/login\?out=1$/);
    expect(await page.getByRole('status').textContent()).toBe('You are logged out.');
    await reloadAndBack('You are logged out.');
    // The cookie as it was before the logout, put back: refused on the server.
    await context.addCookies([cookie!]);
    await page.goto(`${serve.url}/admin/events`);
    expect(new URL(page.url()).pathname).toBe('/admin/login');
    const res = await fetch(`${serve.url}/admin/api/stats`, { headers: { cookie: `${cookie!.name}=${cookie!.value}` } });
    expect(res.status).toBe(401);
  });

  it('the pages logged nothing on their console', () => {
    expect(problems).toEqual([]);
  });
});
