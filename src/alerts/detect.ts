import type { AlertSettings } from '../config/alerts.js';
import type { CatchUpSettings } from '../catchup/types.js';
import type { RouteConfig } from '../config/schema.js';
import type { AlertFacts, AlertStore } from '../store/alert-types.js';
import type { CatchUpStore } from '../store/catch-up-types.js';
import type { AlertKind } from '../vocabulary.js';

/** A route that went dead this long ago or less is alerted about (a receiver down for a while still tells). */
const DEAD_WINDOW_MS = 24 * 3_600_000;

/** Dead routes taken per check; the rest wait for the next. */
const DEAD_BATCH = 500;

/** Deliveries refused (503) this long in a row make an `ingest` alert. */
export const INGEST_REFUSED_MS = 60_000;

/** What serve itself knows about ingest: since when deliveries are refused, and the last accepted one. */
export interface IngestState {
  refusingSince: number | undefined;
  lastError: string | undefined;
  lastAcceptedAt: number | undefined;
  /** Destinations told of this refusal directly, while the database could not store the alert, and what they were told. */
  told: Set<string>;
  toldFacts: (AlertFacts & { kind: 'ingest' }) | undefined;
}

/** The `ingest` alert while deliveries have been refused for a minute; undefined otherwise. */
export function ingestAlert(ingest: IngestState, now: number): (AlertFacts & { kind: 'ingest' }) | undefined {
  if (ingest.refusingSince === undefined || now - ingest.refusingSince < INGEST_REFUSED_MS) return undefined;
  const minutes = Math.max(1, Math.floor((now - ingest.refusingSince) / 60_000));
  return {
    key: 'ingest',
    kind: 'ingest',
    summary: `Deliveries have been refused (503) for ${minutes} minute${minutes === 1 ? '' : 's'}: senders are retrying, and may give up. Is the database reachable and writable?`,
    error: ingest.lastError,
  };
}

export interface DetectOptions {
  settings: AlertSettings;
  store: { alerts: AlertStore } & Pick<CatchUpStore, 'catchUpState'>;
  routes: readonly Pick<RouteConfig, 'name'>[];
  catchUp: ReadonlyMap<string, Pick<CatchUpSettings, 'source'>>;
  ingest: IngestState;
  now: number;
}

/** What one check changed: keys fired and resolved by this receiver. */
export interface DetectResult {
  fired: AlertFacts[];
  resolved: string[];
  /** The `ingest` alert is due but the database refused to store it. */
  ingestUnstored: boolean;
}

/**
 * One check: reads the store (and what serve knows about ingest), fires each alert whose
 * condition holds and is not firing yet, resolves each firing one whose condition ended.
 * Firing and resolving are decided by the store (one firing row per key, one resolution),
 * so several receivers checking at once alert once.
 */
export async function detect({ settings, store, routes, catchUp, ingest, now }: DetectOptions): Promise<DetectResult> {
  const result: DetectResult = { fired: [], resolved: [], ingestUnstored: false };
  const firing = new Set((await store.alerts.firingAlerts()).map((a) => a.key));
  const destinationsFor = (kind: AlertKind) => settings.destinations.filter((d) => d.on.includes(kind)).map((d) => d.name);
  const fire = async (f: AlertFacts & { kind: AlertKind }, told: readonly string[] = []) => {
    if (firing.has(f.key)) return;
    if (await store.alerts.fireAlert(f, destinationsFor(f.kind), now, told)) result.fired.push(f);
  };
  const resolve = async (key: string) => {
    if (!firing.has(key)) return;
    if (await store.alerts.resolveAlert(key, now)) result.resolved.push(key);
  };

  // dead: one alert per event and route; resolved once the event is done (replayed and succeeded).
  for (const r of await store.alerts.deadRoutes(now - DEAD_WINDOW_MS, DEAD_BATCH)) {
    await fire({
      key: `dead:${r.eventId}:${r.route}`,
      kind: 'dead',
      summary: `Event ${r.eventId} from ${r.source} is dead on route ${r.route}: fix the cause, then replay it (receiver replay ${r.eventId}).`,
      source: r.source,
      route: r.route,
      eventId: r.eventId,
      deliveryId: r.deliveryId,
      error: r.error ?? undefined,
    });
  }
  for (const key of await store.alerts.deadRecovered()) await resolve(key);

  // failing: the route's newest `failingAfter` runs all failed; resolved at its next success.
  for (const route of routes) {
    const key = `failing:${route.name}`;
    const runs = await store.alerts.routeRuns(route.name, settings.failingAfter);
    if (runs.length === settings.failingAfter && runs.every((r) => r.outcome === 'failed')) {
      await fire({
        key,
        kind: 'failing',
        summary: `Route ${route.name} failed its last ${settings.failingAfter} attempts in a row; its events are retried, then dead.`,
        route: route.name,
        error: runs[0]!.error ?? undefined,
      });
    } else if (runs[0]?.outcome === 'ok') await resolve(key);
  }

  // stuck: due work nobody took for stuckMinutes, or a lease expired that long ago.
  const stuckMs = settings.stuckMinutes * 60_000;
  const w = await store.alerts.waitingWork();
  const minutes = (since: number) => Math.floor((now - since) / 60_000);
  if (w.oldestDueAt !== null && w.oldestDueAt <= now - stuckMs) {
    await fire({
      key: 'stuck',
      kind: 'stuck',
      summary: `Event ${w.oldestDueId} has been due for ${minutes(w.oldestDueAt)} minutes and no drain takes it: is serve's drain running?`,
      ...(w.oldestDueId === null ? {} : { eventId: w.oldestDueId }),
    });
  } else if (w.oldestLeaseAt !== null && w.oldestLeaseAt <= now - stuckMs) {
    await fire({
      key: 'stuck',
      kind: 'stuck',
      summary: `The claim on event ${w.oldestLeaseId} expired ${minutes(w.oldestLeaseAt)} minutes ago and nobody took it back: is serve's drain running?`,
      ...(w.oldestLeaseId === null ? {} : { eventId: w.oldestLeaseId }),
    });
  } else await resolve('stuck');

  // catch-up: the source's last run failed; resolved at its next good run.
  for (const source of catchUp.keys()) {
    const key = `catch-up:${source}`;
    const state = await store.catchUpState(source);
    if (state?.lastError != null) {
      await fire({
        key,
        kind: 'catch-up',
        summary: `Catch-up of ${source} failed: missed deliveries are not being recovered.`,
        source,
        error: state.lastError,
      });
    } else if (state?.lastOkAt != null) await resolve(key);
  }

  // ingest: deliveries refused (503) for a minute; resolved once deliveries are accepted again.
  const refused = ingestAlert(ingest, now);
  if (refused !== undefined) {
    try {
      await fire(refused, [...ingest.told]);
    } catch {
      // The database refuses this write too: serve tells the destinations directly.
      result.ingestUnstored = true;
    }
  } else {
    // Told directly and over before the database stored it: stored now, so it resolves.
    if (ingest.toldFacts !== undefined && ingest.told.size > 0 && !firing.has('ingest')) {
      if (await store.alerts.fireAlert(ingest.toldFacts, destinationsFor('ingest'), now, [...ingest.told])) firing.add('ingest');
    }
    ingest.told.clear();
    ingest.toldFacts = undefined;
    if (ingest.refusingSince === undefined && ingest.lastAcceptedAt !== undefined) await resolve('ingest');
  }
  return result;
}
