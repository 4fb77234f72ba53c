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
  async page({ api, from, until }, at) {
    const url =
      at ??
      api.url('/v1/events', {
        limit: PAGE,
        'created[gte]': Math.floor(from / 1000),
        'created[lte]': until === undefined ? undefined : Math.floor(until / 1000),
      });
    const page = ((await api.get(url)).json ?? {}) as StripeList;
    const data: unknown[] = Array.isArray(page.data) ? page.data : [];
    const items: ListedItem[] = [];
    let skipped = 0;
    let last: string | undefined;
    for (const event of data as (Record<string, unknown> | null)[]) {
      if (event === null || typeof event !== 'object' || typeof event.id !== 'string' || typeof event.created !== 'number') {
        skipped += 1;
        continue;
      }
      last = event.id;
      items.push({
        deliveryIds: [event.id],
        at: event.created * 1000,
        eventType: typeof event.type === 'string' ? event.type : 'unknown',
        body: Buffer.from(JSON.stringify(event)),
      });
    }
    if (page.has_more !== true || last === undefined) return { items, next: undefined, skipped };
    // The next page: the same query, after the last event this one listed.
    const next = new URL(url);
    next.searchParams.set('starting_after', last);
    return { items, next: next.href, skipped };
  },
};
