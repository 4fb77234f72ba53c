import type { RouteConfig } from '../config/schema.js';
import { whyNoRouteApplies } from '../effects/routes.js';
import { ReceiverError } from '../errors.js';
import type { ResolvedSource } from '../providers/types.js';
import { sha256Hex } from '../providers/util.js';
import type { CatchUpCounts, CatchUpPartial, CatchUpState, CatchUpStore } from '../store/catch-up-types.js';
import { RequestRefused, RunCut, SenderApi } from './api.js';
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
  /** Another receiver was running this source's catch-up: this run did nothing. */
  busy: boolean;
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
    skipped: r.skipped,
    requests: r.requests,
  };
}

const zero = (): CatchUpCounts => ({ listed: 0, alreadyStored: 0, storedNow: 0, redeliveryAsked: 0, failed: 0, skipped: 0 });

export async function runCatchUp(o: CatchUpRunOptions): Promise<CatchUpResult> {
  const { settings, source, store } = o;
  const sender = settings.sender;
  const started = performance.now();
  const counts = zero();
  const progress = (phase: CatchUpProgress['phase']) => o.onProgress?.({ source: source.name, phase, ...counts });
  // Loaded without secrets (an operator command that only reads): a bug to get here.
  if (settings.credential === undefined) throw new ReceiverError('config', `sources.${source.name}.catchUp.${sender.credentialField}: not resolved`);
  // One receiver runs a source's catch-up at a time (PostgreSQL: an advisory lock).
  const lock = await store.lockCatchUp(source.name);
  if (lock === undefined) return busyResult(o, started);
  try {
    return await runLocked(o, started, counts, progress);
  } finally {
    await lock.release();
  }
}

