import { nextLink } from './api.js';
import type { CatchUpSender, ListedItem } from './types.js';

const PAGE = 100;

/** `projects/<id or url-encoded path>/hooks/<hook_id>`. */
const HOOK = /^projects\/[^/\s]+\/hooks\/(\d+)$/;

interface HookEvent {
  id?: unknown;
  created_at?: unknown;
  request_headers?: unknown;
  trigger?: unknown;
}

function headerOf(headers: unknown, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name && typeof v === 'string' && v !== '') return v;
  return undefined;
}

/**
 * GitLab keeps a hook's recent events (7 days) at `GET .../hooks/<id>/events` and resends
 * one on request (`POST .../events/<id>/resend`) with the same Idempotency-Key. The
 * delivery id is read from the logged request headers as ingest reads it. An event without
 * a delivery id or `created_at` cannot be matched or placed after the starting point: it
 * is skipped and counted, never resent.
 */
export const gitlabCatchUp: CatchUpSender = {
  provider: 'gitlab',
  title: 'GitLab',
  mode: 'redeliver',
  defaultApiBase: 'https://gitlab.com/api/v4',
  credentialField: 'token',
  permissions: 'the "api" scope and the Maintainer role on the project (GitLab asks both to read and resend hook events)',
  validate(s) {
    const problems: string[] = [];
    if (s.hook === undefined) problems.push('hook: set "hook": "projects/<id>/hooks/<hook_id>"');
    else if (!HOOK.test(s.hook)) problems.push(`hook: "${s.hook}" is not projects/<id>/hooks/<hook_id>`);
    if (s.notificationSettingId !== undefined) problems.push('notificationSettingId: only Paddle uses this; remove it');
    return problems;
  },
  headers(token) {
    return { 'private-token': token };
  },
  async page({ api, settings, from }, at) {
    const hook = settings.hook!;
    const res = await api.get(at ?? api.url(`/${hook}/events`, { per_page: PAGE }));
    const page: unknown[] = Array.isArray(res.json) ? res.json : [];
    const byId = new Map<string, { newest: number; at: number; type: string }>();
    let skipped = 0;
    let reachedFrom = false;
    for (const e of page as (HookEvent | null)[]) {
      const id =
        e === null || typeof e !== 'object'
          ? undefined
          : (headerOf(e.request_headers, 'idempotency-key') ?? headerOf(e.request_headers, 'webhook-id') ?? headerOf(e.request_headers, 'x-gitlab-event-uuid'));
      const at = typeof e?.created_at === 'string' ? Date.parse(e.created_at) : Number.NaN;
      if (e === null || typeof e.id !== 'number' || id === undefined || Number.isNaN(at)) {
        skipped += 1;
        continue;
      }
      if (at < from) reachedFrom = true;
      const seen = byId.get(id);
      if (seen === undefined)
        byId.set(id, { newest: e.id, at, type: headerOf(e.request_headers, 'x-gitlab-event') ?? (typeof e.trigger === 'string' ? e.trigger : 'unknown') });
      else {
        seen.newest = Math.max(seen.newest, e.id);
        seen.at = Math.min(seen.at, at);
      }
    }
    const items: ListedItem[] = [];
    for (const [id, e] of byId) {
      items.push({
        deliveryIds: [id],
        at: e.at,
        eventType: e.type,
        redeliver: async (a) => {
          await a.post(a.url(`/${hook}/events/${e.newest}/resend`));
        },
      });
    }
    return { items, next: page.length === 0 ? undefined : nextLink(res.headers), skipped, reachedFrom };
  },
};
