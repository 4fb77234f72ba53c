import type { AlertSettings } from '../config/alerts.js';
import { nextAttemptAt } from '../drain/backoff.js';
import type { Logger } from '../log.js';
import type { AlertSend, AlertStore } from '../store/alert-types.js';
import type { AlertMessageKind, AlertSendResult, AlertStatus } from '../vocabulary.js';
import { deliver } from './deliver.js';
import { alertMessage, type SecretScrubber } from './message.js';

const HOUR_MS = 3_600_000;

/** Sends claimed at once; a pass claims again until nothing is due (at most MAX_ROUNDS times). */
const CLAIM_BATCH = 16;
const MAX_ROUNDS = 20;

/** A destination that is down is tried again after a backoff: 5 s doubling up to 10 minutes. */
const SEND_BACKOFF = { baseSeconds: 5, maxSeconds: 600 };

/** A send failed this many times is given up (with the backoff above, about half a day). */
export const MAX_SEND_ATTEMPTS = 100;

/**
 * A summary waits for the alerts past the limit to stop coming for this long (a burst is
 * counted whole), or for the oldest of them to be this old (a flood that never stops).
 */
const SUMMARY_QUIET_MS = 60_000;
const SUMMARY_LATEST_MS = 10 * 60_000;

/** A claimed send's lease: its destination's timeout and this margin. A crash repeats it once, after the lease. */
const LEASE_MARGIN_MS = 30_000;

/** One try to tell a destination, as metrics count it. */
export interface AlertSendObservation {
  kind: AlertMessageKind;
  status: AlertStatus;
  destination: string;
  result: AlertSendResult;
}

export interface SendOptions {
  settings: AlertSettings;
  store: { alerts: AlertStore };
  owner: string;
  scrubber: SecretScrubber;
  logger: Logger;
  now: () => number;
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  random?: () => number;
  onSend?: (o: AlertSendObservation) => void;
}

/**
 * One pass of the sender: claims the due sends (under a lease: one receiver sends each),
 * tells each destination, settles each send while it still holds the lease. Past a
 * destination's `maxPerHour` a send is suppressed, and once they settle a summary counting
 * them is stored and sent (at most one an hour per destination).
 */
export async function sendDue(o: SendOptions): Promise<void> {
  const { settings, store, owner, logger } = o;
  const byName = new Map(settings.destinations.map((d) => [d.name, d]));
  const names = [...byName.keys()];
  const leaseMs = Math.max(...settings.destinations.map((d) => d.timeoutMs)) + LEASE_MARGIN_MS;
  for (let round = 0; round < MAX_ROUNDS && o.signal?.aborted !== true; round++) {
    const claimed = await store.alerts.claimAlertSends(owner, o.now(), leaseMs, names, CLAIM_BATCH);
    // Destinations in parallel, each one's sends in order.
    const perDestination = new Map<string, AlertSend[]>();
    for (const s of claimed) perDestination.set(s.destination, [...(perDestination.get(s.destination) ?? []), s]);
    await Promise.all([...perDestination.values()].map((sends) => sendInOrder(o, sends)));
    if (claimed.length < CLAIM_BATCH) break;
  }
  const now = o.now();
  for (const name of names) {
    const counted = await store.alerts.summarizeSuppressed(
      name,
      now,
      { newestBefore: now - SUMMARY_QUIET_MS, oldestBefore: now - SUMMARY_LATEST_MS },
      now - HOUR_MS,
      (n) => `${n} more alert${n === 1 ? '' : 's'} in the last hour were not sent here (alerts.maxPerHour is ${settings.maxPerHour}): see the admin page.`,
    );
    if (counted > 0) logger.warn({ destination: name, suppressed: counted }, 'alerts past maxPerHour: a summary is sent instead');
  }
  // A summary stored just now goes out at once.
  if (o.signal?.aborted !== true) {
    const summaries = await store.alerts.claimAlertSends(owner, o.now(), leaseMs, names, CLAIM_BATCH);
    await sendInOrder(o, summaries);
  }
}

async function sendInOrder(o: SendOptions, sends: readonly AlertSend[]): Promise<void> {
  const { settings, store, owner, logger } = o;
  for (const s of sends) {
    if (o.signal?.aborted === true) return; // left to its lease
    const destination = settings.destinations.find((d) => d.name === s.destination)!;
    const observe = (result: AlertSendResult) => o.onSend?.({ kind: s.alert.kind, status: s.transition, destination: s.destination, result });
    const fields = { alert: s.alert.key, status: s.transition, destination: s.destination, attempt: s.attempt };
    if (s.alert.kind !== 'summary' && (await store.alerts.sentSince(s.destination, o.now() - HOUR_MS)) >= settings.maxPerHour) {
      if (await store.alerts.finishAlertSend(s.id, owner, { status: 'suppressed' }, o.now())) observe('suppressed');
      continue;
    }
    const at = s.transition === 'resolved' ? (s.alert.resolvedAt ?? s.alert.firedAt) : s.alert.firedAt;
    const message = alertMessage(s.alert, s.transition, at, settings.adminUrl, o.scrubber);
    const r = await deliver(destination, message, `alert:${s.alert.id}:${s.transition}:${s.destination}`, o.now(), { env: o.env, signal: o.signal });
    const now = o.now();
    if (r.ok) {
      if (await store.alerts.finishAlertSend(s.id, owner, { status: 'sent' }, now)) observe('sent');
      logger.info(fields, 'alert sent');
    } else if (s.attempt >= MAX_SEND_ATTEMPTS) {
      if (await store.alerts.finishAlertSend(s.id, owner, { status: 'failed', error: r.error! }, now)) observe('given_up');
      logger.error({ ...fields, error: r.error }, 'alert not sent: given up');
    } else {
      const next = nextAttemptAt(now, s.attempt, SEND_BACKOFF, o.random ?? Math.random, r.retryAfterMs);
      if (await store.alerts.finishAlertSend(s.id, owner, { status: 'retry', error: r.error!, nextAttemptAt: next }, now)) observe('failed');
      logger.warn({ ...fields, error: r.error, retryInMs: next - now }, 'alert not sent: tried again later');
    }
  }
}
