import type { AlertMessageKind, AlertStatus } from '../vocabulary.js';

/**
 * What alerts (src/alerts/) need from the store.
 *
 * Glossary (alerts)
 * - alert key: what an alert is about, one at a time: `dead:<event id>:<route>`,
 *   `failing:<route>`, `stuck`, `catch-up:<source>`, `ingest`. At most one alert per key is
 *   firing (a unique index): of several receivers that see the same failure, one stores it.
 * - alert: one firing of a key, until it is resolved; its facts are kept as they were when
 *   it fired.
 * - send: telling one destination about one transition (firing, resolved) of one alert,
 *   stored with the transition and claimed under a lease like an event, so it goes out once
 *   (once more after a crash in the middle of it). `suppressed` past the destination's
 *   `maxPerHour`: counted into a summary instead.
 */

/** The facts of an alert, as the detector finds them. */
export interface AlertFacts {
  key: string;
  kind: AlertMessageKind;
  /** One sentence a person can act on. */
  summary: string;
  source?: string | undefined;
  route?: string | undefined;
  eventId?: number | undefined;
  deliveryId?: string | undefined;
  error?: string | undefined;
}

export interface AlertRecord extends AlertFacts {
  id: number;
  status: AlertStatus;
  firedAt: number;
  resolvedAt: number | null;
}

/** A route of a dead event whose last attempt failed. */
export interface DeadRoute {
  eventId: number;
  source: string;
  deliveryId: string;
  route: string;
  error: string | null;
}

/** An attempt that ran (ok or failed), newest first. */
export interface RouteRun {
  outcome: 'ok' | 'failed';
  error: string | null;
}

/** What the stuck check reads: the oldest due work and the oldest expired lease. */
export interface WaitingWork {
  /** The earliest `next_attempt_at` of a pending event, and that event. */
  oldestDueAt: number | null;
  oldestDueId: number | null;
  /** The earliest `lease_expires_at` of a claimed event, and that event. */
  oldestLeaseAt: number | null;
  oldestLeaseId: number | null;
}

export interface AlertSend {
  id: number;
  transition: AlertStatus;
  destination: string;
  /** This try's number, from 1. */
  attempt: number;
  alert: AlertRecord;
}

/** How a claimed send ended. */
export type SendFinish =
  { status: 'sent' } | { status: 'suppressed' } | { status: 'retry'; error: string; nextAttemptAt: number } | { status: 'failed'; error: string };

export interface AlertStore {
  /** Routes of dead events (dead since `since`) whose last attempt failed and whose alert is not firing. */
  deadRoutes(since: number, limit: number): Promise<DeadRoute[]>;
  /** The keys of firing `dead` alerts whose event is done or gone. */
  deadRecovered(): Promise<string[]>;
  /** A route's newest attempts that ran, newest first, at most `limit`. */
  routeRuns(route: string, limit: number): Promise<RouteRun[]>;
  waitingWork(): Promise<WaitingWork>;
  /** Every firing alert, oldest first. */
  firingAlerts(): Promise<AlertRecord[]>;
  /**
   * Stores the alert as firing unless its key is firing already; when stored, a send to each
   * of `destinations` in the same transaction (those in `told` recorded as sent: they were
   * told while the database could not store it). Says whether it stored it.
   */
  fireAlert(facts: AlertFacts, destinations: readonly string[], now: number, told?: readonly string[]): Promise<boolean>;
  /**
   * Resolves the key's firing alert; when this call resolved it, a `resolved` send to each
   * destination its firing send was not suppressed for, in the same transaction.
   */
  resolveAlert(key: string, now: number): Promise<boolean>;
  /**
   * Claims up to `limit` due sends to `destinations` (pending and due, or sending under an
   * expired lease), oldest first, for `owner` until `now + leaseMs`. A `resolved` send is due
   * only once its `firing` send to the same destination is settled.
   */
  claimAlertSends(owner: string, now: number, leaseMs: number, destinations: readonly string[], limit: number): Promise<AlertSend[]>;
  /** Sends to `destination` that went out since `since`. */
  sentSince(destination: string, since: number): Promise<number>;
  /** Settles a claimed send, only while `owner` holds its lease; says whether it did. */
  finishAlertSend(id: number, owner: string, finish: SendFinish, now: number): Promise<boolean>;
  /**
   * When sends to `destination` were suppressed, the newest of them before
   * `ready.newestBefore` or the oldest before `ready.oldestBefore`, and no summary went to
   * it since `lastSince`: stores a `summary` alert counting them, with a send to
   * `destination`, and marks them counted. Returns how many it counted.
   */
  summarizeSuppressed(
    destination: string,
    now: number,
    ready: { newestBefore: number; oldestBefore: number },
    lastSince: number,
    text: (count: number) => string,
  ): Promise<number>;
}

export interface AlertDbRow {
  id: number;
  alert_key: string;
  kind: string;
  status: string;
  summary: string;
  source: string | null;
  route: string | null;
  event_id: number | null;
  delivery_id: string | null;
  error: string | null;
  fired_at: number;
  resolved_at: number | null;
}

export const ALERT_COLUMNS = 'id, alert_key, kind, status, summary, source, route, event_id, delivery_id, error, fired_at, resolved_at';

const opt = <T>(v: T | null): T | undefined => (v === null ? undefined : v);

export function toAlert(r: AlertDbRow): AlertRecord {
  return {
    id: Number(r.id),
    key: r.alert_key,
    kind: r.kind as AlertMessageKind,
    status: r.status as AlertStatus,
    summary: r.summary,
    source: opt(r.source),
    route: opt(r.route),
    eventId: r.event_id === null ? undefined : Number(r.event_id),
    deliveryId: opt(r.delivery_id),
    error: opt(r.error),
    firedAt: Number(r.fired_at),
    resolvedAt: r.resolved_at === null ? null : Number(r.resolved_at),
  };
}
