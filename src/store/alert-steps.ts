import { ALERT_COLUMNS, toAlert, type AlertDbRow, type AlertFacts, type AlertSend, type AlertStore, type RouteRun, type SendFinish } from './alert-types.js';
import type { StepRunner } from './ops-steps.js';
import { changes, first, memo, rows, sqlText, type Dialect, type Steps } from './sql.js';
import type { AlertStatus } from '../vocabulary.js';

/**
 * Alerts' reads and writes, written once for both stores (see sql.ts and alert-types.ts).
 * What counts as a failure is read from the drain's tables here and nowhere else: the
 * detector (src/alerts/detect.ts) sees only these answers.
 */

/** The send columns a claim returns, prefixed `s.`. */
const SEND_COLUMNS = 'id, alert_id, transition, destination, attempts';

const statements = memo((d: Dialect) => {
  const text = (build: (p: () => string) => string) => sqlText(d, build);
  return {
    // A dead event's routes whose newest attempt failed, without a firing alert of their key.
    deadRoutes: text(
      (p) => `SELECT e.id AS event_id, e.source, e.delivery_id, a.route, a.error
        FROM events e JOIN attempts a ON a.event_id = e.id
        WHERE e.status = 'dead' AND e.finished_at >= ${p()}
          AND a.id = (SELECT max(l.id) FROM attempts l WHERE l.event_id = e.id AND l.route = a.route)
          AND a.outcome = 'failed'
          AND NOT EXISTS (SELECT 1 FROM alerts x WHERE x.alert_key = 'dead:' || e.id || ':' || a.route AND x.status = 'firing')
        ORDER BY e.id LIMIT ${p()}`,
    ),
    deadRecovered: `SELECT x.alert_key FROM alerts x LEFT JOIN events e ON e.id = x.event_id
        WHERE x.kind = 'dead' AND x.status = 'firing' AND (e.id IS NULL OR e.status = 'done')`,
    routeRuns: text(
      (p) =>
        `SELECT outcome, error FROM attempts${d.indexedBy('attempts_route')} WHERE route = ${p()} AND outcome IN ('ok', 'failed') ORDER BY id DESC LIMIT ${p()}`,
    ),
    waiting: `SELECT
        (SELECT min(next_attempt_at) FROM events${d.indexedBy('events_due')} WHERE status = 'pending') AS due_at,
        (SELECT min(lease_expires_at) FROM units${d.indexedBy('units_leased')} WHERE status = 'processing') AS lease_at`,
    dueId: text((p) => `SELECT id FROM events WHERE status = 'pending' AND next_attempt_at = ${p()} ORDER BY id LIMIT 1`),
    // A lease is a unit's: the event of the unit whose lease it is.
    leaseId: text((p) => `SELECT event_id AS id FROM units WHERE status = 'processing' AND lease_expires_at = ${p()} ORDER BY id LIMIT 1`),
    firing: `SELECT ${ALERT_COLUMNS} FROM alerts WHERE status = 'firing' ORDER BY id`,
    // The unique index on firing keys decides: a key already firing stores nothing.
    fire: text(
      (p) => `INSERT INTO alerts (alert_key, kind, status, summary, source, route, event_id, delivery_id, error, fired_at)
        VALUES (${p()}, ${p()}, 'firing', ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT DO NOTHING RETURNING id`,
    ),
    send: text(
      (p) => `INSERT INTO alert_sends (alert_id, transition, destination, next_attempt_at) VALUES (${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT DO NOTHING`,
    ),
    told: text((p) => `UPDATE alert_sends SET status = 'sent', sent_at = ${p()} WHERE alert_id = ${p()} AND transition = 'firing' AND destination = ${p()}`),
    resolve: text((p) => `UPDATE alerts SET status = 'resolved', resolved_at = ${p()} WHERE alert_key = ${p()} AND status = 'firing' RETURNING id`),
    // Whoever was told it fired (or will be) is told it ended.
    resolvedSends: text(
      (p) => `INSERT INTO alert_sends (alert_id, transition, destination, next_attempt_at)
        SELECT alert_id, 'resolved', destination, ${p()} FROM alert_sends WHERE alert_id = ${p()} AND transition = 'firing' AND status <> 'suppressed'
        ON CONFLICT DO NOTHING`,
    ),
    claim: text(
      (p) => `UPDATE alert_sends SET status = 'sending', lease_owner = ${p()}, lease_expires_at = ${p()}, attempts = attempts + 1
        WHERE id IN (SELECT s.id FROM alert_sends s
          WHERE s.destination IN (${d.textList(p())})
            AND ((s.status = 'pending' AND s.next_attempt_at <= ${p()}) OR (s.status = 'sending' AND s.lease_expires_at <= ${p()}))
            AND (s.transition = 'firing' OR NOT EXISTS (SELECT 1 FROM alert_sends f WHERE f.alert_id = s.alert_id
                 AND f.destination = s.destination AND f.transition = 'firing' AND f.status IN ('pending', 'sending')))
          ORDER BY s.id LIMIT ${p()}${d.takeUnlocked})
        RETURNING ${SEND_COLUMNS}`,
    ),
    alertsById: text((p) => `SELECT ${ALERT_COLUMNS} FROM alerts WHERE id IN (${d.idList(p())})`),
    sentSince: text((p) => `SELECT count(*) AS n FROM alert_sends WHERE destination = ${p()} AND status = 'sent' AND sent_at >= ${p()}`),
    // Guarded by the lease: a sender whose lease another took changes nothing.
    finish: text(
      (
        p,
      ) => `UPDATE alert_sends SET status = ${p()}, sent_at = ${p()}, next_attempt_at = ${p()}, last_error = ${p()}, lease_owner = NULL, lease_expires_at = NULL
        WHERE id = ${p()} AND lease_owner = ${p()} AND status = 'sending'`,
    ),
    suppressed: text(
      (p) =>
        `SELECT count(*) AS n, min(sent_at) AS oldest, max(sent_at) AS newest FROM alert_sends WHERE destination = ${p()} AND status = 'suppressed' AND summary_id IS NULL`,
    ),
    lastSummary: text(
      (p) => `SELECT max(x.fired_at) AS at FROM alerts x JOIN alert_sends s ON s.alert_id = x.id WHERE x.kind = 'summary' AND s.destination = ${p()}`,
    ),
    summary: text(
      (p) =>
        `INSERT INTO alerts (alert_key, kind, status, summary, fired_at, resolved_at) VALUES (${p()}, 'summary', 'resolved', ${p()}, ${p()}, ${p()}) RETURNING id`,
    ),
    count: text((p) => `UPDATE alert_sends SET summary_id = ${p()} WHERE destination = ${p()} AND status = 'suppressed' AND summary_id IS NULL`),
    summaryText: text((p) => `UPDATE alerts SET summary = ${p()} WHERE id = ${p()}`),
    dropSummary: text((p) => `DELETE FROM alerts WHERE id = ${p()}`),
  };
});

