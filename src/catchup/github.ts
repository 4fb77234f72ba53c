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
 * GUID (redeliveries included) on a page is one listed item; the newest attempt is the one
 * redelivered. A GUID whose attempts span two pages is handled on the first (see run.ts).
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
  async page({ api, settings, from }, at) {
    const hook = settings.hook!;
    const hookId = HOOK.exec(hook)![2]!;
    const res = await api.get(at ?? api.url(`/${hook}/deliveries`, { per_page: PAGE }));
    const page: unknown[] = Array.isArray(res.json) ? res.json : [];
    // By GUID: the newest attempt (listed first) is redelivered; the oldest is when it happened.
    const byGuid = new Map<string, { newest: number; at: number; event: string }>();
    let skipped = 0;
    let reachedFrom = false;
    for (const d of page as (Delivery | null)[]) {
      const at = typeof d?.delivered_at === 'string' ? Date.parse(d.delivered_at) : Number.NaN;
      if (d === null || typeof d !== 'object' || typeof d.id !== 'number' || typeof d.guid !== 'string' || Number.isNaN(at)) {
        skipped += 1;
        continue;
      }
      if (at < from) reachedFrom = true;
      const seen = byGuid.get(d.guid);
      if (seen === undefined) byGuid.set(d.guid, { newest: d.id, at, event: typeof d.event === 'string' ? d.event : 'unknown' });
      else seen.at = Math.min(seen.at, at);
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
    return { items, next: page.length === 0 ? undefined : nextLink(res.headers), skipped, reachedFrom };
  },
};
