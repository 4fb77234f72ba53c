import { ReceiverError } from '../../errors.js';
import type { ListEventsQuery } from '../../store/ops-types.js';
import { EVENT_STATUSES, type EventStatus } from '../../vocabulary.js';
import { parseTime } from '../../time.js';

/**
 * The events list's filters, read from a query string: the same names for the page's form
 * and the JSON API. An empty field (a form submits every field) means "any".
 */
export interface EventFilters {
  status?: EventStatus | undefined;
  source?: string | undefined;
  type?: string | undefined;
  delivery?: string | undefined;
  /** How `delivery` matches: the whole id (default) or its beginning. */
  match: 'exact' | 'prefix';
  /** Received at or after (ms). */
  from?: number | undefined;
  /** Received before (ms). */
  to?: number | undefined;
  /** Keyset cursor: events with a smaller id (the last id of the previous page). */
  before?: number | undefined;
  limit: number;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 500;

const usage = (message: string) => new ReceiverError('usage', message);

function positive(name: string, text: string, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^\d{1,16}$/.test(text) || Number(text) <= 0 || Number(text) > max) throw usage(`${name}: "${text}" must be a whole number from 1 to ${max}`);
  return Number(text);
}

/** Reads the filters; a bad value is a `usage` error (400) naming the parameter. */
export function parseFilters(query: (name: string) => string | undefined): EventFilters {
  const get = (name: string) => {
    const v = query(name);
    return v === undefined || v.trim() === '' ? undefined : v;
  };
  const status = get('status');
  if (status !== undefined && !(EVENT_STATUSES as readonly string[]).includes(status))
    throw usage(`status: "${status}" is not one of ${EVENT_STATUSES.join(', ')}`);
  const match = get('match') ?? 'exact';
  if (match !== 'exact' && match !== 'prefix') throw usage(`match: "${match}" is not exact or prefix`);
  const from = get('from');
  const to = get('to');
  const before = get('before');
  const limit = get('limit');
  return {
    status: status as EventStatus | undefined,
    source: get('source'),
    type: get('type'),
    delivery: get('delivery'),
    match,
    from: from === undefined ? undefined : parseTime('from', from),
    to: to === undefined ? undefined : parseTime('to', to),
    before: before === undefined ? undefined : positive('before', before),
    limit: limit === undefined ? DEFAULT_PAGE_SIZE : positive('limit', limit, MAX_PAGE_SIZE),
  };
}

/** The store query for one page; one row more than shown, to know whether an older page exists. */
export function toListQuery(f: EventFilters): ListEventsQuery {
  return {
    status: f.status,
    source: f.source,
    eventType: f.type,
    ...(f.delivery === undefined ? {} : f.match === 'prefix' ? { deliveryIdPrefix: f.delivery } : { deliveryId: f.delivery }),
    receivedFrom: f.from,
    receivedBefore: f.to,
    beforeId: f.before,
    limit: f.limit + 1,
  };
}

/** The query string of these filters (without the cursor unless given), for links to other pages. */
export function filtersQuery(f: EventFilters, before?: number): string {
  const q = new URLSearchParams();
  if (f.status !== undefined) q.set('status', f.status);
  if (f.source !== undefined) q.set('source', f.source);
  if (f.type !== undefined) q.set('type', f.type);
  if (f.delivery !== undefined) q.set('delivery', f.delivery);
  if (f.match !== 'exact') q.set('match', f.match);
  if (f.from !== undefined) q.set('from', new Date(f.from).toISOString());
  if (f.to !== undefined) q.set('to', new Date(f.to).toISOString());
  if (f.limit !== DEFAULT_PAGE_SIZE) q.set('limit', String(f.limit));
  if (before !== undefined) q.set('before', String(before));
  return q.toString();
}
