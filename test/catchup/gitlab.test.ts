import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '../helpers.js';
import { catchUpApp } from './harness.js';
import { FakeGitlab, GITLAB_HOOK, GITLAB_SECRET, GITLAB_TOKEN } from './fakes.js';

const RESEND = /\/events\/\d+\/resend$/;

describe('catch-up: gitlab (hook events resent)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let gl: FakeGitlab;
  let h: Awaited<ReturnType<typeof catchUpApp>>;

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-gitlab-');
    gl = await new FakeGitlab().start();
    h = await catchUpApp(
      tmp.dir,
      'gl',
      { provider: 'gitlab', secret: GITLAB_SECRET, catchUp: { token: 'env:GITLAB_TOKEN', hook: GITLAB_HOOK, apiBase: `${gl.base}/api/v4`, maxRequests: 200 } },
      { GITLAB_TOKEN },
    );
    gl.target = h.url;
  });
  afterEach(async () => {
    await h.close();
    await gl.close();
    tmp.cleanup();
  });

  it('resends each event missed while down, once, under its Idempotency-Key; pages by Link; waits out a 429; again changes nothing', async () => {
    await h.run();
    const ok = await gl.push();
    gl.target = undefined;
    const missed: Awaited<ReturnType<FakeGitlab['push']>>[] = [];
    for (let i = 0; i < 120; i++) missed.push(await gl.push());
    gl.target = h.url;
    gl.faultAfter = 1;
    gl.faults.push({ status: 429, headers: { 'retry-after': '2' }, body: '{"message":"Retry later"}' });

    const r = await h.run();
    expect(r).toMatchObject({ error: null, listed: 121, alreadyStored: 1, redeliveryAsked: 120, failed: 0 });
    expect(h.waits).toEqual([2000]);
    expect(gl.requests.every((q) => q.auth === GITLAB_TOKEN)).toBe(true);
    // The first run's one page, then this run's: page 1, whose first resend met the 429, then
    // pages 2 and 3: GitLab logs each resend at the top, so the older events moved down a page.
    expect(gl.requests.filter((q) => q.method === 'GET').map((q) => new URLSearchParams(q.query).get('page'))).toEqual([null, null, '2', '3']);
    await waitFor(() => (h.stored().length === 121 ? true : undefined), 'the resent events');
    // Resent ones arrive as GitLab sends them, some at once: compared as a set.
    expect(h.stored().sort()).toEqual([ok, ...missed].map((e) => e.request_headers['Idempotency-Key']).sort());

    const again = await h.run();
    expect(again).toMatchObject({ error: null, listed: 121, alreadyStored: 121, redeliveryAsked: 0 });
    // 120 resends, the first of them asked twice (its first try met the 429).
    expect(gl.count('POST', RESEND)).toBe(121);
  });

  it('an event from before catch-up was configured is not resent', async () => {
    gl.target = undefined;
    await gl.push();
    await new Promise((r) => setTimeout(r, 5));
    gl.target = h.url;
    const r = await h.run();
    expect(r).toMatchObject({ error: null, listed: 0, redeliveryAsked: 0 });
    expect(gl.count('POST', RESEND)).toBe(0);
  });
});
