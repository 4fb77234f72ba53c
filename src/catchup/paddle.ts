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
  async list({ api, settings, from }) {
    const byEvent = new Map<string, { notification: string; at: number; type: string }>();
    let url = api.url('/notifications', {
      notification_setting_id: settings.notificationSettingId,
      status: 'failed',
      per_page: PAGE,
      from: new Date(from).toISOString(),
    });
    for (;;) {
      const res = await api.get(url);
      const page = res.json as PaddleList;
      for (const n of Array.isArray(page.data) ? (page.data as Notification[]) : []) {
        const eventId = n.payload?.event_id;
        if (typeof n.id !== 'string' || typeof eventId !== 'string' || typeof n.occurred_at !== 'string' || n.origin !== 'event') continue;
        if (!byEvent.has(eventId))
          byEvent.set(eventId, {
            notification: n.id,
            at: Date.parse(n.occurred_at),
            type: typeof n.payload?.event_type === 'string' ? n.payload.event_type : 'unknown',
          });
      }
      const next = page.meta?.pagination?.next;
      if (page.meta?.pagination?.has_more !== true || typeof next !== 'string') break;
      url = api.sameOrigin(next);
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
    return items;
  },
};
