import { nextLink } from './api.js';
import type { CatchUpSender, ListedItem } from './types.js';

/** GitHub's largest page of hook deliveries. */
const PAGE = 100;

/** `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`. */
const HOOK = /^(repos\/[^/\s]+\/[^/\s]+|orgs\/[^/\s]+)\/hooks\/(\d+)$/;

interface Delivery {
  id?: unknown;
  guid?: unknown;
  delivered_at?: unknown;
  event?: unknown;
}

/**
 * GitHub never retries a failed delivery. Its API lists a hook's deliveries (3 days,
 * newest first, cursor pages in the Link header) and redelivers one on request, with the
 * same GUID: the delivery comes back signed through the normal path. Every attempt of one
 * GUID (redeliveries included) is one listed item; the newest attempt is the one redelivered.
 */
export const githubCatchUp: CatchUpSender = {
  provider: 'github',
  title: 'GitHub',
  mode: 'redeliver',
  defaultApiBase: 'https://api.github.com',
  credentialField: 'token',
  permissions:
    'read and write access to the hook: a fine-grained token with "Webhooks: Read and write" on the repository (or "Webhooks" on the organization for orgs/<org>/hooks/<id>)',
  validate(s) {
    const problems: string[] = [];
    if (s.hook === undefined)
      problems.push('hook: set "hook": "repos/<owner>/<repo>/hooks/<id>" or "orgs/<org>/hooks/<id>" (the hook whose deliveries to recover)');
    else if (!HOOK.test(s.hook)) problems.push(`hook: "${s.hook}" is not repos/<owner>/<repo>/hooks/<id> or orgs/<org>/hooks/<id>`);
    if (s.notificationSettingId !== undefined) problems.push('notificationSettingId: only Paddle uses this; remove it');
    return problems;
  },
  headers(token) {
    return { authorization: `Bearer ${token}`, accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28' };
  },
  async list({ api, settings, from }) {
    const hook = settings.hook!;
    const hookId = HOOK.exec(hook)![2]!;
    // By GUID: the newest attempt (listed first) is redelivered; the oldest is when it happened.
    const byGuid = new Map<string, { newest: number; at: number; event: string }>();
    let url = api.url(`/${hook}/deliveries`, { per_page: PAGE });
    for (;;) {
      const res = await api.get(url);
      const page = Array.isArray(res.json) ? (res.json as Delivery[]) : [];
      let older = false;
      for (const d of page) {
        if (typeof d.id !== 'number' || typeof d.guid !== 'string' || typeof d.delivered_at !== 'string') continue;
        const at = Date.parse(d.delivered_at);
        if (at < from) older = true;
        const seen = byGuid.get(d.guid);
        if (seen === undefined) byGuid.set(d.guid, { newest: d.id, at, event: typeof d.event === 'string' ? d.event : 'unknown' });
        else seen.at = Math.min(seen.at, at);
      }
      const next = nextLink(res.headers);
      // Newest first: once a page reaches before the starting point, later pages are older still.
      if (older || next === undefined || page.length === 0) break;
      url = api.sameOrigin(next);
    }
    const items: ListedItem[] = [];
    for (const [guid, d] of byGuid) {
      items.push({
        // What ingest stores: "<hook id>:<guid>" (GitHub sends X-GitHub-Hook-ID), or the bare GUID.
        deliveryIds: [`${hookId}:${guid}`, guid],
        at: d.at,
        eventType: d.event,
        redeliver: async (a) => {
          await a.post(a.url(`/${hook}/deliveries/${d.newest}/attempts`));
        },
      });
    }
    return items;
  },
};
