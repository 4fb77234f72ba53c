import { senderDeliveryId } from '../delivery-ids.js';
import type { ResolvedSource } from '../providers/types.js';
import type { AttemptRow, EventDetail, EventSummary } from '../store/ops-types.js';
import type { AttemptRowOutcome } from '../vocabulary.js';

/**
 * The JSON documents of `events list --json` and `events show --json`, which the admin API
 * serves as they are and the admin pages render.
 */

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The JSON shape of one event in `events list` (and the first fields of `events show`). */
export function summaryJson(e: EventSummary) {
  return {
    id: e.id,
    source: e.source,
    deliveryId: e.deliveryId,
    eventType: e.eventType,
    status: e.status,
    attempts: e.attempts,
    receivedAt: iso(e.receivedAt),
    nextAttemptAt: iso(e.nextAttemptAt),
    finishedAt: iso(e.finishedAt),
    lastError: e.lastError,
    duplicates: e.duplicates,
    forceEffects: e.forceEffects,
    origin: e.origin,
  };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The body as text when it is valid UTF-8, else base64; `bodyEncoding` says which. */
function bodyJson(body: Buffer | null): { body: string | null; bodyEncoding: 'utf8' | 'base64' | null } {
  if (body === null) return { body: null, bodyEncoding: null };
  try {
    return { body: utf8.decode(body), bodyEncoding: 'utf8' };
  } catch {
    return { body: body.toString('base64'), bodyEncoding: 'base64' };
  }
}

/**
 * Attempt rows numbered across replays. The stored `attempt` is the retry counter at the
 * time, which a replay resets: a try starts where that number changes or an effect
 * repeats within it, and a replay where it does not go up. `number` counts tries from the
 * first; `replay` counts the replays before the row (0: before any).
 */
function numberAttempts(rows: readonly AttemptRow[]): { number: number; replay: number }[] {
  let number = 0;
  let replay = 0;
  let stored = 0;
  let seen = new Set<string>();
  return rows.map((a) => {
    const effect = `${a.route}\u0000${a.effectKey ?? ''}`;
    if (number === 0 || a.attempt !== stored || seen.has(effect)) {
      if (number > 0 && a.attempt <= stored) replay += 1;
      number += 1;
      stored = a.attempt;
      seen = new Set();
    }
    seen.add(effect);
    return { number, replay };
  });
}

/** The JSON document of `events show --json`; `sources`, the configured ones, give the delivery id as the sender shows it. */
export function detailJson(e: EventDetail, sources: ReadonlyMap<string, ResolvedSource> = new Map()) {
  const numbers = numberAttempts(e.attemptRows);
  // Outcomes that ran the effect: skipped, stale and busy ran nothing.
  const runsOf = (effectKey: string, outcome: AttemptRowOutcome) => e.attemptRows.filter((a) => a.effectKey === effectKey && a.outcome === outcome).length;
  return {
    ...summaryJson(e),
    // The id as the sender's pages show it (GitHub's GUID without our hook id); else deliveryId.
    senderDeliveryId: senderDeliveryId(sources, e.source, e.deliveryId),
    leaseOwner: e.leaseOwner,
    leaseExpiresAt: iso(e.leaseExpiresAt),
    responseStatus: e.responseStatus,
    extraIds: e.extraIds,
    headers: e.headers,
    ...bodyJson(e.body),
    bodySha256: e.bodySha256,
    routeDecisions: e.routeDecisions,
    // The work per route; the event's status, attempts and next attempt above are derived from these.
    units: e.units.map((u) => ({
      route: u.route,
      lane: u.lane,
      status: u.status,
      attempts: u.attempts,
      // Only a pending unit waits for a time.
      nextAttemptAt: u.status === 'pending' ? iso(u.nextAttemptAt) : null,
      lastError: u.lastError,
      leaseOwner: u.status === 'processing' ? u.leaseOwner : null,
      leaseExpiresAt: u.status === 'processing' ? iso(u.leaseExpiresAt) : null,
      replays: u.replays,
      finishedAt: iso(u.finishedAt),
    })),
    // `attempts` above is the retry counter (as in `events list`); this is every recorded try.
    attemptLog: e.attemptRows.map((a, i) => ({
      attempt: a.attempt,
      // Across replays (the stored `attempt` restarts at 1 after one); `replay`: replays before it.
      number: numbers[i]!.number,
      replay: numbers[i]!.replay,
      route: a.route,
      effectKey: a.effectKey,
      runKey: a.runKey,
      outcome: a.outcome,
      forced: a.forced,
      startedAt: iso(a.startedAt),
      finishedAt: iso(a.finishedAt),
      error: a.error,
      output: a.output,
    })),
    effects: e.effects.map((f) => ({
      effectKey: f.effectKey,
      route: f.route,
      businessKey: f.businessKey,
      status: f.status,
      eventId: f.eventId,
      version: f.version,
      runs: f.runs,
      forcedRuns: f.forcedRuns,
      // This event's runs of the key, from its attempts; `runs` is the ledger's, over every event.
      okRuns: runsOf(f.effectKey, 'ok'),
      failedRuns: runsOf(f.effectKey, 'failed'),
      runningRuns: runsOf(f.effectKey, 'running'),
      startedAt: iso(f.startedAt),
      finishedAt: iso(f.finishedAt),
      lastError: f.lastError,
    })),
    conflicts: e.conflicts.map((c) => ({
      id: c.id,
      receivedAt: iso(c.receivedAt),
      bodySha256: c.bodySha256,
      repeats: c.repeats,
      headers: c.headers,
      ...bodyJson(c.body),
    })),
  };
}

/**
 * The event as `events show --json` and the admin API give it: `detailJson` and the routes it
 * has attempts of that the configuration no longer has (a reload removed them; that work stays
 * as it is, and says so).
 */
export function eventJson(e: EventDetail, config: { sources: ReadonlyMap<string, ResolvedSource>; routes: readonly { name: string }[] }) {
  const detail = detailJson(e, config.sources);
  const configured = new Set(config.routes.map((r) => r.name));
  return { ...detail, routesNotConfigured: [...new Set(detail.attemptLog.map((a) => a.route))].filter((r) => !configured.has(r)) };
}
