import type { RouteConfig } from '../config/schema.js';
import { whyNoRouteApplies } from '../effects/routes.js';
import { ReceiverError } from '../errors.js';
import type { ResolvedSource } from '../providers/types.js';
import { sha256Hex } from '../providers/util.js';
import type { CatchUpCounts, CatchUpPartial, CatchUpState, CatchUpStore } from '../store/catch-up-types.js';
import { BudgetExhausted, RequestRefused, SenderApi } from './api.js';
import type { CatchUpSettings, ListContext, ListedItem } from './types.js';

/**
 * One catch-up run for one source: list what the sender's API shows from the starting
 * point on, find what is not stored, and store it (Stripe) or ask for it again (GitHub,
 * Paddle, GitLab), oldest first. Everything already stored is left alone, so a second run
 * changes nothing; a dry run writes nothing at all.
 */

/** A run resumes this long before the last one started: the sender's clock and listing may lag ours. */
export const RESUME_OVERLAP_MS = 5 * 60_000;

/** Delivery ids looked up per query. */
const LOOKUP_CHUNK = 500;

export interface CatchUpRunOptions {
  settings: CatchUpSettings;
  source: ResolvedSource;
  store: CatchUpStore;
  routes: readonly RouteConfig[];
  now: number;
  /** --since: start here (ms), even before catch-up was configured. Otherwise resume. */
  since?: number | undefined;
  dryRun?: boolean;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  signal?: AbortSignal | undefined;
  /** Called as the run moves on (the CLI's progress line). */
  onProgress?: (p: CatchUpProgress) => void;
}

export interface CatchUpProgress extends CatchUpCounts {
  source: string;
  phase: 'listing' | 'recovering' | 'done';
}

export interface CatchUpResult extends CatchUpCounts {
  source: string;
  provider: string;
  mode: 'store' | 'redeliver';
  dryRun: boolean;
  /** The run's starting point (ms). */
  from: number;
  /** Where the next run without --since starts (ms), when this run moved it. */
  resumeAt: number | null;
  requests: number;
  durationMs: number;
  /** One clear message naming the source, or null. */
  error: string | null;
  hint: string | null;
}

/** What a run saw and did, as the log line and `catch-up --json` both report it. */
export function runSummary(r: CatchUpResult) {
  return {
    source: r.source,
    provider: r.provider,
    from: new Date(r.from).toISOString(),
    listed: r.listed,
    alreadyStored: r.alreadyStored,
    storedNow: r.storedNow,
    redeliveryAsked: r.redeliveryAsked,
    failed: r.failed,
    requests: r.requests,
  };
}

const zero = (): CatchUpCounts => ({ listed: 0, alreadyStored: 0, storedNow: 0, redeliveryAsked: 0, failed: 0 });

