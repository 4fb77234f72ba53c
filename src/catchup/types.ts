import type { Secret } from '../config/secret.js';
import type { ResolvedSource } from '../providers/types.js';
import type { SenderApi } from './api.js';

/**
 * Glossary (catch-up): see also src/store/catch-up-types.ts.
 * - catch-up run: one pass over one source's sender API, from a point in time to now.
 * - listed: events (or deliveries) the sender's API shows from that point on.
 * - stored now: fetched from the API and stored (Stripe: its events are the payload).
 * - redelivery asked: the sender was asked to send the delivery again (GitHub, Paddle,
 *   GitLab); it comes back through POST /webhooks/:source, signed, like any delivery.
 */

/** A source's `catchUp` settings, resolved. */
export interface CatchUpSettings {
  source: string;
  sender: CatchUpSender;
  /** Undefined when the configuration was loaded without secrets (operator commands that only read). */
  credential: Secret | undefined;
  apiBase: string;
  everyMinutes: number;
  /** Requests to the sender's API per run, at most. */
  maxRequests: number;
  /** Events stored or redeliveries asked per run, at most. */
  maxEvents: number;
  /** One request, from connecting to the answer's last byte (ms). */
  timeoutMs: number;
  /** A whole run (ms): past it, the run stops where it is and the next one continues. */
  maxRunMs: number;
  /** An answer longer than this is refused, unread. */
  maxResponseBytes: number;
  hook?: string | undefined;
  notificationSettingId?: string | undefined;
}

/** One event or delivery the sender's API lists. */
export interface ListedItem {
  /** The delivery ids it may be stored under; stored under any of them means stored. */
  deliveryIds: string[];
  /** When the sender created it (ms): what the run's starting point is compared with. */
  at: number;
  eventType: string;
  /** `store` senders: the event as the API returned it, stored under deliveryIds[0]. */
  body?: Buffer;
  /** `redeliver` senders: asks the sender to deliver it again. */
  redeliver?: (api: SenderApi) => Promise<void>;
}

export interface ListContext {
  api: SenderApi;
  settings: CatchUpSettings;
  source: ResolvedSource;
  /** Nothing created before this (ms) is wanted; a listing newest first may stop there. */
  from: number;
  /** Nothing created after this (ms) is wanted: the older part of an interrupted run. */
  until?: number | undefined;
}

/** One page of a sender's listing, newest first. */
export interface ListedPage {
  items: ListedItem[];
  /** The next (older) page's URL, on the API's own origin; undefined after the last page. */
  next: string | undefined;
  /** Items that were null or malformed: skipped and counted. */
  skipped: number;
  /** The page reached before `from`: older pages are not wanted. */
  reachedFrom?: boolean;
}

export interface CatchUpSender {
  /** The provider this sender's API belongs to. */
  provider: string;
  /** As people call it, for messages. */
  title: string;
  /** store: fetched events are stored directly. redeliver: the sender is asked to send again. */
  mode: 'store' | 'redeliver';
  defaultApiBase: string;
  credentialField: 'apiKey' | 'token';
  /** The minimal permission, for messages and the README. */
  permissions: string;
  /** Problems with the other catchUp fields (hook, notificationSettingId), as `field: message`. */
  validate(settings: { hook?: string | undefined; notificationSettingId?: string | undefined }): string[];
  headers(credential: string): Record<string, string>;
  /**
   * One page of the listing, newest first as the senders' APIs list them: the first page
   * when `url` is undefined, else the page at `url` (a `next` this sender gave, maybe in
   * an earlier run: the cursor a run cut short continues from).
   */
  page(ctx: ListContext, url: URL | undefined): Promise<ListedPage>;
}
