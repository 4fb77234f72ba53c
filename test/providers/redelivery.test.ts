import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mailgun } from '../../src/providers/mailgun.js';
import { stripe } from '../../src/providers/stripe.js';
import type { ResolvedSource } from '../../src/providers/types.js';
import { makeConfig, post, startApp, tempDir, type RunningApp } from '../helpers.js';

/** Honest redeliveries that differ in fields the sender changes per attempt are duplicates, not conflicts. */
describe('redeliveries whose bodies differ only in per-attempt fields', () => {
  const tmp = tempDir();
  let app: RunningApp;
  const src = (name: string) => app.config.sources.get(name) as ResolvedSource;
  beforeAll(async () => {
    app = await startApp(
      makeConfig(
        { sources: { stripe: { provider: 'stripe', secret: 'whsec_redelivery' }, mailgun: { provider: 'mailgun', secret: 'key-redelivery' } } },
        tmp.dir,
      ),
    );
  });
  afterAll(async () => {
    await app.close();
    tmp.cleanup();
  });
  const rows = () => (app.store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
  const conflicts = () => (app.store.db.prepare('SELECT count(*) AS n FROM conflicts').get() as { n: number }).n;

  it('Stripe: a retry whose pending_webhooks changed gets the first answer; a changed object is a 409', async () => {
    const send = (obj: unknown) => {
      const body = Buffer.from(JSON.stringify(obj));
      return post(`${app.url}/webhooks/stripe`, body, stripe.sign(body, 'whsec_redelivery', Date.now(), src('stripe'), '').headers);
    };
    const event = { id: 'evt_redeliver', object: 'event', type: 'invoice.paid', pending_webhooks: 2, data: { object: { id: 'in_1', amount_paid: 100 } } };
    const first = await send(event);
    const retry = await send({ ...event, pending_webhooks: 1 });
    expect(first.status).toBe(202);
    expect(retry.status).toBe(202);
    expect(retry.text).toBe(first.text);
    expect(conflicts()).toBe(0);
    const changed = await send({ ...event, pending_webhooks: 1, data: { object: { id: 'in_1', amount_paid: 999 } } });
    expect(changed.status).toBe(409);
    expect(conflicts()).toBe(1);
    expect(rows()).toBe(1);
  });

  it('Mailgun: each attempt is signed afresh (new timestamp and token): a duplicate answered 200', async () => {
    const sample = JSON.parse(mailgun.sample(Date.now()).toString()) as Record<string, unknown>;
    const send = () => {
      const signed = mailgun.sign(Buffer.from(JSON.stringify(sample)), 'key-redelivery', Date.now(), src('mailgun'), '');
      return post(`${app.url}/webhooks/mailgun`, signed.body ?? Buffer.alloc(0), signed.headers);
    };
    const first = await send();
    const second = await send();
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.text).toBe(first.text);
    expect(rows()).toBe(2);
    expect(conflicts()).toBe(1);
  });
});
