import { BudgetExhausted } from './api.js';
import type { CatchUpSender, ListedItem } from './types.js';

/** Stripe's largest page of GET /v1/events. */
const PAGE = 100;

interface StripeList {
  data?: unknown;
  has_more?: unknown;
}

/**
 * Stripe keeps 30 days of events at GET /v1/events and does not re-send them on request:
 * each missing event is stored as the API returns it, delivery id = the event id (what its
 * webhook carries). Pages come newest first (`starting_after`), filtered by `created[gte]`.
 */
export const stripeCatchUp: CatchUpSender = {
  provider: 'stripe',
  title: 'Stripe',
  mode: 'store',
  defaultApiBase: 'https://api.stripe.com',
  credentialField: 'apiKey',
  permissions: 'read access to Events (a restricted key, rk_..., with "Events: Read")',
  validate(s) {
    const problems: string[] = [];
    if (s.hook !== undefined) problems.push('hook: Stripe catch-up reads the account\'s events; remove "hook"');
    if (s.notificationSettingId !== undefined) problems.push('notificationSettingId: only Paddle uses this; remove it');
    return problems;
  },
  headers(key) {
    return { authorization: `Bearer ${key}` };
  },
  async list(ctx) {
    const { api, from, until } = ctx;
    const items: ListedItem[] = [];
    let after: string | undefined;
    for (;;) {
      const url = api.url('/v1/events', {
        limit: PAGE,
        'created[gte]': Math.floor(from / 1000),
        'created[lte]': until === undefined ? undefined : Math.floor(until / 1000),
        starting_after: after,
      });
      let page: StripeList;
      try {
        page = (await api.get(url)).json as StripeList;
      } catch (e) {
        // Out of requests: what was listed (the newest) is recovered now, the older rest next run.
        if (!(e instanceof BudgetExhausted) || items.length === 0) throw e;
        ctx.truncated = true;
        return items;
      }
      const data = Array.isArray(page.data) ? (page.data as Record<string, unknown>[]) : [];
      for (const event of data) {
        if (typeof event.id !== 'string' || typeof event.created !== 'number') continue;
        items.push({
          deliveryIds: [event.id],
          at: event.created * 1000,
          eventType: typeof event.type === 'string' ? event.type : 'unknown',
          body: Buffer.from(JSON.stringify(event)),
        });
      }
      const last = data[data.length - 1];
      if (page.has_more !== true || last === undefined || typeof last.id !== 'string') return items;
      after = last.id;
    }
  },
};
