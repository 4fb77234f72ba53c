import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { TOKEN } from './helpers.js';

/**
 * The admin event page's work per route, in a real browser against a real `receiver serve`
 * (as test/admin/browser.test.ts): each route's unit listed with its lane, status, attempts
 * and last error, and a replay of one route (plain and forced) that runs that route alone.
 * Every replay is followed by a reload and a step back: the browser sends no POST again.
 */
const CHROMIUM = process.env.RECEIVER_TEST_CHROMIUM ?? '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available) {
  if (process.env.RECEIVER_TEST_CHROMIUM !== undefined) throw new Error(`RECEIVER_TEST_CHROMIUM=${CHROMIUM} does not exist`);
  console.warn(`\n*** Admin route browser tests SKIPPED: no chromium at ${CHROMIUM} (apt-get install chromium, or set RECEIVER_TEST_CHROMIUM). ***\n`);
}

interface EventJson {
  status: string;
  units: { route: string; status: string; attempts: number }[];
  attemptLog: { route: string; outcome: string; forced: boolean }[];
}

describe.skipIf(!available)('admin event page: work per route, and a replay of one route', () => {
  const tmp = tempDir('receiver-admin-routes-');
  const okFile = join(tmp.dir, 'licence-may-succeed');
  let serve: ServeProcess;
  let browser: Browser;
  let page: Page;
  let id: number;
  let url: string;
  const problems: string[] = [];
  const posts: string[] = [];

  const api = async (path: string) => (await fetch(`${serve.url}/admin/api${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  const event = async () => (await api(`/events/${id}`)) as EventJson;
  const attemptsOf = (e: EventJson, route: string) => e.attemptLog.filter((a) => a.route === route).map((a) => `${a.outcome}${a.forced ? ' (forced)' : ''}`);

  /** Reloads, then steps back and forward: GETs only, and the page still shows `shown`. */
  async function reloadAndBack(shown: RegExp) {
    posts.length = 0;
    await page.reload();
    expect(await page.locator('main').textContent()).toMatch(shown);
    const at = page.url();
    await page.goBack();
    await page.goForward();
    expect(page.url()).toBe(at);
    expect(posts).toEqual([]);
  }

  /** The route rows of the "Work per route" table, cell by cell (the replay cell left out). */
  async function unitRows(): Promise<string[][]> {
    const rows = page.locator('section[aria-labelledby="units"] tbody tr');
    const out: string[][] = [];
    for (let i = 0; i < (await rows.count()); i++) {
      const cells = await rows.nth(i).locator('td:not(.replay)').allTextContents();
      out.push(cells.map((c) => c.trim()));
    }
    return out;
  }

  beforeAll(async () => {
    const config = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      routes: [
        { name: 'deploy', source: 'shop', key: '{body.id}', lane: 'deploys', effect: { exec: ['/bin/sh', '-c', 'echo deployed'], timeoutSeconds: 10 } },
        // Fails until the test creates okFile; one attempt, then the route is dead.
        { name: 'licence', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/sh', '-c', 'test -f "$1"', 'sh', okFile], timeoutSeconds: 10 } },
      ],
      retry: { maxAttempts: 1, baseSeconds: 1, maxSeconds: 1 },
      drain: { pollMs: 50 },
      admin: { token: 'env:RECEIVER_ADMIN_TOKEN' },
    });
    [serve, browser] = await Promise.all([
      startServe(config, { env: { RECEIVER_ADMIN_TOKEN: TOKEN } }),
      chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] }),
    ]);
    expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'ord_77', type: 'order.paid' }))).status).toBe(202);
    id = ((await api('/events?delivery=ord_77')) as { id: number }[])[0]!.id;
    const deadline = Date.now() + 10_000;
    while ((await event()).status !== 'dead') {
      if (Date.now() > deadline) throw new Error('the event never became dead (its licence fails)');
      await new Promise((r) => setTimeout(r, 50));
    }
    url = `${serve.url}/admin/events/${id}`;
    page = await (await browser.newContext()).newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('request', (r) => {
      if (r.method() === 'POST') posts.push(r.url());
    });
    await page.goto(url);
    await page.getByLabel(/Admin token/).fill(TOKEN);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.waitForURL(url);
  });

  afterAll(async () => {
    await browser?.close();
    await serve?.stop();
    tmp.cleanup();
  });

  it('lists each route with its lane, status, attempts and last error; the event status is derived from them', async () => {
    expect(await page.locator('dl.facts .status').first().textContent()).toBe('dead');
    expect(await unitRows()).toEqual([
      ['deploy', 'deploys', 'done', '1', '', ''],
      ['licence', 'licence', 'dead', '1', '', expect.stringMatching(/exit/)],
    ]);
  });

  it('replays the dead route alone: a reload or a step back does not replay it again; the deploy does not run again', async () => {
    writeFileSync(okFile, '');
    await page.getByRole('button', { name: 'Replay route licence', exact: true }).click();
    await page.waitForURL(/\?done=/);
    expect(new URL(page.url()).pathname).toBe(`/admin/events/${id}`);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed route licence of event \d+ \(was dead\)[^]*its other routes stay as they are/);
    await reloadAndBack(/Replayed route licence of event \d+/);
    await expect.poll(async () => (await event()).status, { timeout: 10_000, interval: 50 }).toBe('done');
    const e = await event();
    expect(attemptsOf(e, 'deploy')).toEqual(['ok']);
    expect(attemptsOf(e, 'licence')).toEqual(['failed', 'ok']);
    await page.goto(url);
    expect(await unitRows()).toEqual([
      ['deploy', 'deploys', 'done', '1', '', ''],
      // Done: its last error is cleared.
      ['licence', 'licence', 'done', '1 (1 replay(s))', '', ''],
    ]);
  });

  it('a plain replay of a done route skips its done effect; with force (its box ticked) it runs again, once, recorded as forced', async () => {
    await page.getByRole('button', { name: 'Replay route deploy', exact: true }).click();
    await page.waitForURL(/\?done=/);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed route deploy of event \d+ \(was done\)[^]*Effects already done stay skipped/);
    await expect.poll(async () => attemptsOf(await event(), 'deploy'), { timeout: 10_000, interval: 50 }).toEqual(['ok', 'skipped']);

    await page.goto(url);
    const deployRow = page.locator('section[aria-labelledby="units"] tbody tr', { hasText: 'deploys' });
    await deployRow.getByText('With force', { exact: true }).click();
    // The browser does not send the form before its box is ticked.
    posts.length = 0;
    await page.getByRole('button', { name: 'Replay route deploy with force' }).click();
    expect(posts).toEqual([]);
    await deployRow.getByLabel(/I understand/).check();
    await page.getByRole('button', { name: 'Replay route deploy with force' }).click();
    await page.waitForURL(/\?done=/);
    expect(await page.getByRole('status').textContent()).toMatch(/Replayed route deploy of event \d+ \(was done\)[^]*Forced/);
    await reloadAndBack(/Forced: effects already done run again/);
    await expect.poll(async () => attemptsOf(await event(), 'deploy'), { timeout: 10_000, interval: 50 }).toEqual(['ok', 'skipped', 'ok (forced)']);
    const e = await event();
    expect(attemptsOf(e, 'licence')).toEqual(['failed', 'ok']);
    expect(e.status).toBe('done');
  });

  it('the overview shows each lane: its routes, pending and running units, and how long its oldest pending one waits', async () => {
    await page.goto(`${serve.url}/admin/`);
    const rows = page.locator('section[aria-labelledby="lanes"] tbody tr');
    const cells = async (i: number) => (await rows.nth(i).locator('td').allTextContents()).map((c) => c.trim());
    expect(await rows.count()).toBe(2);
    expect(await cells(0)).toEqual(['deploys', 'deploy', '0', '0', 'none pending']);
    expect(await cells(1)).toEqual(['licence', 'licence', '0', '0', 'none pending']);
  });

  it('lays out the event page (the force box open) and the overview at 390 px without scrolling sideways', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, storageState: await page.context().storageState() });
    try {
      const p = await phone.newPage();
      await p.goto(url);
      for (const summary of await p.getByText('With force', { exact: true }).all()) await summary.click();
      expect(await p.getByRole('button', { name: 'Replay route licence with force' }).isVisible()).toBe(true);
      expect(await p.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await p.goto(`${serve.url}/admin/`);
      expect(await p.locator('section[aria-labelledby="lanes"]').isVisible()).toBe(true);
      expect(await p.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    } finally {
      await phone.close();
    }
  });

  it('the page logged nothing on its console', () => {
    expect(problems).toEqual([]);
  });
});
