import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { TOKEN } from './helpers.js';

/**
 * The admin pages in a real browser (Debian's chromium, driven by playwright-core; no
 * browser is downloaded), against a real `receiver serve` with its drain: one browser
 * launch for the file. RECEIVER_TEST_CHROMIUM (set by .ci/run) names the browser and makes
 * these tests required; without it and without /usr/bin/chromium they are skipped, loudly.
 */
const CHROMIUM = process.env.RECEIVER_TEST_CHROMIUM ?? '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available) {
  if (process.env.RECEIVER_TEST_CHROMIUM !== undefined) throw new Error(`RECEIVER_TEST_CHROMIUM=${CHROMIUM} does not exist`);
  console.warn(`\n*** Admin browser tests SKIPPED: no chromium at ${CHROMIUM} (apt-get install chromium, or set RECEIVER_TEST_CHROMIUM). ***\n`);
}

describe.skipIf(!available)('admin pages in a browser', () => {
  const tmp = tempDir('receiver-admin-browser-');
  const okFile = join(tmp.dir, 'effects-may-succeed');
  let serve: ServeProcess;
  let browser: Browser;
  let page: Page;
  /** Everything the pages said on their console, and every script error: none expected. */
  const problems: string[] = [];

  beforeAll(async () => {
    const config = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      // The effect fails until the test creates okFile; one attempt, then the event is dead.
      routes: [{ name: 'licence', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/sh', '-c', 'test -f "$1"', 'sh', okFile], timeoutSeconds: 10 } }],
      retry: { maxAttempts: 1, baseSeconds: 1, maxSeconds: 1 },
      drain: { pollMs: 50 },
      admin: { token: 'env:RECEIVER_ADMIN_TOKEN' },
    });
    [serve, browser] = await Promise.all([
      startServe(config, { env: { RECEIVER_ADMIN_TOKEN: TOKEN } }),
      chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] }),
    ]);
    const deliver = async (body: object, headers: Record<string, string> = {}) =>
      expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify(body), headers)).status).toBe(202);
    await deliver(
      { id: 'evt_paid_1402', type: 'order.paid', customer: 'ada@example.com', amount: 1200 },
      { 'stripe-signature': 't=1,v1=a-real-looking-signature' },
    );
    await deliver({ id: 'evt_xss', type: 'order.paid', note: '<script>window.__pwned = 1</script>' });
    // Both fail their one attempt and are dead.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const res = await fetch(`${serve.url}/admin/api/events?status=dead`, { headers: { authorization: `Bearer ${TOKEN}` } });
      if (((await res.json()) as unknown[]).length === 2) break;
      if (Date.now() > deadline) throw new Error('the events never became dead');
      await new Promise((r) => setTimeout(r, 50));
    }
    page = await browser.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()} (${m.location().url})`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  });

  afterAll(async () => {
    await browser?.close();
    await serve?.stop();
    tmp.cleanup();
  });

  it('refuses a wrong token, then logs in with the right one', async () => {
    await page.goto(`${serve.url}/admin/events`);
    expect(new URL(page.url()).pathname).toBe('/admin/login');
    await page.getByLabel(/Admin token/).fill('not-the-token-not-the-token-not-the-token');
    await page.getByRole('button', { name: 'Log in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('That is not the admin token.');
    // The refusal is a 401, which the browser notes on the console; that line and no other.
    expect(problems).toEqual([expect.stringMatching(/^console error: Failed to load resource: .* 401 .*\/admin\/login\)$/)]);
    problems.length = 0;
    await page.getByLabel(/Admin token/).fill(TOKEN);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.waitForURL(/\/admin\/events$/);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Events');
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

  it('replays the dead event and sees it done', async () => {
    // Force needs its confirmation box: the browser does not send the form without it.
    const url = page.url();
    await page.getByRole('button', { name: /with force/ }).click();
    expect(page.url()).toBe(url);
    writeFileSync(okFile, '');
    await page.getByRole('button', { name: /^Replay event \d+$/ }).click();
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed event \d+ \(was dead\)/);
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
    expect(await attempts.allTextContents()).toEqual([expect.stringMatching(/^1.*licence.*failed.*exit/), expect.stringMatching(/^2.*licence.*ok$/)]);
  });

  it('refuses a POST without the CSRF token', async () => {
    const id = /\/admin\/events\/(\d+)$/.exec(page.url())![1];
    const res = await page.request.post(`${serve.url}/admin/events/${id}/replay`, { form: { force: '1', confirm: 'yes' } });
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

  it('the pages logged nothing on their console', () => {
    expect(problems).toEqual([]);
  });
});
