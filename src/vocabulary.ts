/**
 * The receiver's closed lists of words, each defined once here; the types are derived from
 * them, and types, metrics labels, log lines and CLI flags use them (docs/contract.md lists
 * them for scripts). The SQLite CHECK constraints of the migrations spell the event and
 * effect statuses out in SQL; test/vocabulary.test.ts holds them to these lists.
 */

/**
 * An event's status: `pending` (waiting for the drain, maybe until its next attempt),
 * `processing` (claimed under a lease), `done` (every effect done, skipped or stale; or no
 * route applied when it arrived), `dead` (past maxAttempts, or a permanent failure).
 */
export const EVENT_STATUSES = ['pending', 'processing', 'done', 'dead'] as const;
export type EventStatus = (typeof EVENT_STATUSES)[number];

/**
 * How an event came in (`events.origin`): `webhook` (a delivery to POST /webhooks/:source),
 * `catch-up` (fetched from the sender's API), `test` (a delivery `receiver send-test` signed
 * and marked as a test; its routes are skipped unless it asked for them with --run-effects).
 */
export const EVENT_ORIGINS = ['webhook', 'catch-up', 'test'] as const;
export type EventOrigin = (typeof EVENT_ORIGINS)[number];

/** An effect key's status in the ledger (`effects.status`). */
export const EFFECT_STATUSES = ['running', 'done', 'failed'] as const;
export type EffectStatus = (typeof EFFECT_STATUSES)[number];

/**
 * How one effect attempt ended, as the drain reports it (logs, metrics): `ok`, `failed`,
 * `timeout` (it ran past effect.timeoutSeconds and was stopped; a retryable failure, which
 * the attempts table records as `failed` with a "timed out" error), `skipped` (the key is
 * already done), `stale` (an older version than the one applied), `busy` (another event
 * runs the key under a live lease).
 */
export const ATTEMPT_OUTCOMES = ['ok', 'failed', 'timeout', 'skipped', 'stale', 'busy'] as const;
export type AttemptOutcomeName = (typeof ATTEMPT_OUTCOMES)[number];

/** Outcomes in which an effect actually ran (and took time worth a histogram). */
export const RAN_OUTCOMES: readonly AttemptOutcomeName[] = ['ok', 'failed', 'timeout'];

/**
 * What `attempts.outcome` holds: how the attempt ended (an attempt outcome; a `timeout` is
 * recorded as `failed`), or `running` while an external effect runs (and after a crash or
 * a stop in the middle of one, until a claim takes its unit back and ends it as failed,
 * interrupted: drain/claim.ts).
 */
export type AttemptRowOutcome = Exclude<AttemptOutcomeName, 'timeout'> | 'running';

/**
 * What became of one request to POST /webhooks/:source (the `delivery` log line, metrics).
 * `replayed`: a source that dedupes by body got a body it already stored under another
 * delivery id within the retry horizon (a captured delivery sent again under a fresh id).
 */
export const DELIVERY_OUTCOMES = [
  'accepted',
  'duplicate',
  'conflict',
  'replayed',
  'handshake',
  'unauthorized',
  'too_large',
  'bad_request',
  'timeout',
  'not_found',
  'unavailable',
  'error',
] as const;
export type DeliveryOutcomeName = (typeof DELIVERY_OUTCOMES)[number];

/**
 * What became of a claimed event when the drain settled it: `done`, `retry`, `dead`, `lost`
 * (its lease was taken over: nothing changed) or `interrupted` (shutdown mid-effect: left to
 * its lease).
 */
export const SETTLE_STATUSES = ['done', 'retry', 'dead', 'lost', 'interrupted'] as const;
export type SettleStatus = (typeof SETTLE_STATUSES)[number];

/** How one catch-up run ended (`receiver_catch_up_runs_total`'s `result`). */
export const CATCH_UP_RESULTS = ['ok', 'error'] as const;
export type CatchUpResultName = (typeof CATCH_UP_RESULTS)[number];

/**
 * What a catch-up run counted (`receiver_catch_up_events_total`'s `outcome`): events the
 * sender's API `listed`, those `already_stored`, those `stored` from the API (Stripe), those
 * whose redelivery was asked (`redelivery_asked`: GitHub, Paddle, GitLab), and `failed` ones.
 */
export const CATCH_UP_OUTCOMES = ['listed', 'already_stored', 'stored', 'redelivery_asked', 'failed', 'skipped'] as const;
export type CatchUpOutcomeName = (typeof CATCH_UP_OUTCOMES)[number];

/**
 * How log lines look (`log.format`, --log-format, $RECEIVER_LOG_FORMAT): `json` lines,
 * `pretty` lines for a person at a terminal, or `auto` (pretty on a terminal, else JSON).
 */
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Whether `value` is one of `words` (narrowing it). */
export function isOneOf<T extends string>(words: readonly T[], value: string): value is T {
  return (words as readonly string[]).includes(value);
}

/**
 * What an alert is about (`alerts.kind`, a destination's `on`): `dead` (a route of an event
 * went dead), `failing` (a route failed `failingAfter` attempts in a row), `stuck` (due work
 * nobody takes), `catch-up` (a catch-up run failed), `ingest` (deliveries refused).
 */
export const ALERT_KINDS = ['dead', 'failing', 'stuck', 'catch-up', 'ingest'] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];

/**
 * What a message to a destination is about: an alert kind, `summary` (the alerts past a
 * destination's `maxPerHour`, counted) or `test` (`receiver alerts test`).
 */
export type AlertMessageKind = AlertKind | 'summary' | 'test';

/** An alert's status, and the two transitions a destination is told about. */
export const ALERT_STATUSES = ['firing', 'resolved'] as const;
export type AlertStatus = (typeof ALERT_STATUSES)[number];

/**
 * What became of one try to tell a destination (`receiver_alerts_total`'s `result`): `sent`
 * (2xx, exit 0), `failed` (tried again later), `suppressed` (past `maxPerHour`: counted into
 * a summary), `given_up` (failed too many times).
 */
export const ALERT_SEND_RESULTS = ['sent', 'failed', 'suppressed', 'given_up'] as const;
export type AlertSendResult = (typeof ALERT_SEND_RESULTS)[number];