export function* deadRoutes(d: Dialect, since: number, limit: number) {
  const found = yield* rows<{ event_id: number; source: string; delivery_id: string; route: string; error: string | null }>(statements(d).deadRoutes, [
    since,
    limit,
  ]);
  return found.map((r) => ({ eventId: Number(r.event_id), source: r.source, deliveryId: r.delivery_id, route: r.route, error: r.error }));
}

export function* deadRecovered(d: Dialect): Steps<string[]> {
  return (yield* rows<{ alert_key: string }>(statements(d).deadRecovered)).map((r) => r.alert_key);
}

export function* routeRuns(d: Dialect, route: string, limit: number): Steps<RouteRun[]> {
  return yield* rows<RouteRun>(statements(d).routeRuns, [route, limit]);
}

export function* waitingWork(d: Dialect) {
  const s = statements(d);
  const w = (yield* first<{ due_at: number | null; lease_at: number | null }>(s.waiting))!;
  const dueAt = w.due_at === null ? null : Number(w.due_at);
  const leaseAt = w.lease_at === null ? null : Number(w.lease_at);
  const dueId = dueAt === null ? undefined : (yield* first<{ id: number }>(s.dueId, [dueAt]))?.id;
  const leaseId = leaseAt === null ? undefined : (yield* first<{ id: number }>(s.leaseId, [leaseAt]))?.id;
  return {
    oldestDueAt: dueAt,
    oldestDueId: dueId === undefined ? null : Number(dueId),
    oldestLeaseAt: leaseAt,
    oldestLeaseId: leaseId === undefined ? null : Number(leaseId),
  };
}

export function* firingAlerts(d: Dialect) {
  return (yield* rows<AlertDbRow>(statements(d).firing)).map(toAlert);
}

export function* fireAlert(d: Dialect, f: AlertFacts, destinations: readonly string[], now: number, told: readonly string[] = []): Steps<boolean> {
  const s = statements(d);
  const stored = yield* first<{ id: number }>(s.fire, [
    f.key,
    f.kind,
    f.summary,
    f.source ?? null,
    f.route ?? null,
    f.eventId ?? null,
    f.deliveryId ?? null,
    f.error ?? null,
    now,
  ]);
  if (stored === undefined) return false;
  for (const destination of destinations) {
    yield* changes(s.send, [stored.id, 'firing', destination, now]);
    if (told.includes(destination)) yield* changes(s.told, [now, stored.id, destination]);
  }
  return true;
}