async function runLocked(
  o: CatchUpRunOptions,
  started: number,
  counts: CatchUpCounts,
  progress: (phase: CatchUpProgress['phase']) => void,
): Promise<CatchUpResult> {
  const { settings, source, store } = o;
  const sender = settings.sender;
  const dryRun = o.dryRun === true;
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
  // Without --since, a listing an earlier run left unfinished is continued first.
  const continued = o.since === undefined ? state.partial : null;
  const from = o.since ?? continued?.from ?? resumePoint;
  const until = continued?.until;
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
    busy: false,
  });

  const credential = settings.credential!.reveal();
  const api = new SenderApi({
    source: source.name,
    sender: sender.title,
    base: settings.apiBase,
    headers: sender.headers(credential),
    credential,
    credentialField: sender.credentialField,
    permissions: sender.permissions,
    where: ['hook', 'notificationSettingId', 'apiBase']
      .filter((f) => f === 'apiBase' || settings[f as 'hook' | 'notificationSettingId'] !== undefined)
      .map((f) => `catchUp.${f}`)
      .join(' and '),
    maxRequests: settings.maxRequests,
    timeoutMs: settings.timeoutMs,
    maxResponseBytes: settings.maxResponseBytes,
    deadline: started + settings.maxRunMs,
    deadlineField: `${settings.maxRunMs / 1000}s (catchUp.maxRunSeconds)`,
    sleep: o.sleep,
    signal: o.signal,
  });

  let error: ReceiverError | null = null;
  // The earliest item that must be looked at again (asked for, or failed): the next run starts there.
  let revisit = Number.POSITIVE_INFINITY;
  const ctx: ListContext = { api, settings, source, from, until };
  // The page being worked on (undefined: the first): where a run that stops continues.
  const startAt = continued?.cursor ?? undefined;
  let at: string | undefined = startAt !== undefined && api.onOrigin(startAt) ? startAt : undefined;
  let pagesDone = 0;
  // Delivery ids handled in this run: an item listed on two pages (GitHub's attempts of one GUID) is handled once.
  const handled = new Set<string>();
  let stoppedAt: { at: string | null } | undefined;
  try {
    for (;;) {
      progress('listing');
      const page = await sender.page(ctx, at === undefined ? undefined : new URL(at));
      counts.skipped += page.skipped;
      // Strictly from the starting point: Stripe's `created` is in whole seconds, so an event
      // of the very second catch-up was configured counts as from before it (never applied).
      // Later starting points overlap the last run by minutes, so nothing falls in between.
      // Listed newest first: reversed, then sorted stably, events of one second stay in the
      // sender's order; each page is recovered oldest first as it is listed.
      const listed = page.items
        .filter((i) => i.at >= from && (until === undefined || i.at <= until) && !i.deliveryIds.some((id) => handled.has(id)))
        .reverse()
        .sort((a, b) => a.at - b.at);
      for (const i of listed) handled.add(i.deliveryIds[0]!);
      counts.listed += listed.length;
      const stored = await storedAmong(store, source.name, listed);
      progress('recovering');
      for (const item of listed) {
        if (item.deliveryIds.some((id) => stored.has(id))) {
          counts.alreadyStored += 1;
          continue;
        }
        if (counts.storedNow + counts.redeliveryAsked >= settings.maxEvents) {
          const what = sender.mode === 'store' ? 'events stored' : 'redeliveries asked';
          throw new RunCut(source.name, `${settings.maxEvents} ${what} (catchUp.maxEvents)`);
        }
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
          // and the run goes on. A refused credential, a bound, the store: the run ends.
          if (!(e instanceof RequestRefused || (e instanceof ReceiverError && e.kind === 'payload'))) throw e;
          counts.failed += 1;
          revisit = Math.min(revisit, item.at);
          error ??= e;
        }
        progress('recovering');
      }
      pagesDone += 1;
      // Newest first: once a page reaches before the starting point, later pages are older still.
      if (page.next === undefined || page.reachedFrom === true || page.items.length + page.skipped === 0) break;
      // Checked before it is kept: a cursor is always on the API's own origin.
      at = api.sameOrigin(page.next).href;
    }
  } catch (e) {
    if (o.signal?.aborted === true && !(e instanceof ReceiverError))
      error = new ReceiverError('runtime', `sources.${source.name}.catchUp: stopped (shutting down)`);
    else error = e instanceof ReceiverError ? e : new ReceiverError('runtime', `sources.${source.name}.catchUp: ${(e as Error).message}`, { cause: e });
    // Where this run stopped, when the next one should continue from there rather than
    // start over: it was cut by a bound, or it got past a page.
    if (e instanceof RunCut || pagesDone > 0) stoppedAt = { at: at ?? null };
  }
  progress('done');

  // A complete run moves the resume point to just before it started (or to the earliest
  // item still owed), but never back before catch-up was configured, and only when this
  // run covered everything since the current resume point. A run that completed a
  // continued listing moves it to where the run that began it would have.
  let resumeAt: number | null = null;
  let partial: CatchUpPartial | null | undefined;
  const end = Math.max(state.configuredAt, Math.min(o.now - RESUME_OVERLAP_MS, revisit));
  if (error === null) {
    if (continued !== null) {
      partial = null;
      if (continued.from === undefined || continued.from <= resumePoint) resumeAt = Math.min(continued.end, revisit);
    } else if (from <= resumePoint) resumeAt = end;
  } else if (stoppedAt !== undefined) {
    // Kept unless an operator's --since run cut short would drop an older unfinished listing.
    if (continued !== null) partial = { cursor: stoppedAt.at, from, until: continued.until, end: Math.min(continued.end, revisit) };
    else if (state.partial === null || from <= (state.partial.from ?? resumePoint))
      partial = { cursor: stoppedAt.at, from, until: o.now, end: Math.min(end, state.partial?.end ?? end) };
  }
  if (!dryRun)
    await store.recordCatchUp(source.name, { at: o.now, resumeAt: resumeAt ?? undefined, partial, error: error?.message ?? null, counts: { ...counts } });
  return result(error, resumeAt, api.requests);
}

/** Another receiver is running this source's catch-up: this one leaves it, changing nothing. */
function busyResult(o: CatchUpRunOptions, started: number): CatchUpResult {
  return {
    source: o.source.name,
    provider: o.settings.sender.provider,
    mode: o.settings.sender.mode,
    dryRun: o.dryRun === true,
    from: o.since ?? o.now,
    resumeAt: null,
    requests: 0,
    durationMs: Math.round(performance.now() - started),
    ...zero(),
    error: null,
    hint: null,
    busy: true,
  };
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
