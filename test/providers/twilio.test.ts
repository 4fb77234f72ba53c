import { createHash, createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { twilioSignedString } from '../../src/providers/twilio.js';
import { sha256Hex } from '../../src/providers/util.js';
import { fixture, startSources, type Harness } from './harness.js';

/** Twilio signs the URL it called: behind a proxy that is `publicUrl`, not what we see. */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const TOKEN = 'twilio-auth-token-0123456789abcdef';
const PUBLIC = 'https://hooks.shop.example/webhooks/proxied';
const FORM = 'application/x-www-form-urlencoded';

/** Twilio's algorithm written out independently: URL, then name+value pairs sorted by name. */
function twilioSign(url: string, params: [string, string][], token = TOKEN): string {
  const data = [...params].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).reduce((acc, [k, v]) => acc + k + v, url);
  return createHmac('sha1', token).update(Buffer.from(data, 'utf8')).digest('base64');
}

let h: Harness;
beforeAll(async () => {
  h = await startSources(
    {
      proxied: { provider: 'twilio', secret: TOKEN, publicUrl: PUBLIC },
      direct: { provider: 'twilio', secret: TOKEN },
    },
    NOW,
  );
});
afterAll(() => h.close());

describe('twilio', () => {
  const body = fixture('twilio.txt');
  const params = [...new URLSearchParams(body.toString('utf8'))];

  it('behind a proxy: verified against publicUrl plus the request query; the URL the receiver saw would not verify', async () => {
    const sig = twilioSign(`${PUBLIC}?shop=eu`, params);
    const r = await h.send('proxied', body, { 'x-twilio-signature': sig, 'content-type': FORM, 'i-twilio-idempotency-token': 'tok-proxied-1' }, '?shop=eu');
    expect(r.status, r.text).toBe(202);
    // The same request without publicUrl: the receiver's own URL is not what Twilio signed.
    expect((await h.send('direct', body, { 'x-twilio-signature': sig, 'content-type': FORM }, '?shop=eu')).status).toBe(401);
    // A different query than the one signed.
    expect((await h.send('proxied', body, { 'x-twilio-signature': sig, 'content-type': FORM }, '?shop=us')).status).toBe(401);
    expect(h.event('proxied')).toMatchObject({ delivery_id: 'tok-proxied-1', event_type: 'message.delivered' });
  });

  it('without publicUrl: the URL the receiver saw (scheme, Host, path and query)', async () => {
    const url = `${h.url('direct')}?a=1`;
    const r = await h.send('direct', body, { 'x-twilio-signature': twilioSign(url, params), 'content-type': FORM }, '?a=1');
    expect(r.status, r.text).toBe(202);
    // No idempotency token: the body hash is the delivery id.
    expect(h.event('direct')?.delivery_id).toBe(`sha256:${sha256Hex(body)}`);
  });

  it('parameters are sorted by name; a repeated name contributes each value, sorted', async () => {
    const form =
      'To=%2B15558675310&MediaUrl0=https%3A%2F%2Fapi.twilio.com%2Fm%2F2&Body=hello+world&From=%2B15017122661&MediaUrl0=https%3A%2F%2Fapi.twilio.com%2Fm%2F1&SmsStatus=received';
    expect(twilioSignedString('https://x.example/h', form)).toBe(
      'https://x.example/hBodyhello worldFrom+15017122661MediaUrl0https://api.twilio.com/m/1MediaUrl0https://api.twilio.com/m/2SmsStatusreceivedTo+15558675310',
    );
    const sig = createHmac('sha1', TOKEN)
      .update(twilioSignedString(`${PUBLIC}`, form))
      .digest('base64');
    const r = await h.send('proxied', Buffer.from(form), { 'x-twilio-signature': sig, 'content-type': FORM, 'i-twilio-idempotency-token': 'tok-media' });
    expect(r.status, r.text).toBe(202);
  });

  it('JSON body: bodySHA256 in the signed URL must match the body; a changed body is refused', async () => {
    const json = Buffer.from('{"type":"com.twilio.messaging.message.delivered","data":{"messageSid":"SM1"}}');
    const query = `?bodySHA256=${createHash('sha256').update(json).digest('hex')}`;
    const sig = twilioSign(`${PUBLIC}${query}`, []);
    const headers = { 'x-twilio-signature': sig, 'content-type': 'application/json', 'i-twilio-idempotency-token': 'tok-json' };
    const changed = Buffer.from(json.toString().replace('SM1', 'SM2'));
    expect((await h.send('proxied', changed, headers, query)).status).toBe(401);
    const r = await h.send('proxied', json, headers, query);
    expect(r.status, r.text).toBe(202);
    expect(h.app.store.db.prepare("SELECT event_type FROM events WHERE delivery_id = 'tok-json'").get()).toEqual({
      event_type: 'com.twilio.messaging.message.delivered',
    });
  });

  it('voice status callbacks are typed call.<status>', async () => {
    const form = 'CallSid=CA42&CallStatus=completed&From=%2B15017122661&To=%2B15558675310&AccountSid=AC1';
    const sig = twilioSign(PUBLIC, [...new URLSearchParams(form)]);
    expect(
      (await h.send('proxied', Buffer.from(form), { 'x-twilio-signature': sig, 'content-type': FORM, 'i-twilio-idempotency-token': 'tok-call' })).status,
    ).toBe(202);
    expect(h.app.store.db.prepare("SELECT event_type FROM events WHERE delivery_id = 'tok-call'").get()).toEqual({ event_type: 'call.completed' });
  });
});
