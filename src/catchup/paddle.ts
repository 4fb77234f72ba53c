import type { CatchUpSender, ListedItem } from './types.js';

/** Paddle's largest page. */
const PAGE = 200;

interface Notification {
  id?: unknown;
  origin?: unknown;
  occurred_at?: unknown;
  payload?: { event_id?: unknown; event_type?: unknown } | null;
}

interface PaddleList {
  data?: unknown;
  meta?: { pagination?: { next?: unknown; has_more?: unknown } };
}

/**
 * Paddle lists the notifications of one destination (notification setting) that failed:
 * it gave up on them. Each whose event_id is not stored is replayed
 * (`POST /notifications/<id>/replay`): Paddle sends a new notification of the same event,
 * signed, with a new notification_id and the same event_id. Only notifications that Paddle
 * created for an event (origin `event`) can be replayed.
 */
export const paddleCatchUp: CatchUpSender = {
  provider: 'paddle',
  title: 'Paddle',
  mode: 'redeliver',
  defaultApiBase: 'https://api.paddle.com',
  credentialField: 'apiKey',
  permissions: 'the "notification.read" and "notification.write" permissions (an API key limited to them)',
  validate(s) {
    const problems: string[] = [];
    if (s.notificationSettingId === undefined) {
      problems.push(
        "notificationSettingId: set it to the ntfset_... id of the destination that posts to this source (other destinations' notifications must not be replayed)",
      );
    }
    if (s.hook !== undefined) problems.push('hook: Paddle uses notificationSettingId; remove "hook"');
    return problems;
  },
  headers(key) {
    return { authorization: `Bearer ${key}` };
  },
  async page({ api, settings, from }, at) {
    const url =
      at ??
      api.url('/notifications', {
        notification_setting_id: settings.notificationSettingId,
        status: 'failed',
        per_page: PAGE,
        from: new Date(from).toISOString(),
      });
    const page = ((await api.get(url)).json ?? {}) as PaddleList;
    const byEvent = new Map<string, { notification: string; at: number; type: string }>();
    let skipped = 0;
    for (const n of Array.isArray(page.data) ? (page.data as (Notification | null)[]) : []) {
      const eventId = n?.payload?.event_id;
      const occurred = typeof n?.occurred_at === 'string' ? Date.parse(n.occurred_at) : Number.NaN;
      if (n === null || typeof n !== 'object' || typeof n.id !== 'string' || typeof eventId !== 'string' || Number.isNaN(occurred)) {
        skipped += 1;
        continue;
      }
      // Only notifications Paddle created for an event can be replayed (not replays themselves).
      if (n.origin !== 'event' || byEvent.has(eventId)) continue;
      byEvent.set(eventId, { notification: n.id, at: occurred, type: typeof n.payload?.event_type === 'string' ? n.payload.event_type : 'unknown' });
    }
    const items: ListedItem[] = [];
    for (const [eventId, n] of byEvent) {
      items.push({
        deliveryIds: [eventId],
        at: n.at,
        eventType: n.type,
        redeliver: async (a) => {
          await a.post(a.url(`/notifications/${encodeURIComponent(n.notification)}/replay`));
        },
      });
    }
    const next = page.meta?.pagination?.next;
    return { items, next: page.meta?.pagination?.has_more === true && typeof next === 'string' ? next : undefined, skipped };
  },
};