export function* resolveAlert(d: Dialect, key: string, now: number): Steps<boolean> {
  const s = statements(d);
  const resolved = yield* first<{ id: number }>(s.resolve, [now, key]);
  if (resolved === undefined) return false;
  yield* changes(s.resolvedSends, [now, resolved.id]);
  return true;
}

export function* claimAlertSends(d: Dialect, owner: string, now: number, leaseMs: number, destinations: readonly string[], limit: number): Steps<AlertSend[]> {
  const s = statements(d);
  const claimed = yield* rows<{ id: number; alert_id: number; transition: AlertStatus; destination: string; attempts: number }>(s.claim, [
    owner,
    now + leaseMs,
    d.ids(destinations),
    now,
    now,
    limit,
  ]);
  if (claimed.length === 0) return [];
  const alerts = new Map(
    (yield* rows<AlertDbRow>(s.alertsById, [d.ids([...new Set(claimed.map((c) => Number(c.alert_id)))])])).map((r) => [Number(r.id), toAlert(r)]),
  );
  // RETURNING gives no order: oldest first.
  return claimed
    .map((c) => ({
      id: Number(c.id),
      transition: c.transition,
      destination: c.destination,
      attempt: Number(c.attempts),
      alert: alerts.get(Number(c.alert_id))!,
    }))
    .sort((a, b) => a.id - b.id);
}

export function* sentSince(d: Dialect, destination: string, since: number): Steps<number> {
  return Number((yield* first<{ n: number }>(statements(d).sentSince, [destination, since]))?.n ?? 0);
}

export function* finishAlertSend(d: Dialect, id: number, owner: string, finish: SendFinish, now: number): Steps<boolean> {
  const [status, sentAt, nextAt, error] =
    finish.status === 'sent'
      ? ['sent', now, now, null]
      : finish.status === 'suppressed'
        ? // sent_at: when it was suppressed (the summary waits for the oldest to settle).
          ['suppressed', now, now, null]
        : finish.status === 'retry'
          ? ['pending', null, finish.nextAttemptAt, finish.error]
          : ['failed', null, now, finish.error];
  return (yield* changes(statements(d).finish, [status, sentAt, nextAt, error, id, owner])) === 1;
}

export function* summarizeSuppressed(
  d: Dialect,
  destination: string,
  now: number,
  ready: { newestBefore: number; oldestBefore: number },
  lastSince: number,
  text: (count: number) => string,
): Steps<number> {
  const s = statements(d);
  const waiting = (yield* first<{ n: number; oldest: number | null; newest: number | null }>(s.suppressed, [destination]))!;
  if (Number(waiting.n) === 0 || waiting.oldest === null || waiting.newest === null) return 0;
  if (Number(waiting.newest) > ready.newestBefore && Number(waiting.oldest) > ready.oldestBefore) return 0;
  const last = (yield* first<{ at: number | null }>(s.lastSummary, [destination]))?.at;
  if (last !== null && last !== undefined && Number(last) >= lastSince) return 0;
  const id = (yield* first<{ id: number }>(s.summary, [`summary:${destination}:${now}`, text(Number(waiting.n)), now, now]))!.id;
  // Another receiver may have counted them meanwhile (PostgreSQL): then this summary goes.
  const counted = yield* changes(s.count, [id, destination]);
  if (counted === 0) {
    yield* changes(s.dropSummary, [id]);
    return 0;
  }
  if (counted !== Number(waiting.n)) yield* changes(s.summaryText, [text(counted), id]);
  yield* changes(s.send, [id, 'firing', destination, now]);
  return counted;
}

export function alertsOn(d: Dialect, run: StepRunner): AlertStore {
  return {
    deadRoutes: (since, limit) => run.alone('alerts', deadRoutes(d, since, limit)),
    deadRecovered: () => run.alone('alerts', deadRecovered(d)),
    routeRuns: (route, limit) => run.alone('alerts', routeRuns(d, route, limit)),
    waitingWork: () => run.snapshot('alerts', () => waitingWork(d)),
    firingAlerts: () => run.alone('alerts', firingAlerts(d)),
    fireAlert: (facts, destinations, now, told) => run.write('alerts', () => fireAlert(d, facts, destinations, now, told)),
    resolveAlert: (key, now) => run.write('alerts', () => resolveAlert(d, key, now)),
    claimAlertSends: (owner, now, leaseMs, destinations, limit) => run.write('alerts', () => claimAlertSends(d, owner, now, leaseMs, destinations, limit)),
    sentSince: (destination, since) => run.alone('alerts', sentSince(d, destination, since)),
    finishAlertSend: (id, owner, finish, now) => run.write('alerts', () => finishAlertSend(d, id, owner, finish, now)),
    summarizeSuppressed: (destination, now, ready, lastSince, text) =>
      run.write('alerts', () => summarizeSuppressed(d, destination, now, ready, lastSince, text)),
  };
}
