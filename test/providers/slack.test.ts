import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { slack } from '../../src/providers/slack.js';
import { sha256Hex } from '../../src/providers/util.js';
import { fixture, mutateString, startSources, type Harness } from './harness.js';

/** Slack's handshakes (url_verification, ssl_check) and retries, through the real server. */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const SECRET = '8f742231b10e8888abcd99yyyzzz85a5';
const FORM = 'application/x-www-form-urlencoded';

const signedHeaders = (body: Buffer, atMs = NOW, secret = SECRET) => slack.sign(body, secret, atMs, undefined as never, '').headers;

let h: Harness;
beforeAll(async () => {
  h = await startSources({ slack: { provider: 'slack', secret: SECRET }, strict: { provider: 'slack', secret: SECRET, toleranceSeconds: 60 } }, NOW);
});
afterAll(() => h.close());

describe('slack url_verification', () => {
  const challenge = fixture('slack-url-verification.json');

  it('is answered 200 with the challenge after the signature check, and stores nothing', async () => {
    const r = await h.send('slack', challenge, { ...signedHeaders(challenge), 'content-type': 'application/json' });
    expect(r.status).toBe(200);
    expect(r.text).toBe('3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P');
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(h.rows()).toBe(0);
  });

  it('with a bad signature, no signature or a stale timestamp is a 401, and stores nothing', async () => {
    const headers = signedHeaders(challenge);
    const sig = headers['x-slack-signature'] ?? '';
    const bad = await h.send('slack', challenge, { ...headers, 'x-slack-signature': mutateString(sig, sig.length - 1) });
    expect(bad.status).toBe(401);
    expect(bad.text).not.toContain('3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P');
    expect((await h.send('slack', challenge, {})).status).toBe(401);
    expect((await h.send('slack', challenge, signedHeaders(challenge, NOW - 301_000))).status).toBe(401);
    expect((await h.send('slack', challenge, signedHeaders(challenge, NOW, 'another-signing-secret'))).status).toBe(401);
    expect(h.rows()).toBe(0);
  });

  it("a slash command's ssl_check, signed, is answered with an empty 200 and not stored", async () => {
    const body = Buffer.from('ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO');
    const r = await h.send('slack', body, { ...signedHeaders(body), 'content-type': FORM });
    expect(r.status).toBe(200);
    expect(r.text).toBe('');
    expect(h.rows()).toBe(0);
    expect((await h.send('slack', body, { 'content-type': FORM })).status).toBe(401);
  });
});

describe('slack events', () => {
  it('a retry (new timestamp and signature, X-Slack-Retry-Num) is the same event: same answer, one row', async () => {
    const body = fixture('slack.json');
    const first = await h.send('slack', body, signedHeaders(body));
    expect(first.status).toBe(202);
    h.clock.now = NOW + 60_000;
    let retry: Awaited<ReturnType<Harness['send']>>;
    try {
      retry = await h.send('slack', body, { ...signedHeaders(body, NOW + 60_000), 'x-slack-retry-num': '1', 'x-slack-retry-reason': 'http_timeout' });
    } finally {
      h.clock.now = NOW;
    }
    expect(retry.status).toBe(202);
    expect(retry.text).toBe(first.text);
    expect(h.rows('slack')).toBe(1);
    expect(h.event('slack')).toMatchObject({ delivery_id: 'Ev08MFMKH6', event_type: 'app_mention', duplicates: 1 });
  });

  it('interactivity (form field `payload`) and slash commands: typed, keyed by body hash', async () => {
    const interaction = Buffer.from(
      `payload=${encodeURIComponent(JSON.stringify({ type: 'block_actions', user: { id: 'U123' }, actions: [{ action_id: 'approve' }] }))}`,
    );
    const command = Buffer.from('token=x&team_id=T1&command=%2Fdeploy&text=prod&trigger_id=1.2.3');
    for (const body of [interaction, command]) expect((await h.send('strict', body, { ...signedHeaders(body), 'content-type': FORM })).status).toBe(202);
    const rows = h.app.store.db.prepare("SELECT delivery_id, event_type FROM events WHERE source = 'strict' ORDER BY id").all();
    expect(rows).toEqual([
      { delivery_id: `sha256:${sha256Hex(interaction)}`, event_type: 'block_actions' },
      { delivery_id: `sha256:${sha256Hex(command)}`, event_type: '/deploy' },
    ]);
  });

  it('toleranceSeconds on the source narrows the window', async () => {
    const body = Buffer.from('{"type":"event_callback","event_id":"EvTOL","event":{"type":"message"}}');
    expect((await h.send('strict', body, signedHeaders(body, NOW - 61_000))).status).toBe(401);
    expect((await h.send('slack', body, signedHeaders(body, NOW - 61_000))).status).toBe(202);
  });
});
