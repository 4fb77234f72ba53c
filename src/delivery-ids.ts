import type { ResolvedSource } from './providers/types.js';
import type { DeliveryIdForm, NearDeliveryId } from './store/ops-types.js';

/**
 * Delivery ids as their senders show them. Most senders' ids are stored as they come; a
 * few are stored with a prefix of ours (GitHub's `<hook id>:<GUID>`, Mailgun's
 * `message:<Message-Id>`, see Provider.senderIds). An operator pastes what the sender's
 * dashboard shows, so every lookup (admin search, `replay --delivery`, `events list
 * --delivery`) tries each stored form, and listings show the sender's id beside ours.
 */

type Sources = ReadonlyMap<string, ResolvedSource>;

/** The stored forms of `given` in `source`, or in every configured source when none is named. */
export function deliveryIdForms(sources: Sources, given: string, source?: string): DeliveryIdForm[] {
  const forms: DeliveryIdForm[] = [{ source, exact: given }];
  const of = (name: string) => sources.get(name)?.provider.senderIds?.storedForms(given) ?? [];
  for (const name of source === undefined ? sources.keys() : [source]) for (const f of of(name)) forms.push({ source: name, ...f });
  return forms;
}

/** The delivery id as the sender shows it (the stored one when they are the same, or the source is not configured). */
export function senderDeliveryId(sources: Sources, source: string, stored: string): string {
  return sources.get(source)?.provider.senderIds?.shown(stored) ?? stored;
}

/** How many near matches a "never received" answer lists, and how many of the newest events it looks through. */
export const NEAR_MATCHES = { limit: 5, scanLimit: 100_000 } as const;

/** `github/123:6f1e… (event 7)`, for an answer that lists near matches. */
export function nearMatchText(m: NearDeliveryId): string {
  return `${m.source}/${m.deliveryId} (event ${m.id})`;
}
