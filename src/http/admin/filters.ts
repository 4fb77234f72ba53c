import { deliveryIdForms } from '../../delivery-ids.js';
import { ReceiverError } from '../../errors.js';
import type { ResolvedSource } from '../../providers/types.js';
import type { ListEventsQuery, SearchEventsQuery } from '../../store/ops-types.js';
import { parseTime } from '../../time.js';
import { EVENT_ORIGINS, EVENT_STATUSES, isOneOf, type EventOrigin, type EventStatus } from '../../vocabulary.js';

/**
 * The events list's filters, read from a query string: the same names for the page's form
 * and the JSON API. An empty field (a form submits every field) means "any".
 */
export interface EventFilters {
  status?: EventStatus | undefined;
  source?: string | undefined;
  origin?: EventOrigin | undefined;
  /** The exact type, or a pattern when it has `*` (any characters) or `?` (one), as `events list --type`. */
  type?: string | undefined;
  delivery?: string | undefined;
  /** How `delivery` matches: the whole id, as stored or as the sender shows it (default), or the stored id's beginning. */
  match: 'exact' | 'prefix';
  /** Events whose body contains this text (exact bytes, case-sensitive), as `events list --search`. */
  search?: string | undefined;
  /** `search` reads the bodies of at most this many newest events matching the other filters. */
  scanLimit: number;
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
/** A body search reads this many bodies at most by default, as `events list --search`. */
export const DEFAULT_SCAN_LIMIT = 10_000;
/** And at most this many when asked (`scan`): one request from the pages stays bounded. */
export const MAX_SCAN_LIMIT = 100_000;

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
  const origin = get('origin');
  if (origin !== undefined && !isOneOf(EVENT_ORIGINS, origin)) throw usage(`origin: "${origin}" is not one of ${EVENT_ORIGINS.join(', ')}`);
  const search = query('search');
  if (search !== undefined && search !== '' && search.length > 1000) throw usage('search: at most 1000 characters');
  const scan = get('scan');
  if (scan !== undefined && (search === undefined || search === '')) throw usage('scan: bounds a body search (search), which is not given');
  const match = get('match') ?? 'exact';
  if (match !== 'exact' && match !== 'prefix') throw usage(`match: "${match}" is not exact or prefix`);
  const from = get('from');
  const to = get('to');
  const before = get('before');
  const limit = get('limit');
  return {
    status: status as EventStatus | undefined,
    source: get('source'),
    origin,
    type: get('type'),
    delivery: get('delivery')?.trim(),
    match,
    // Searched as typed: spaces at either end may be part of what is looked for.
    search: search === undefined || search === '' ? undefined : search,
    scanLimit: scan === undefined ? DEFAULT_SCAN_LIMIT : positive('scan', scan, MAX_SCAN_LIMIT),
    from: from === undefined ? undefined : parseTime('from', from),
    to: to === undefined ? undefined : parseTime('to', to),
    before: before === undefined ? undefined : positive('before', before),
    limit: limit === undefined ? DEFAULT_PAGE_SIZE : positive('limit', limit, MAX_PAGE_SIZE),
  };
}

/**
 * The store query for one page; one row more than shown, to know whether an older page
 * exists. A whole delivery id is looked for in every form it may be stored in (`sources`:
 * the configured ones, see src/delivery-ids.ts).
 */
export function toListQuery(f: EventFilters, sources: ReadonlyMap<string, ResolvedSource>): ListEventsQuery {
  const pattern = f.type !== undefined && /[*?]/.test(f.type);
  return {
    status: f.status,
    source: f.source,
    origin: f.origin,
    ...(pattern ? { eventTypeGlob: f.type } : { eventType: f.type }),
    ...(f.delivery === undefined
      ? {}
      : f.match === 'prefix'
        ? { deliveryIdPrefix: f.delivery }
        : { deliveryIdForms: deliveryIdForms(sources, f.delivery, f.source) }),
    receivedFrom: f.from,
    receivedBefore: f.to,
    beforeId: f.before,
    limit: f.limit + 1,
  };
}

/** toListQuery with the body search, when the filters have one. */
export function toSearchQuery(f: EventFilters, sources: ReadonlyMap<string, ResolvedSource>): SearchEventsQuery | undefined {
  return f.search === undefined ? undefined : { ...toListQuery(f, sources), bodyContains: f.search, scanLimit: f.scanLimit };
}

/** The query string of these filters (without the cursor unless given), for links to other pages. */
export function filtersQuery(f: EventFilters, before?: number): string {
  const q = new URLSearchParams();
  if (f.status !== undefined) q.set('status', f.status);
  if (f.source !== undefined) q.set('source', f.source);
  if (f.origin !== undefined) q.set('origin', f.origin);
  if (f.type !== undefined) q.set('type', f.type);
  if (f.delivery !== undefined) q.set('delivery', f.delivery);
  if (f.match !== 'exact') q.set('match', f.match);
  if (f.search !== undefined) q.set('search', f.search);
  if (f.scanLimit !== DEFAULT_SCAN_LIMIT) q.set('scan', String(f.scanLimit));
  if (f.from !== undefined) q.set('from', new Date(f.from).toISOString());
  if (f.to !== undefined) q.set('to', new Date(f.to).toISOString());
  if (f.limit !== DEFAULT_PAGE_SIZE) q.set('limit', String(f.limit));
  if (before !== undefined) q.set('before', String(before));
  return q.toString();
}