export async function runCatchUp(o: CatchUpRunOptions): Promise<CatchUpResult> {
  const { settings, source, store } = o;
  const sender = settings.sender;
  const started = performance.now();
  const counts = zero();
  const progress = (phase: CatchUpProgress['phase']) => o.onProgress?.({ source: source.name, phase, ...counts });
  const dryRun = o.dryRun === true;
  // Loaded without secrets (an operator command that only reads): a bug to get here.
  if (settings.credential === undefined) throw new ReceiverError('config', `sources.${source.name}.catchUp.${sender.credentialField}: not resolved`);
  // A dry run creates no state: before the first real run, it looks from now on.
  const state: CatchUpState = dryRun
    ? ((await store.catchUpState(source.name)) ?? {
        source: source.name,
        configuredAt: o.now,
        resumeAt: null,
        partial: null,
        lastRunAt: null,
        lastOkAt: null,
        lastError: null,
        lastCounts: null,
      })
    : await store.beginCatchUp(source.name, o.now);
  // Never before catch-up was configured (its effects would apply to events from before
  // the receiver was there), unless --since asks for it.
  const resumePoint = Math.max(state.resumeAt ?? state.configuredAt, state.configuredAt);
  const from = o.since ?? resumePoint;
  // The older part an interrupted run left (not with --since, which chooses its own span).
  const until = o.since === undefined ? (state.partial?.until ?? undefined) : undefined;
  const result = (error: ReceiverError | null, resumeAt: number | null, requests: number): CatchUpResult => ({
    source: source.name,
    provider: sender.provider,
    mode: sender.mode,
    dryRun,
    from,
    resumeAt,
    requests,
    durationMs: Math.round(performance.now() - started),
    ...counts,
    error: error?.message ?? null,
    hint: error?.hint ?? null,
  });

  const api = new SenderApi({
    source: source.name,
    sender: sender.title,
    base: settings.apiBase,
    headers: sender.headers(settings.credential.reveal()),
    credentialField: sender.credentialField,
    permissions: sender.permissions,
    where: ['hook', 'notificationSettingId', 'apiBase']
      .filter((f) => f === 'apiBase' || settings[f as 'hook' | 'notificationSettingId'] !== undefined)
      .map((f) => `catchUp.${f}`)
      .join(' and '),
    maxRequests: settings.maxRequests,
    fetch: o.fetch,
    sleep: o.sleep,
    signal: o.signal,
  });

  let error: ReceiverError | null = null;
  // The earliest item that must be looked at again (asked for, or failed): the next run starts there.
  let revisit = Number.POSITIVE_INFINITY;
  const ctx: ListContext = { api, settings, source, from, until };
  let oldestListed = Number.POSITIVE_INFINITY;
  try {
    progress('listing');
    // Strictly from the starting point: Stripe's `created` is in whole seconds, so an event
    // of the very second catch-up was configured counts as from before it (never applied).
    // Later starting points overlap the last run by minutes, so nothing falls in between.
    // Listed newest first: reversed, then sorted stably, events of one second stay in the sender's order.
    const listed = (await sender.list(ctx))
      .filter((i) => i.at >= from && (until === undefined || i.at <= until))
      .reverse()
      .sort((a, b) => a.at - b.at);
    counts.listed = listed.length;
    oldestListed = listed[0]?.at ?? oldestListed;
    const stored = await storedAmong(store, source.name, listed);
    const missing: ListedItem[] = [];
    for (const item of listed) {
      if (item.deliveryIds.some((id) => stored.has(id))) counts.alreadyStored += 1;
      else missing.push(item);
    }
    progress('recovering');
    for (const item of missing) {
      if (dryRun) {
        if (sender.mode === 'store') counts.storedNow += 1;
        else counts.redeliveryAsked += 1;
        continue;
      }
      try {
        if (sender.mode === 'store') {
          const r = await storeOne(o, item);
          if (r) counts.storedNow += 1;
          else counts.alreadyStored += 1;
        } else {
          await item.redeliver!(api);
          counts.redeliveryAsked += 1;
          // Asked, not yet received: the next run checks it again (and asks again if it never came).
          revisit = Math.min(revisit, item.at);
        }
      } catch (e) {
        // One item's trouble (the API refused this redelivery, the event has no id): counted,
        // and the run goes on. A refused credential, the request budget, the store: the run ends.
        if (!(e instanceof RequestRefused || (e instanceof ReceiverError && e.kind === 'payload'))) throw e;
        counts.failed += 1;
        revisit = Math.min(revisit, item.at);
        error ??= e;
      }
      progress('recovering');
    }
  } catch (e) {
    if (o.signal?.aborted === true && !(e instanceof ReceiverError))
      error = new ReceiverError('runtime', `sources.${source.name}.catchUp: stopped (shutting down)`);
    else error = e instanceof ReceiverError ? e : new ReceiverError('runtime', `sources.${source.name}.catchUp: ${(e as Error).message}`, { cause: e });
  }
  progress('done');

  // A complete run moves the resume point to just before it started (or to the earliest
  // item still owed), but never back before catch-up was configured, and only when this
  // run covered everything since the current resume point. A run that completed the older
  // part of an interrupted one moves it to where that one would have.
  let resumeAt: number | null = null;
  let partial: CatchUpPartial | null | undefined;
  const end = Math.max(state.configuredAt, Math.min(o.now - RESUME_OVERLAP_MS, revisit));
  if (ctx.truncated === true && error === null) {
    partial = { until: oldestListed, end: state.partial?.end ?? end };
    error = new BudgetExhausted(source.name, settings.maxRequests);
  } else if (error === null && from <= resumePoint) {
    resumeAt = until === undefined ? end : Math.min(state.partial!.end, revisit);
    if (until !== undefined) partial = null;
  }
  if (!dryRun)
    await store.recordCatchUp(source.name, { at: o.now, resumeAt: resumeAt ?? undefined, partial, error: error?.message ?? null, counts: { ...counts } });
  return result(error, resumeAt, api.requests);
}

async function storedAmong(store: CatchUpStore, source: string, items: readonly ListedItem[]): Promise<Set<string>> {
  const ids = items.flatMap((i) => i.deliveryIds);
  const stored = new Set<string>();
  for (let i = 0; i < ids.length; i += LOOKUP_CHUNK) for (const id of await store.storedDeliveryIds(source, ids.slice(i, i + LOOKUP_CHUNK))) stored.add(id);
  return stored;
}

/**
 * Stores one fetched event: its delivery id and content hash are what the source's
 * provider reads from the same JSON, so dedupe against its webhook holds either way.
 */
async function storeOne(o: CatchUpRunOptions, item: ListedItem): Promise<boolean> {
  const body = item.body!;
  const identity = o.source.provider.identify({ raw: body, headers: {}, url: '', now: o.now }, o.source);
  const r = await o.store.storeFetched({
    source: o.source.name,
    deliveryId: identity.deliveryId,
    eventType: identity.eventType,
    body,
    bodySha256: identity.contentHash ?? sha256Hex(body),
    receivedAt: o.now,
    successStatus: o.source.successStatus,
    unrouted: whyNoRouteApplies(o.routes, { source: o.source.name, eventType: identity.eventType, headers: {}, body }),
  });
  return r.stored;
}
