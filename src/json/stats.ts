import type { Config } from '../config/load.js';
import type { StoreStats } from '../store/ops-types.js';
import type { CatchUpState } from '../store/catch-up-types.js';
import type { AlertRecord } from '../store/alert-types.js';
import { laneOf } from '../effects/routes.js';

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
export const hours = (ms: number) => Math.round((ms / HOUR_MS) * 10) / 10;
const days = (ms: number) => Math.round((ms / DAY_MS) * 10) / 10;

/**
 * When the database's first event is still stored, nothing was ever purged, and the oldest
 * stored event is as old as the database: its received_at. Null once the first was purged.
 */
function databaseSince(s: StoreStats): number | null {
  if (s.firstEventReceivedAt === null) return null;
  return Math.min(s.firstEventReceivedAt, ...s.sources.map((x) => x.oldestReceivedAt));
}

/** Each lane: the routes configured in it, its pending and running units, and how long its oldest pending unit's event has waited. */
function lanesJson(s: StoreStats, config: Config, now: number) {
  const routes = new Map<string, string[]>();
  for (const r of config.routes) routes.set(laneOf(r), [...(routes.get(laneOf(r)) ?? []), r.name]);
  const seen = new Map(s.lanes.map((l) => [l.lane, l]));
  return [...new Set([...routes.keys(), ...seen.keys()])].sort().map((lane) => {
    const l = seen.get(lane);
    const oldest = l?.oldestPendingReceivedAt ?? null;
    return {
      lane,
      routes: routes.get(lane) ?? [],
      configured: routes.has(lane),
      pending: l?.pending ?? 0,
      running: l?.running ?? 0,
      oldestPendingReceivedAt: iso(oldest),
      oldestPendingAgeSeconds: oldest === null ? null : Math.max(0, Math.round((now - oldest) / 1000)),
    };
  });
}

/** The JSON document of `stats --json` (and of the admin API's stats route; the overview page renders it). */
export function statsJson(s: StoreStats, config: Config, now: number, catchUp: readonly CatchUpState[] = [], alerts: readonly AlertRecord[] = []) {
  const seen = new Map(s.sources.map((x) => [x.source, x]));
  const names = [...new Set([...config.sources.keys(), ...seen.keys()])].sort();
  const entries = s.effectsByStatus.running + s.effectsByStatus.done + s.effectsByStatus.failed;
  return {
    at: iso(now),
    // The first event this database received, while it is still stored (nothing purged yet).
    firstEventAt: iso(databaseSince(s)),
    events: { ...s.byStatus, total: s.byStatus.pending + s.byStatus.processing + s.byStatus.done + s.byStatus.dead },
    duplicates: s.duplicates,
    conflicts: s.conflicts,
    dead: s.byStatus.dead,
    stuckClaims: { count: s.stuckClaims, oldestLeaseExpiredAt: iso(s.oldestStuckLeaseExpiresAt) },
    // How far back dedupe keys reach per source, against how long its sender retries.
    sources: names.map((name) => {
      const row = seen.get(name);
      const horizon = config.sources.get(name)?.retryHorizonHours ?? null;
      const ageHours = row === undefined ? null : hours(now - row.oldestReceivedAt);
      return {
        source: name,
        configured: config.sources.has(name),
        events: row?.events ?? 0,
        oldestReceivedAt: iso(row?.oldestReceivedAt ?? null),
        oldestKeyAgeHours: ageHours,
        retryHorizonHours: horizon,
        keysCoverHorizon: ageHours === null || horizon === null ? null : ageHours >= horizon,
      };
    }),
    effects: s.effectsByStatus,
    // The effect ledger: one row per effect key, kept until `purge --ledger-days`.
    ledger: {
      entries,
      bytes: s.ledger.bytes,
      bytesPerEntry: entries === 0 ? null : Math.round(s.ledger.bytes / entries),
      oldestFinishedAt: iso(s.ledger.oldestFinishedAt),
      oldestFinishedAgeDays: s.ledger.oldestFinishedAt === null ? null : days(now - s.ledger.oldestFinishedAt),
    },
    // Every configured route's lane, and any other with work waiting or running: what waits, what runs.
    lanes: lanesJson(s, config, now),
    // Sources with catchUp configured, and any that ran before: where each stands.
    catchUp: [...new Set([...config.catchUp.keys(), ...catchUp.map((c) => c.source)])].sort().map((name) => {
      const c = catchUp.find((x) => x.source === name);
      return {
        source: name,
        configured: config.catchUp.has(name),
        everyMinutes: config.catchUp.get(name)?.everyMinutes ?? null,
        firstConfiguredAt: iso(c?.configuredAt ?? null),
        resumeAt: iso(c?.resumeAt ?? null),
        // A run stopped at its request budget: the next lists only up to here first.
        olderPartUntil: iso(c?.partial?.until ?? null),
        lastRunAt: iso(c?.lastRunAt ?? null),
        lastOkAt: iso(c?.lastOkAt ?? null),
        lastError: c?.lastError ?? null,
        lastCounts: c?.lastCounts ?? null,
      };
    }),
    // Open (firing) alerts, oldest first; fields that do not apply are null.
    alerts: alerts.map((a) => ({
      key: a.key,
      kind: a.kind,
      summary: a.summary,
      source: a.source ?? null,
      route: a.route ?? null,
      eventId: a.eventId ?? null,
      firedAt: iso(a.firedAt),
    })),
  };
}
